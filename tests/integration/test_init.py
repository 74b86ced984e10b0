"""`loadgen init URL` against the simulator: it is recognised from its own discovery routes, and the starter it
writes runs (`loadgen run`, exit 0) as written, with only the run's length shortened."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import orjson
import pytest
import yaml

from loadgen.cli import main
from loadgen.config.scenario import load_scenario
from loadgen.sim.launch import start_sim_process

from .harness import read_report, run_loadgen


def test_init_then_run_against_the_simulator(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "scenario.yaml"
    with start_sim_process(["baseline"]) as sim:
        url = sim.base_url("baseline")
        assert main(["init", url, "--out", str(out)]) == 0
        printed = capsys.readouterr().out
        assert "found loadgen's simulator 0" in printed and "model baseline" in printed
        assert main(["validate", str(out)]) == 0
        (variant,) = load_scenario(out).variants
        assert (variant.base_url, variant.model, variant.dialect) == (url, "baseline", "openai-chat")
        assert variant.continuous_usage_stats
        proc = run_loadgen(out, "--duration", "3s", "--workers", "0", "--report-dir", str(tmp_path / "report"))
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        report = read_report(tmp_path / "report")
        (v,) = report["variants"]
        assert (v["model"], v["dialect"]) == ("baseline", "openai-chat")
        assert v["overall"]["ok"] >= 4 and v["overall"]["success_rate"] == 1.0
        assert [s["passed"] for s in report["slos"]] == [True]

        # The simulator answers each emulated family's discovery route, so --dialect picks any of its framings.
        tgi = orjson.loads(urllib.request.urlopen(f"{url}/info", timeout=5).read())
        tags = orjson.loads(urllib.request.urlopen(f"{url}/api/tags", timeout=5).read())
        assert tgi["model_id"] == "baseline" and [m["name"] for m in tags["models"]] == ["baseline"]
        other = tmp_path / "ollama.yaml"
        assert main(["init", url, "--out", str(other), "--dialect", "ollama-chat", "--name", "sim-ollama"]) == 0
        doc = yaml.safe_load(other.read_text())
        assert doc["variants"][0] == {
            "name": "sim-ollama",
            "base_url": url,
            "model": "baseline",
            "dialect": "ollama-chat",
        }
        assert main(["validate", str(other)]) == 0
