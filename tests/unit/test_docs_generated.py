"""The docs site's reference pages are what scripts/gen-docs.py writes from the code today.

docs/reference/ holds the scenario fields (the config model), the Prometheus families (the exporter), the Helm values
(the chart) and the exit codes and error classes: a field, family, value or code added without regenerating fails
here, naming the command that fixes it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from loadgen.config import scenario_json_schema

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen-docs.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_pages_are_current(gen: ModuleType) -> None:
    stale = [str(p.relative_to(ROOT)) for p in gen.stale_pages()]
    assert stale == [], f"stale generated docs pages {stale}: run `python scripts/gen-docs.py` and commit them"


def test_a_stale_page_is_found(gen: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = {p.name for p in gen.stale_pages()}  # empty, unless the test above fails too
    for name in gen.PAGES:
        (tmp_path / name).write_text((gen.REFERENCE / name).read_text(encoding="utf-8"), encoding="utf-8")
    page = tmp_path / "scenario.md"
    page.write_text(page.read_text(encoding="utf-8").replace("| `report_dir` |", "| `reports` |"), encoding="utf-8")
    monkeypatch.setattr(gen, "REFERENCE", tmp_path)
    assert {p.name for p in gen.stale_pages()} == before | {"scenario.md"}


def _fields(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    models = [("", schema), *((f"{name}.", model) for name, model in schema.get("$defs", {}).items())]
    return [(prefix + field, node) for prefix, model in models for field, node in model["properties"].items()]


def test_every_scenario_field_is_described_and_in_the_reference(gen: ModuleType) -> None:
    fields = _fields(scenario_json_schema())
    assert len(fields) > 100
    assert [path for path, node in fields if not node.get("description", "").strip()] == []
    page = (gen.REFERENCE / "scenario.md").read_text(encoding="utf-8")
    for model in scenario_json_schema()["$defs"]:
        assert f"\n## {model}\n" in page, model


def test_every_exported_family_is_in_the_reference(gen: ModuleType) -> None:
    from loadgen.live.exporter import FAMILIES

    page = (gen.REFERENCE / "prometheus.md").read_text(encoding="utf-8")
    assert all(f"| `{name}` | {kind} |" in page for name, kind, _ in FAMILIES)
    # Labels come from a real render: the error counter's class and the workers' gauges.
    assert "| `loadgen_errors` | counter | `loadgen_errors_total` | `class`, `mix`, `variant` |" in page
    assert "| `loadgen_worker_cpu_p90_ratio` | gauge | `loadgen_worker_cpu_p90_ratio` | `worker` |" in page


def test_every_command_and_dialect_is_in_the_reference(gen: ModuleType) -> None:
    from loadgen.cli import _parser
    from loadgen.protocol.dialects import DIALECT_NAMES

    cli = (gen.REFERENCE / "cli.md").read_text(encoding="utf-8")
    commands = [name for name, _, _ in gen._subcommands(_parser())]
    assert {"init", "validate", "run", "demo", "sweep", "compare", "schema", "k8s", "sim"} <= set(commands)
    assert all(f"\n## `loadgen {name}`\n" in cli for name in commands)
    assert "\n## `loadgen k8s run`\n" in cli and "| `--set KEY.PATH=VALUE` |" in cli
    registries = (gen.REFERENCE / "registries.md").read_text(encoding="utf-8")
    assert all(f"| `{name}` |" in registries for name in DIALECT_NAMES)


def test_every_environment_variable_loadgen_reads_is_in_the_reference(gen: ModuleType) -> None:
    import re

    read = set()
    for path in (ROOT / "loadgen").rglob("*.py"):
        read |= set(re.findall(r"\bLOADGEN_[A-Z_]+\b", path.read_text(encoding="utf-8")))
    page = (gen.REFERENCE / "locust.md").read_text(encoding="utf-8")
    assert len(read) >= 10
    assert sorted(v for v in read if f"| `{v}` |" not in page) == []
    # The options come from the plugin's own add_argument calls, defaults resolved (the progress period's constant).
    assert "| `--loadgen-progress` | `LOADGEN_PROGRESS` | `5.0` |" in page
