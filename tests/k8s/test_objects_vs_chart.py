"""`loadgen k8s run` creates what the chart renders: its objects are the chart's render (loadgen/k8s/run_objects.yaml,
held fresh by tests/k8s_chart/test_manifests.py) with the run's values put in, and here a real Helm render (the
chart's own render path, tests/k8s_chart) for the same values is compared with them, field by field, for runs that
exercise every value a run sets: name, namespace, workers, image (tag, bare, registry port, digest), secrets."""

from __future__ import annotations

import base64
import json
from itertools import groupby
from pathlib import Path
from typing import Any

import pytest
import yaml

from loadgen.k8s.run import KINDS
from loadgen.k8s.run_objects import PLACEHOLDERS, RunSpec, build_objects, chart_values, image_ref, rendered

ROOT = Path(__file__).resolve().parents[2]
kubernetes = pytest.importorskip("kubernetes")
_API_CLASS = {"core": "CoreV1Api", "apps": "AppsV1Api", "batch": "BatchV1Api", "networking": "NetworkingV1Api"}

SCENARIO = {
    "name": "fp8-vs-baseline",
    "variants": [
        {"name": "baseline", "base_url": "http://vllm-baseline:8000", "model": "llama"},
        {"name": "fp8", "base_url": "http://vllm-fp8:8000", "model": "llama", "api_key_env": "VLLM_API_KEY"},
    ],
    "load": {"users": 8, "duration": "1m"},
}
CASES = {
    "tagged": RunSpec(
        "lg-run",
        SCENARIO,
        workers=3,
        image="registry.example/loadgen:1.2.3",
        secrets={"VLLM_API_KEY": {"name": "vllm-api-key", "key": "token"}},
    ),
    # Every credential source (the master's: Prometheus, and the first variant's with `tokenizer: server`), a
    # report_dir the chart replaces, a bare image behind a registry port (the chart's tag), the chart's default name.
    "credentials": RunSpec(
        "loadgen-0a1b2c",
        {
            "variants": [
                {"name": "gw", "base_url": "http://apim:8080", "model": "m", "headers_from_env": {"api-key": "APIM"}},
                *SCENARIO["variants"],
            ],
            "tokenizer": "server",
            "report_dir": "elsewhere",
            "metrics": {
                "prometheus": {
                    "url": "http://prometheus:9090",
                    "queries": {"q": "up"},
                    "basic_auth_env": {"username": "PU", "password": "PP"},
                }
            },
        },
        image="localhost:5000/loadgen",
        secrets={n: {"name": "s", "key": n.lower()} for n in ("APIM", "VLLM_API_KEY", "PU", "PP")},
    ),
    "default-image": RunSpec("r", {"variants": [SCENARIO["variants"][0]]}, workers=1),
    "digest": RunSpec(
        "r2", {"variants": [SCENARIO["variants"][0]]}, workers=2, image="reg.example/lg@sha256:" + "ab" * 32
    ),
}
# Not compared: the checksum, which hashes the rendered template text (present on both, checked below).


def _strip(obj: dict[str, Any]) -> dict[str, Any]:
    obj = yaml.safe_load(yaml.safe_dump(obj))  # plain data, ints as ints
    notes = ((obj.get("spec") or {}).get("template") or {}).get("metadata", {}).get("annotations") or {}
    if "checksum/config" in notes:
        notes["checksum/config"] = "present"
    if obj["kind"] == "ConfigMap":
        obj["data"] = {k: yaml.safe_load(t) for k, t in obj["data"].items()}
    if obj["kind"] == "Secret":  # random on both sides: the same key, a 32-character alphanumeric value
        obj["data"] = {k: len(base64.b64decode(t)) * base64.b64decode(t).isalnum() for k, t in obj["data"].items()}
    return obj


def _helm(obj: dict[str, Any]) -> dict[str, Any]:
    """Helm's own marks, which `k8s run` (not Helm) does not make: managed-by says loadgen, no meta.helm.sh/*."""
    meta = obj["metadata"]
    meta["annotations"] = {k: v for k, v in (meta.get("annotations") or {}).items() if not k.startswith("meta.helm")}
    if not meta["annotations"]:
        del meta["annotations"]
    for m in (meta, ((obj.get("spec") or {}).get("template") or {}).get("metadata") or {}):
        if "labels" in m:
            m["labels"]["app.kubernetes.io/managed-by"] = "loadgen"
    return obj


@pytest.mark.parametrize("case", sorted(CASES))
def test_k8s_run_creates_what_the_chart_renders(case: str, tmp_path: Path) -> None:
    pytest.importorskip("helm_sdkpy", reason="pip install --ignore-requires-python helm-sdkpy (.ci/run does)")
    from tests.k8s_chart.conftest import helm_render

    spec = CASES[case]
    code, doc, err = helm_render(chart_values(spec), tmp_path, release=spec.name, namespace="team-a")
    assert code == 0, err
    chart = [_strip(_helm(o)) for o in doc["created"]]
    ours = [_strip(o) for o in build_objects(spec, "team-a")]
    # The same kinds in the same order (`k8s run` creates in Helm's install order), and the same objects of each
    # kind: Helm's client creates the objects of one kind concurrently, so their order within a kind is its
    # goroutines' (seen: the master's Job before the worker's in one fresh-clone run, after it in every other).
    assert [k for k, _ in groupby(o["kind"] for o in ours)] == [k for k, _ in groupby(o["kind"] for o in chart)]
    mine, theirs = ({(o["kind"], o["metadata"]["name"]): o for o in objs} for objs in (ours, chart))
    assert sorted(mine) == sorted(theirs) and len(mine) == len(ours) and len(theirs) == len(chart)
    for key, obj in mine.items():
        assert obj == theirs[key], key
    text = json.dumps(build_objects(spec, "team-a"))
    assert not [p for p in (PLACEHOLDERS["name"], PLACEHOLDERS["namespace"], str(PLACEHOLDERS["workers"])) if p in text]


def test_each_run_gets_fresh_secret_values_and_the_package_holds_none() -> None:
    packaged = [o for o in rendered()["objects"] if o["kind"] == "Secret"]
    assert packaged and all(v == "" for o in packaged for v in o["data"].values())
    spec = CASES["tagged"]
    tokens = {o["data"]["token"] for _ in range(3) for o in build_objects(spec, "ns") if o["kind"] == "Secret"}
    assert len(tokens) == 3


def test_the_scenario_checksum_follows_the_scenario() -> None:
    def checksum(spec: RunSpec) -> str:
        (job, *_) = [o for o in build_objects(spec, "ns") if o["kind"] == "Job"]
        return str(job["spec"]["template"]["metadata"]["annotations"]["checksum/config"])

    one = CASES["default-image"]
    other = RunSpec(one.name, {**one.scenario, "name": "other"})
    assert checksum(one) == checksum(RunSpec(one.name, dict(one.scenario))) != checksum(other)


def test_k8s_run_knows_how_to_create_and_delete_every_kind_the_chart_renders() -> None:
    kinds = {o["kind"] for o in rendered()["objects"]}
    assert kinds == {"NetworkPolicy", "ServiceAccount", "Secret", "ConfigMap", "Service", "Job"}
    assert kinds <= set(KINDS)
    for api, name in KINDS.values():
        for verb in ("create", "delete"):
            assert callable(getattr(getattr(kubernetes.client, _API_CLASS[api]), f"{verb}_namespaced_{name}"))


@pytest.mark.parametrize(
    ("text", "ref"),
    [
        ("", "ghcr.io/loadgen/loadgen:0.1.0"),
        ("repo", "repo:0.1.0"),
        ("repo:7", "repo:7"),
        ("localhost:5000/repo", "localhost:5000/repo:0.1.0"),
        ("localhost:5000/repo:7", "localhost:5000/repo:7"),
        ("repo@sha256:" + "0" * 64, "repo@sha256:" + "0" * 64),
    ],
)
def test_image_references_take_the_charts_tag_when_they_have_none(text: str, ref: str) -> None:
    chart = yaml.safe_load((ROOT / "charts/loadgen/Chart.yaml").read_text(encoding="utf-8"))
    assert rendered()["chart_image"] == f"ghcr.io/loadgen/loadgen:{chart['appVersion']}"
    assert image_ref(text, rendered()["chart_image"]) == ref


@pytest.mark.parametrize(
    "scenario",
    [
        # A literal credential-like header: the ConfigMap would hold it.
        {"variants": [{"name": "a", "base_url": "http://a:8000", "model": "m", "headers": {"X-Api-Key": "v"}}]},
        # A header from the environment with no Secret for its variable.
        {"variants": [{"name": "a", "base_url": "http://a:8000", "model": "m", "headers_from_env": {"api-key": "K"}}]},
        # Prometheus credentials with no Secret (the master's env).
        {
            "variants": [{"name": "a", "base_url": "http://a:8000", "model": "m"}],
            "metrics": {"prometheus": {"url": "http://p:9090", "queries": {"q": "up"}, "bearer_token_env": "PT"}},
        },
    ],
)
def test_k8s_run_refuses_what_the_chart_refuses_with_the_same_words(scenario: dict[str, Any], tmp_path: Path) -> None:
    pytest.importorskip("helm_sdkpy", reason="pip install --ignore-requires-python helm-sdkpy (.ci/run does)")
    from tests.k8s_chart.conftest import helm_render

    spec = RunSpec("rel", scenario)
    code, _, err = helm_render(chart_values(spec), tmp_path, release="rel")
    with pytest.raises(ValueError) as refused:
        build_objects(spec, "loadtest")
    assert code == 1 and str(refused.value) in err, (str(refused.value), err)
