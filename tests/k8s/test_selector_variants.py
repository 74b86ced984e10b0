"""A scenario variant named by a Kubernetes selector: validation (exactly one of base_url / selector), resolution
at `loadgen run` start, and the report's record of what it resolved to (checked against the published schema)."""

from __future__ import annotations

from array import array
from pathlib import Path

import pytest
import yaml

from loadgen.cli import main
from loadgen.config.scenario import validate_scenario
from loadgen.k8s.api import connect
from loadgen.k8s.resolve import resolve_doc, resolve_scenario_file
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.records import RequestRecord
from loadgen.report import build_report
from tests.k8s.fake_api import fake_api, service
from tests.report_schema import checked

SELECTOR_VARIANT = {"name": "int8", "model": "m", "selector": {"selector": "loadgen.io/variant=int8", "port": 8000}}


@pytest.mark.parametrize(
    ("variant", "field"),
    [
        ({"name": "a", "model": "m"}, "base_url"),
        ({"name": "a", "model": "m", "base_url": "http://x:1", "selector": {"selector": "a=b"}}, "selector"),
    ],
)
def test_exactly_one_of_base_url_or_selector(tmp_path: Path, variant: dict, field: str, capsys) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump({"variants": [variant]}), encoding="utf-8")
    assert main(["validate", str(f)]) == 2
    assert f"variants[0].{field}: give exactly one of base_url or selector" in capsys.readouterr().err


def test_a_selector_validates_without_a_cluster(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump({"variants": [SELECTOR_VARIANT]}), encoding="utf-8")
    assert main(["validate", str(f)]) == 0
    with pytest.raises(Exception, match="label selector"):
        validate_scenario({"variants": [{"name": "a", "model": "m", "selector": {"selector": "a=b; rm -rf"}}]})


def test_run_resolves_before_any_load_and_refuses_what_matches_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump({"variants": [SELECTOR_VARIANT]}), encoding="utf-8")
    with fake_api(tmp_path) as (c, kubeconfig):
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        assert main(["run", str(f), "--workers", "0", "--quiet"]) == 2
        assert "variant 'int8': selector 'loadgen.io/variant=int8' in namespace 'llm'" in capsys.readouterr().err
        assert main(["sweep", str(f), "--concurrency", "1,2"]) == 2
        assert "variant 'int8': selector 'loadgen.io/variant=int8'" in capsys.readouterr().err
        c.put(
            "services",
            service("vllm-int8", "llm", {"loadgen.io/variant": "int8"}, {"a": "b"}, [{"name": "http", "port": 8000}]),
        )
        resolved = resolve_scenario_file(f)
    assert resolved is not None and resolved != f
    ran = yaml.safe_load(resolved.read_text(encoding="utf-8"))["variants"][0]
    assert ran["base_url"] == "http://vllm-int8.llm.svc:8000"
    assert resolve_scenario_file(tmp_path / "missing.yaml") is None  # the loader says what is wrong with it


def test_a_scenario_without_selectors_never_asks_the_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump({"variants": [{"name": "a", "model": "m", "base_url": "http://x:1"}]}), "utf-8")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "nowhere"))  # any cluster call would fail
    assert resolve_scenario_file(f) is None


def test_the_report_records_what_a_selector_resolved_to(tmp_path: Path) -> None:
    with fake_api(tmp_path) as (c, kubeconfig):
        c.put(
            "services",
            service("vllm-int8", "llm", {"loadgen.io/variant": "int8"}, {"a": "b"}, [{"name": "http", "port": 8000}]),
        )
        cluster = connect(kubeconfig=str(kubeconfig))
        doc = resolve_doc(
            cluster, {"variants": [SELECTOR_VARIANT, {"name": "b", "model": "m", "base_url": "http://b:1"}]}
        )
        cluster.close()
    agg = Aggregate()
    for i in range(5):
        rec = RequestRecord(f"r{i}", "int8", "chat", sent=100.0, chunk_times=array("d", [100.05, 100.06]))
        rec.chunk_tokens, rec.done, rec.output_tokens = array("l", [1, 1]), 100.06, 2
        agg.add(rec, 0.0)
    report = checked(build_report(validate_scenario(doc), agg, 10.0))
    int8, b = report["variants"]
    assert int8["resolved_from"] == {
        "selector": "loadgen.io/variant=int8",
        "namespace": "llm",
        "service": "vllm-int8",
        "port": 8000,
        "base_url": "http://vllm-int8.llm.svc:8000",
    }
    assert int8["base_url"] == "http://vllm-int8.llm.svc:8000" and "resolved_from" not in b


def test_a_locust_run_started_without_loadgen_refuses_a_selector(tmp_path: Path) -> None:
    import subprocess
    import sys

    from loadgen.locust_plugin.launcher import LOCUSTFILE

    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump({"variants": [SELECTOR_VARIANT]}), encoding="utf-8")
    cmd = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--scenario", str(f), "--headless", "-t", "1s"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "variant(s) int8 name a Kubernetes selector" in r.stderr
