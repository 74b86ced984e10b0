"""`loadgen k8s run` creates what the chart renders: the Python builder against a real Helm render (the chart's
own render path, tests/k8s_chart) for the same values, in both modes, with secrets, metrics and extra args."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from loadgen.k8s.objects import CHART_APP_VERSION, DEFAULTS, build_objects, merge_values

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "loadgen"
pytest.importorskip("helm_sdkpy", reason="pip install --ignore-requires-python helm-sdkpy (.ci/run does)")

SCENARIO = {
    "name": "fp8-vs-baseline",
    "variants": [
        {"name": "baseline", "base_url": "http://vllm-baseline:8000", "model": "llama"},
        {"name": "fp8", "base_url": "http://vllm-fp8:8000", "model": "llama", "api_key_env": "VLLM_API_KEY"},
    ],
    "load": {"users": 8, "duration": "1m"},
}
CASES = {
    "headless": {
        "mode": "headless",
        "workers": {"replicas": 3, "extraArgs": ["--loglevel", "INFO"]},
        "headless": {"duration": "2m", "activeDeadlineSeconds": 3600, "serveReports": "5m"},
        "scenario": SCENARIO,
        "apiKeySecrets": {"VLLM_API_KEY": {"name": "vllm-api-key", "key": "token"}},
        "image": {"repository": "registry.example/loadgen", "tag": "1.2.3"},
        "metrics": {"enabled": True},
    },
    "ui": {
        "mode": "ui",
        "scenario": SCENARIO | {"report_dir": "elsewhere"},
        "apiKeySecrets": {"VLLM_API_KEY": {"name": "k", "key": "t"}},
        "networkPolicy": {"enabled": False},
    },
}
# Fields compared: everything the pods run with. Not compared: who made it (helm.sh/chart, managed-by) and the
# checksum, which hashes the rendered template text (present on both, checked below).
WHO = ("helm.sh/chart", "app.kubernetes.io/managed-by")


def _strip(obj: dict[str, Any]) -> dict[str, Any]:
    obj = yaml.safe_load(yaml.safe_dump(obj))  # plain data, ints as ints
    for meta in [obj["metadata"], ((obj.get("spec") or {}).get("template") or {}).get("metadata") or {}]:
        for key in WHO:
            (meta.get("labels") or {}).pop(key, None)
        notes = meta.get("annotations") or {}
        for key in [k for k in notes if k.startswith("meta.helm.sh/")]:  # Helm's own bookkeeping
            del notes[key]
        if "checksum/config" in notes:
            notes["checksum/config"] = "present"
        if "annotations" in meta and not notes:
            del meta["annotations"]
    if obj["kind"] == "ConfigMap":
        obj["data"] = {k: yaml.safe_load(t) for k, t in obj["data"].items()}
    return obj


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_builder_creates_what_the_chart_renders(case: str, tmp_path: Path) -> None:
    from tests.k8s_chart.conftest import helm_render

    values = CASES[case]
    code, doc, err = helm_render(values, tmp_path, release="lg-run")
    assert code == 0, err
    chart = {(o["kind"], o["metadata"]["name"]): _strip(o) for o in doc["created"]}
    ours = {(o["kind"], o["metadata"]["name"]): _strip(o) for o in build_objects(values, "lg-run", "loadtest")}
    assert sorted(ours) == sorted(chart)
    for key in ours:
        assert ours[key] == chart[key], key
    labels = {o["metadata"]["name"]: o["metadata"]["labels"] for o in build_objects(values, "lg-run", "loadtest")}
    assert all(lab["app.kubernetes.io/managed-by"] == "loadgen" for lab in labels.values())


def test_the_builder_defaults_are_the_charts() -> None:
    chart_values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))

    def pick(defaults: dict[str, Any], chart: dict[str, Any], path: str) -> None:
        for key, value in defaults.items():
            assert key in chart, f"{path}{key} is not a chart value"
            if isinstance(value, dict) and value and key != "scenario":
                pick(value, chart[key], f"{path}{key}.")
            elif key != "scenario":
                assert chart[key] == value, f"{path}{key}: chart {chart[key]!r}, builder {value!r}"

    pick(DEFAULTS, chart_values, "")
    assert yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))["appVersion"] == CHART_APP_VERSION


def test_lists_replace_and_mappings_merge_like_helm() -> None:
    v = merge_values({"workers": {"replicas": 9}, "extraEnv": [{"name": "A", "value": "1"}]})
    assert v["workers"]["replicas"] == 9 and v["workers"]["topologySpread"]["enabled"] is True
    assert v["extraEnv"] == [{"name": "A", "value": "1"}] and DEFAULTS["extraEnv"] == []
