"""Every command block of the README says how it is tested, and every runnable command is in a block.

Each ```bash block carries a marker, an HTML comment on the line above it (`<!-- readme-test: KIND ARG -->`), that
tests/integration/test_readme.py obeys when it runs the README's blocks in order:

- `run` (`run, given PATH`: a file the block expects, stood in for by the session's newest report.json): run as
  written, every command must exit 0;
- `background URL`: a server started in a terminal of its own; the session goes on once URL answers;
- `suite`: the test suite itself (`bash scripts/test`), which .ci/run runs: checked here to be what .ci/run runs;
- `cluster`: needs a Kubernetes cluster; tests/k8s_chart/test_readme_cluster.py runs each of its commands against a
  stand-in (the Helm library and a stub API server; the fake API server of tests/k8s), and only the commands it
  knows how to check may be in the block.

A block without a marker, or with another, fails here. Inline code that starts like a command (`pip …`, `bash …`,
`locust …`) must be one of the blocks' commands or the start of one, so no runnable command hides in the prose.
The README also stays a front door: under 200 lines.
"""

from __future__ import annotations

import re

from tests.commands import CLUSTER_COMMANDS, ROOT, block_commands, readme_blocks

README = ROOT / "README.md"
KINDS = ("run", "background", "suite", "cluster")


def test_the_readme_is_a_front_door() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) < 200


def test_every_block_says_how_it_is_tested() -> None:
    blocks = readme_blocks(README.read_text(encoding="utf-8"))
    unmarked = [(b.line, b.code.strip()) for b in blocks if b.kind not in KINDS]
    assert unmarked == [], f"blocks with no `<!-- readme-test: {'|'.join(KINDS)} -->` line above them: {unmarked}"
    for b in blocks:
        if b.kind == "background":
            assert re.fullmatch(r"https?://\S+", b.arg), f"line {b.line}: `background` needs the URL it answers on"
        elif b.kind == "run":
            assert b.arg == "" or re.fullmatch(r"given \S+", b.arg), f"line {b.line}: {b.arg!r}"
        else:
            assert b.arg == "", f"line {b.line}: {b.kind} takes no argument"
    commands = [c for b in blocks for c in block_commands(b.code)]
    assert "loadgen demo" in commands and "bash scripts/test" in commands


def test_the_suite_block_is_what_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    suite = [
        c
        for b in readme_blocks(README.read_text(encoding="utf-8"))
        if b.kind == "suite"
        for c in block_commands(b.code)
    ]
    assert suite and all(c in ci for c in suite), (suite, ci)


def test_every_cluster_command_has_a_check() -> None:
    cluster = [
        c
        for b in readme_blocks(README.read_text(encoding="utf-8"))
        if b.kind == "cluster"
        for c in block_commands(b.code)
    ]
    assert cluster, "the README shows no cluster command"
    unchecked = [c for c in cluster if not c.startswith(CLUSTER_COMMANDS)]
    assert unchecked == [], f"cluster commands tests/k8s_chart/test_readme_cluster.py cannot check: {unchecked}"


_SHELL_WORDS = ("pip", "bash", "python", "helm", "kubectl", "mkdocs", "curl", "docker", "podman", "uv", "locust")


def inline_commands(markdown: str) -> list[str]:
    """Inline code spans outside the shell blocks that start with a program's name (not `loadgen X`, a mention)."""
    prose = re.sub(r"```.*?```", "", markdown, flags=re.DOTALL)
    spans = [" ".join(s.split()) for s in re.findall(r"`([^`]+)`", prose)]
    return [s for s in spans if s.split(" ", 1)[0] in _SHELL_WORDS and " " in s]


def test_inline_commands_are_block_commands() -> None:
    text = README.read_text(encoding="utf-8")
    found = [c for b in readme_blocks(text) for c in block_commands(b.code)]
    # An extra's install line is the first block's `pip install -e .` with the extra named: the same command.
    hidden = [
        s
        for s in inline_commands(text)
        if not any(c == s or c.startswith(s + " ") for c in found)
        and not re.fullmatch(r'pip install -e "\.\[\w+\]"', s)
    ]
    assert hidden == [], f"commands in the README's prose that no shell block runs (put them in a block): {hidden}"
    assert inline_commands("run `pip install uv && bash scripts/lock`, see `loadgen sweep`") == [
        "pip install uv && bash scripts/lock"
    ]


def test_blocks_and_markers_are_read_as_written() -> None:
    text = (
        "<!-- readme-test: run, given last/report.json -->\n```bash\nloadgen demo   # fine\n"
        "loadgen frobnicate --now \\\n  --hard && bash scripts/test\n```\n\n```sh\nls\n```\n"
    )
    first, second = readme_blocks(text)
    assert (first.kind, first.arg, first.line) == ("run", "given last/report.json", 3)
    assert block_commands(first.code) == ["loadgen demo", "loadgen frobnicate --now --hard", "bash scripts/test"]
    assert (second.kind, second.arg) == ("", "")  # unmarked: the check above fails on it
