"""`loadgen k8s discover` and selector resolution against the fake API server: each serving stack's labels."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from loadgen.cli import main
from loadgen.config.scenario import validate_scenario
from loadgen.k8s.api import connect
from loadgen.k8s.discover import discover
from loadgen.k8s.resolve import resolve_doc
from tests.k8s.fake_api import FakeCluster, fake_api, pod, service

HTTP = [{"name": "http", "port": 8000, "targetPort": 8000}]


def _stack(c: FakeCluster) -> None:
    """One deployment per label family, plus an unlabelled Service that is no variant."""
    ns = "llm"
    # loadgen's own label on the Service and pods
    c.put("services", service("vllm-int8", ns, {"loadgen.io/variant": "int8"}, {"app": "int8"}, HTTP))
    c.put(
        "pods",
        pod(
            "int8-0",
            ns,
            {"app": "int8", "loadgen.io/variant": "int8"},
            ip="10.0.0.5",
            ports=[{"name": "http", "containerPort": 8000}, {"name": "metrics", "containerPort": 9100}],
        ),
    )
    # llm-d labels the pods only; the Service selects them
    c.put("services", service("llama-decode", ns, {}, {"app": "llama-d"}, [{"name": "http", "port": 8200}]))
    c.put(
        "pods",
        pod(
            "llama-d-0",
            ns,
            {
                "app": "llama-d",
                "llm-d.ai/inference-serving": "true",
                "llm-d.ai/model": "llama-3-8b",
                "llm-d.ai/role": "decode",
            },
            ip="10.0.0.6",
            ports=[{"containerPort": 8200}],
        ),
    )
    c.put(
        "pods",
        pod(
            "llama-d-1",
            ns,
            {
                "app": "llama-d",
                "llm-d.ai/inference-serving": "true",
                "llm-d.ai/model": "llama-3-8b",
                "llm-d.ai/role": "decode",
            },
            ip="10.0.0.7",
            ready=False,
            ports=[{"containerPort": 8200}],
        ),
    )
    # KServe labels its predictor Service with the InferenceService's name
    c.put(
        "services",
        service(
            "qwen-predictor",
            ns,
            {"serving.kserve.io/inferenceservice": "qwen"},
            {"app": "qwen"},
            [{"name": "http", "port": 80, "targetPort": 8080}],
        ),
    )
    c.put("pods", pod("qwen-0", ns, {"app": "qwen"}, ip="10.0.0.8", ports=[{"containerPort": 8080}]))
    # vLLM production-stack: `model` on the engine's Service and pods
    c.put(
        "services",
        service(
            "mistral-engine",
            ns,
            {"model": "mistral"},
            {"model": "mistral"},
            [{"name": "metrics", "port": 9000}, {"name": "serve", "port": 8000}],
        ),
    )
    c.put("pods", pod("mistral-0", ns, {"model": "mistral"}, ip="10.0.0.9", ports=[{"containerPort": 8000}]))
    c.put("services", service("postgres", ns, {"app": "db"}, {"app": "db"}, [{"port": 5432}]))
    c.put("services", service("other-ns", "elsewhere", {"loadgen.io/variant": "far"}, {"x": "y"}, HTTP))


def test_discover_each_label_family(tmp_path: Path) -> None:
    with fake_api(tmp_path) as (c, kubeconfig):
        _stack(c)
        cluster = connect(kubeconfig=str(kubeconfig))
        found = {f.name: f for f in discover(cluster, cluster.namespace)}
        cluster.close()
    assert cluster.namespace == "llm"  # from the kubeconfig context
    assert sorted(found) == ["int8", "llama-3-8b-decode", "mistral", "qwen"]  # postgres and the other namespace: no
    assert (found["int8"].family, found["int8"].base_url) == ("loadgen", "http://vllm-int8.llm.svc:8000")
    assert found["int8"].metrics == ["http://10.0.0.5:9100/metrics"]  # the port named metrics, not the serving one
    d = found["llama-3-8b-decode"]
    assert (d.family, d.model, d.pods_ready, d.pods) == ("llm-d", "llama-3-8b", 1, 2)
    assert d.selector == "llm-d.ai/inference-serving=true,llm-d.ai/model=llama-3-8b,llm-d.ai/role=decode"
    assert d.metrics == ["http://10.0.0.6:8200/metrics", "http://10.0.0.7:8200/metrics"]
    assert (found["qwen"].family, found["qwen"].base_url) == ("kserve", "http://qwen-predictor.llm.svc:80")
    # production-stack: the serving port, not the one named metrics
    assert (found["mistral"].family, found["mistral"].port, found["mistral"].model) == (
        "production-stack",
        8000,
        "mistral",
    )


def test_discover_cli_table_selector_and_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with fake_api(tmp_path) as (c, kubeconfig):
        _stack(c)
        assert main(["k8s", "discover", "--kubeconfig", str(kubeconfig)]) == 0
        table = capsys.readouterr().out
        assert main(["k8s", "discover", "--kubeconfig", str(kubeconfig), "-l", "llm-d.ai/role=decode", "--yaml"]) == 0
        block = yaml.safe_load(capsys.readouterr().out)
        assert main(["k8s", "discover", "--kubeconfig", str(kubeconfig), "-A"]) == 0
        everywhere = capsys.readouterr().out
        lists = c.calls_to("GET", "/services")
    assert table.splitlines()[0].split()[:4] == ["VARIANT", "FAMILY", "NAMESPACE", "SERVICE"]
    assert "http://vllm-int8.llm.svc:8000" in table and "postgres" not in table
    assert block == {
        "variants": [
            {
                "name": "llama-3-8b-decode",
                "model": "llama-3-8b",
                "selector": {
                    "selector": "llm-d.ai/inference-serving=true,llm-d.ai/model=llama-3-8b,llm-d.ai/role=decode",
                    "namespace": "llm",
                    "port": 8200,
                },
            }
        ]
    }
    assert "other-ns" in everywhere and "elsewhere" in everywhere
    assert {call.path for call in lists} == {"/api/v1/namespaces/llm/services", "/api/v1/services"}


def test_a_discovered_block_resolves_back_to_its_service(tmp_path: Path) -> None:
    with fake_api(tmp_path) as (c, kubeconfig):
        _stack(c)
        cluster = connect(kubeconfig=str(kubeconfig))
        doc = {
            "variants": [
                {"name": "d", "model": "m", "selector": {"selector": "llm-d.ai/role=decode"}},  # via its pods
                {"name": "i", "model": "m", "selector": {"selector": "loadgen.io/variant=int8", "port": "http"}},
                {"name": "plain", "model": "m", "base_url": "http://x:1"},
            ]
        }
        resolved = resolve_doc(cluster, doc)
        cluster.close()
    sc = validate_scenario(resolved)
    d, i, plain = sc.variants
    assert d.base_url == "http://llama-decode.llm.svc:8200" and d.selector is None
    assert d.resolved_from is not None and d.resolved_from.service == "llama-decode"
    assert i.resolved_from is not None and (i.resolved_from.port, i.resolved_from.namespace) == (8000, "llm")
    assert plain.resolved_from is None and plain.base_url == "http://x:1"


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ("loadgen.io/variant=nope", "matched none"),
        ("!model", "matched llama-decode, postgres, qwen-predictor, vllm-int8"),
    ],
)
def test_a_selector_must_match_one_service(tmp_path: Path, selector: str, message: str) -> None:
    from loadgen.k8s.api import K8sError

    with fake_api(tmp_path) as (c, kubeconfig):
        _stack(c)
        cluster = connect(kubeconfig=str(kubeconfig))
        with pytest.raises(K8sError, match=message):
            resolve_doc(cluster, {"variants": [{"name": "x", "model": "m", "selector": {"selector": selector}}]})
        cluster.close()
