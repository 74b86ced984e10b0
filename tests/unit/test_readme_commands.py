"""Every command in the README is run by a test.

The README's shell blocks are split into commands (continuations joined, comments dropped, `a && b` two commands);
inline code names commands and files, and an inline span that starts like a command (`pip …`, `bash …`, `python …`)
must be one of the blocks' commands or the start of one, so no runnable command hides in the prose.
Each must match a rule below: either it is cheap and this test runs it as written, in a folder holding a valid
`scenario.yaml`, and it must exit 0; or the rule names the tests that run it, and those files must exist and carry
the command's subcommand and every `--option` it uses (or the rule's own needles, for commands that are not
loadgen's). A command no rule matches fails here, and so does a rule that matches nothing: the README and this list
move together. The README also stays a front door: under 200 lines.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
EXAMPLE = ROOT / "loadgen" / "examples" / "scenario.yaml"


@dataclass(frozen=True)
class Rule:
    pattern: str  # matched against the start of the command
    tests: tuple[str, ...] = ()  # the files that run it; () means: this test runs it
    needles: tuple[str, ...] | None = None  # what those files must hold; None: the subcommand and its --options


RULES = (
    Rule(r"loadgen --version$"),
    Rule(r"python -m loadgen --version$"),
    Rule(r"loadgen validate scenario\.yaml( --set \S+)*$"),
    Rule(r"loadgen schema( |$)"),
    # Installed by scripts/test (what CI runs), then run by the demo's own test.
    Rule(r"pip install -e \"\.\[dev\]\"$", ("scripts/test",), ('-e ".[dev]"',)),
    Rule(r"loadgen demo$", ("tests/integration/test_demo.py",)),
    # Against the simulator, then validated and run to exit 0 (tests/e2e/test_init_llamacpp.py: llama.cpp's server).
    Rule(r"loadgen init http://", ("tests/integration/test_init.py",)),
    Rule(r"bash scripts/test$", (".ci/run",), ("bash scripts/test",)),
    Rule(r"loadgen run ", ("tests/integration/test_cli_reports.py",)),
    Rule(r"loadgen compare ", ("tests/unit/test_compare_cli.py",)),
    Rule(r"loadgen report ", ("tests/integration/test_verdict_formats.py",)),
    Rule(r"loadgen k8s run ", ("tests/k8s/test_run.py", "tests/k8s/test_run_image.py")),
    # A real `helm install` (the Helm v4 library) of the chart in headless mode, its Jobs' commands then run.
    Rule(r"helm install ", ("tests/k8s_chart/conftest.py", "tests/k8s_chart/test_chart_commands.py"),
         ('"mode": "headless"', "def helm_render")),
)  # fmt: skip


def commands(markdown: str) -> list[str]:
    """The commands of the ```bash / ```sh blocks, one string each, comments dropped."""
    out = []
    for block in re.findall(r"```(?:bash|sh|console)\n(.*?)```", markdown, flags=re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            current: list[str] = []
            for word in [*words, "&&"]:
                if word == "&&":
                    if current:
                        out.append(shlex.join(current).replace("'", '"'))
                    current = []
                else:
                    current.append(word)
    return out


_SHELL_WORDS = ("pip", "bash", "python", "helm", "kubectl", "mkdocs", "curl", "docker", "uv", "locust")


def inline_commands(markdown: str) -> list[str]:
    """Inline code spans outside the shell blocks that start with a program's name (not `loadgen X`, a mention)."""
    prose = re.sub(r"```.*?```", "", markdown, flags=re.DOTALL)
    spans = [" ".join(s.split()) for s in re.findall(r"`([^`]+)`", prose)]
    return [s for s in spans if s.split(" ", 1)[0] in _SHELL_WORDS and " " in s]


def rule_for(command: str) -> Rule | None:
    return next((r for r in RULES if re.match(r.pattern, command)), None)


def _needles(rule: Rule, command: str) -> tuple[str, ...]:
    if rule.needles is not None:
        return rule.needles
    words = command.split()
    return (f'"{words[1]}"', *(w.split("=")[0] for w in words if w.startswith("--")))


def test_the_readme_is_a_front_door() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) < 200


def test_every_readme_command_has_a_rule_and_every_rule_a_command() -> None:
    found = commands(README.read_text(encoding="utf-8"))
    assert "loadgen demo" in found and "bash scripts/test" in found
    unrun = [c for c in found if rule_for(c) is None]
    assert unrun == [], f"README commands no test runs (add a Rule naming the test that runs each): {unrun}"
    unused = [r.pattern for r in RULES if not any(rule_for(c) is r for c in found)]
    assert unused == [], f"rules that match no README command (remove them): {unused}"


def test_inline_commands_are_block_commands() -> None:
    text = README.read_text(encoding="utf-8")
    found = commands(text)
    hidden = [s for s in inline_commands(text) if not any(c == s or c.startswith(s + " ") for c in found)]
    assert hidden == [], f"commands in the README's prose that no shell block runs (put them in a block): {hidden}"
    assert inline_commands("run `pip install uv && bash scripts/lock`, see `loadgen sweep`") == [
        "pip install uv && bash scripts/lock"
    ]


def test_an_unrun_command_is_caught() -> None:
    text = "```bash\nloadgen demo   # fine\nloadgen frobnicate --now \\\n  --hard && bash scripts/test\n```\n"
    assert commands(text) == ["loadgen demo", "loadgen frobnicate --now --hard", "bash scripts/test"]
    assert [c for c in commands(text) if rule_for(c) is None] == ["loadgen frobnicate --now --hard"]


def test_the_tests_named_carry_what_the_commands_use() -> None:
    for command in commands(README.read_text(encoding="utf-8")):
        rule = rule_for(command)
        if rule is None or not rule.tests:
            continue
        text = "".join((ROOT / t).read_text(encoding="utf-8") for t in rule.tests)
        missing = [n for n in _needles(rule, command) if n not in text]
        assert missing == [], f"{command!r}: {rule.tests} never use {missing}"


@pytest.mark.parametrize(
    "command", [c for c in commands(README.read_text(encoding="utf-8")) if (r := rule_for(c)) and not r.tests]
)
def test_cheap_commands_run_as_written(command: str, tmp_path: Path) -> None:
    shutil.copy(EXAMPLE, tmp_path / "scenario.yaml")
    argv = shlex.split(command)
    args = argv[3:] if argv[:3] == ["python", "-m", "loadgen"] else argv[1:]
    assert argv[0] in ("loadgen", "python")
    proc = subprocess.run(
        [sys.executable, "-m", "loadgen", *args], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.strip()
