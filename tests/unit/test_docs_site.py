"""The docs' content against the code: scenarios shown validate, every exit code and error class is explained, every
`--option` a `loadgen` command shows exists, and the README's links land on files that exist (mkdocs build --strict, in
scripts/test, checks the site's own links)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from loadgen.config.scenario import parse_scenario
from loadgen.exit_codes import ExitCode
from loadgen.measure.aggregate import NOT_SENT
from loadgen.measure.records import ErrorKind

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_every_yaml_block_parses_and_every_scenario_shown_validates() -> None:
    scenarios = 0
    for page in PAGES:
        for block in re.findall(r"```yaml\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.DOTALL):
            docs = list(yaml.safe_load_all(block))  # Kubernetes objects come several to a block
            if len(docs) == 1 and isinstance(docs[0], dict) and "variants" in docs[0]:
                assert parse_scenario(block, page.name).variants
                scenarios += 1
    assert scenarios >= 6  # README, getting started, scenarios, traffic (2), live: the scenarios the pages show


def test_troubleshooting_explains_every_exit_code_and_error_class() -> None:
    text = (ROOT / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    headings = re.findall(r"^### (.+)$", text, flags=re.MULTILINE)
    codes = {h.split(" ")[0] for h in headings}
    assert {str(int(c)) for c in ExitCode} <= codes and "128" in codes
    assert {f"`{k}`" for k in (*ErrorKind.ALL, NOT_SENT)} <= set(headings)


def test_readme_links_land_on_files() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = [t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in t]
    assert len(targets) >= 15
    assert [t for t in targets if t and not (ROOT / t).exists()] == []


def _unknown_options(text: str) -> list[str]:
    """`--options` of the `loadgen …` commands a page shows (inline or in a shell block) that their parser lacks."""
    import argparse

    from loadgen.cli import _parser
    from loadgen.sim.__main__ import build_parser

    def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        found = [a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        return dict(found[0]) if found else {}

    shown = re.findall(r"`(loadgen [^`]+)`", text)
    for block in re.findall(r"```(?:bash|sh)\n(.*?)```", text, flags=re.DOTALL):
        shown += [line for line in block.replace("\\\n", " ").splitlines() if line.startswith("loadgen ")]
    root, unknown = _parser(), []
    for command in shown:
        words = command.split("#")[0].split()
        parser, i = root, 1
        while i < len(words) and words[i] in subcommands(parser):
            parser = build_parser() if words[i] == "sim" else subcommands(parser)[words[i]]
            i += 1
        options = {o for a in parser._actions for o in a.option_strings}
        for word in words[i:]:
            flag = re.sub(r"[^a-z0-9-]+$", "", word.split("=")[0])
            if flag.startswith("--") and flag not in options:
                unknown.append(f"{flag} in `{command.strip()}`")
    return unknown


def test_every_option_a_page_shows_exists() -> None:
    assert [u for page in PAGES for u in _unknown_options(page.read_text(encoding="utf-8"))] == []
    assert _unknown_options("`loadgen run s.yaml --wrkers 2`\n```bash\nloadgen k8s run x.yaml --keep --kep\n```") == [
        "--wrkers in `loadgen run s.yaml --wrkers 2`",
        "--kep in `loadgen k8s run x.yaml --keep --kep`",
    ]
