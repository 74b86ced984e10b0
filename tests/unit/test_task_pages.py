"""The task pages' commands as a reader pastes them.

Each shell block's commands must be known: a `loadgen` command parses with loadgen's own
parser; one that names a scenario file of the repository (`loadgen/examples/demo.yaml`) has that file, with its
`--set` flags applied, validated as the command would validate it, and a sweep's plan parsed; a `loadgen sim` in the
same block serves every variant that scenario sends to (its name on the port of its base_url). Every block says how
tests/integration/test_task_page_blocks.py runs it, as pasted (a marker above it: `<!-- page-test: KIND … -->`), so
a new block without one fails here. The CI pages' workflows pass actionlint, as .github/workflows/ do
(tests/k8s_chart/test_release.py)."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
TASK_PAGES = ("sweep.md", "cost.md", "nightly-ci.md")
WORKFLOW_PAGES = ("ci.md", "nightly-ci.md")
# What else a task page's block may run: shell plumbing, and the cluster's own tool for one-time setup.
OTHER = re.compile(r"(sleep \d+|kill %1|kubectl (create namespace|-n \S+ create secret generic) .+)$")


def commands(block: str) -> list[str]:
    """A shell block's commands, one string each: continuations joined, comments dropped, `a && b` two commands."""
    out = []
    for line in block.replace("\\\n", " ").splitlines():
        current: list[str] = []
        for word in [*shlex.split(line, comments=True), "&&"]:
            if word == "&&":
                if current:
                    out.append(shlex.join(current))
                current = []
            else:
                current.append(word)
    return out


def _blocks(page: str) -> list[list[str]]:
    text = (DOCS / page).read_text(encoding="utf-8")
    return [commands(b) for b in re.findall(r"```(?:bash|sh)\n(.*?)```", text, flags=re.DOTALL)]


def _parse(command: str) -> tuple[str, object]:
    """(subcommand, parsed args) by loadgen's own parsers; a bad option or value fails here as it would there."""
    from loadgen.cli import _parser
    from loadgen.sim.__main__ import build_parser

    argv = [w for w in shlex.split(command)[1:] if w != "&"]  # `&`: started in the background, as the simulator is
    if argv[0] == "sim":
        return "sim", build_parser().parse_args(argv[1:])
    return " ".join(argv[:2]) if argv[0] == "k8s" else argv[0], _parser().parse_args(argv)


def _sim_ports(args: object) -> dict[int, str]:
    ports = {}
    for spec in args.variant:  # type: ignore[attr-defined]
        name, _, port = spec.partition(":")
        ports[int(port)] = name.split("=")[0]
    return ports


@pytest.mark.parametrize("page", TASK_PAGES)
def test_every_command_parses_and_every_scenario_it_names_validates(page: str) -> None:
    from loadgen.cli.scenario_args import read_with_overrides
    from loadgen.cli.sweep import _sweep_plan

    checked = 0
    for block in _blocks(page):
        sim: dict[int, str] = {}
        for command in block:
            if not command.startswith("loadgen "):
                assert OTHER.match(command), f"{page}: {command!r}: neither loadgen nor a known command"
                continue
            sub, args = _parse(command)
            if sub == "sim":
                sim = _sim_ports(args)
            if sub in ("run", "sweep") and (ROOT / args.file).exists():  # type: ignore[attr-defined]
                scenario = read_with_overrides(ROOT / args.file, args).validate()  # type: ignore[attr-defined]
                if sub == "sweep":
                    assert not isinstance(_sweep_plan(args), str), (command, _sweep_plan(args))  # type: ignore[arg-type]
                served = {v.name: sim.get(urlsplit(str(v.base_url)).port or 0) for v in scenario.variants}
                assert served == {v.name: v.name for v in scenario.variants}, f"{page}: {command!r}: {served}"
                checked += 1
    if page != "nightly-ci.md":  # its scenario is the reader's own, in the cluster
        assert checked, f"{page}: no command runs a scenario of the repository against the simulator"


MARKER_KINDS = ("run", "cluster", "cluster-setup")  # tests/integration/test_task_page_blocks.py's KINDS


@pytest.mark.parametrize("page", TASK_PAGES)
def test_every_block_says_how_it_is_run(page: str) -> None:
    from tests.commands import readme_blocks

    blocks = readme_blocks((DOCS / page).read_text(encoding="utf-8"), "page-test")
    assert len(blocks) == len(_blocks(page))
    unmarked = [(b.line, b.code.strip()) for b in blocks if b.kind not in MARKER_KINDS]
    assert unmarked == [], f"{page}: blocks with no `<!-- page-test: {'|'.join(MARKER_KINDS)} -->` above: {unmarked}"
    for b in blocks:
        assert b.arg == "" or re.fullmatch(r"given( \S+)+", b.arg), f"{page} line {b.line}: {b.arg!r}"
        clustered = any(c.startswith(("kubectl ", "loadgen k8s ")) for c in commands(b.code))
        assert clustered == b.kind.startswith("cluster"), f"{page} line {b.line}: a cluster command is `cluster`"


def test_a_wrong_command_is_caught() -> None:
    with pytest.raises(SystemExit):
        _parse("loadgen sweep loadgen/examples/demo.yaml --serch 1:8")
    assert _sim_ports(_parse("loadgen sim --variant a:8001 --variant b=int8:8002")[1]) == {8001: "a", 8002: "b"}
    assert not OTHER.match("kubectl delete namespace loadtest")


def _bin(name: str) -> str:
    """A tool the dev extra installs beside this Python (pip's console scripts), else on PATH."""
    here = Path(sys.executable).parent / name
    exe = str(here) if here.exists() else shutil.which(name)
    assert exe, f"{name} not found: the dev extra installs it (.ci/run does)"
    return exe


def test_the_ci_pages_workflows_pass_actionlint(tmp_path: Path) -> None:
    files = []
    for page in WORKFLOW_PAGES:
        text = (DOCS / page).read_text(encoding="utf-8")
        for i, block in enumerate(re.findall(r"```yaml\n(.*?)```", text, flags=re.DOTALL)):
            if "runs-on:" in block:
                files.append(tmp_path / f"{Path(page).stem}-{i}.yml")
                files[-1].write_text(block, encoding="utf-8")
    assert len(files) == len(WORKFLOW_PAGES)
    cmd = [_bin("actionlint"), f"-shellcheck={_bin('shellcheck')}", "-pyflakes=", "-no-color", *map(str, files)]
    r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert (r.returncode, r.stdout + r.stderr) == (0, "")
