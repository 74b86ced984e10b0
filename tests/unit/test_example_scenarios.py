"""Every example scenario loads through the real config loader, and docs/examples.md lists each one with the very
commands its opening comment gives (tests/integration/test_example_commands.py runs them)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from loadgen.config.scenario import load_scenario
from tests.commands import ROOT, block_commands, comment_commands

EXAMPLES = sorted((ROOT / "loadgen" / "examples").glob("*.yaml"))
PAGE = ROOT / "docs" / "examples.md"
# Commands a file gives as an alternative to the simulator, named in the page's prose rather than its block.
IN_PROSE = ("vllm serve ",)


def _sections() -> dict[str, str]:
    """docs/examples.md's sections by the file each heading names (`## demo.yaml: …`)."""
    parts = re.split(r"^## (\S+\.yaml):.*$", PAGE.read_text(encoding="utf-8"), flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_the_example_validates(example: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # paths inside (a trace's) are relative to a clone's root, where the commands run
    scenario = load_scenario(example)
    assert scenario.variants and comment_commands(example.read_text(encoding="utf-8")), example.name


def test_the_examples_page_lists_each_example_with_its_commands() -> None:
    sections = _sections()
    assert sorted(sections) == [p.name for p in EXAMPLES]
    for example in EXAMPLES:
        section = sections[example.name]
        blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
        assert len(blocks) == 1, f"{example.name}: one command block, not {len(blocks)}"
        listed = block_commands(blocks[0])
        given = comment_commands(example.read_text(encoding="utf-8"))
        assert listed == block_commands("\n".join(c for c in given if not c.startswith(IN_PROSE))), example.name
        prose = " ".join(section.split())
        assert all(c in prose for c in given if c.startswith(IN_PROSE)), example.name
