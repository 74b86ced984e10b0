"""The commands every CLI of the field answers (`--version`, `python -m loadgen`) and the scenario schema the package
ships: equal to what the model exports (so editors check scenarios against the model loadgen runs), printed by
`loadgen schema`, and named by the examples' `yaml-language-server` line."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from loadgen.cli import main
from loadgen.config.scenario import scenario_json_schema

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "loadgen" / "config" / "scenario.schema.json"
REGENERATE = (
    "python -c 'import json; from loadgen.config.scenario import scenario_json_schema as s; "
    "print(json.dumps(s(), indent=2, ensure_ascii=False))' > loadgen/config/scenario.schema.json"
)


def test_the_shipped_schema_is_the_models() -> None:
    assert json.loads(SHIPPED.read_text(encoding="utf-8")) == scenario_json_schema(), f"stale; regenerate: {REGENERATE}"


def test_schema_prints_the_shipped_file_and_writes_it(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out) == scenario_json_schema()
    assert main(["schema", "report", "--out", str(tmp_path / "r" / "report.schema.json")]) == 0
    report = json.loads((tmp_path / "r" / "report.schema.json").read_text(encoding="utf-8"))
    assert report == json.loads((ROOT / "loadgen" / "report" / "report.schema.json").read_text(encoding="utf-8"))
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["schema", "--out", str(blocker / "s.json")]) == 2
    assert "--out" in capsys.readouterr().err


EXAMPLES = [*sorted((ROOT / "loadgen" / "examples").glob("*.yaml")), ROOT / "k8s" / "examples" / "scenario.yaml"]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: str(p.relative_to(ROOT)))
def test_examples_name_the_schema_for_editors(example: Path) -> None:
    first = example.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("# yaml-language-server: $schema="), first
    target = (example.parent / first.split("$schema=", 1)[1]).resolve()
    assert target == SHIPPED.resolve()


def test_version_and_python_dash_m(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"loadgen {version('llm-loadgen')} (Python {sys.version_info[0]}.{sys.version_info[1]}")
    # python -m loadgen is the same command (a subprocess: what a user types).
    run = subprocess.run([sys.executable, "-m", "loadgen", "--version"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stdout == out, run.stderr
    bad = subprocess.run([sys.executable, "-m", "loadgen", "validate"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "file" in bad.stderr
