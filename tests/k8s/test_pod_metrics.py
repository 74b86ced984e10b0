"""Where a variant's pods are, against the fake API server: in the cluster, from the Service's EndpointSlices and
nothing else (every request recorded and compared with IN_CLUSTER_CALLS); with a kubeconfig, from the Service's
pods (discover's per-pod metrics endpoints); and which variants are looked up at all."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import loadgen.k8s.api as api
from loadgen.k8s.pod_metrics import IN_CLUSTER_CALLS, ServicePods, pod_source
from tests.k8s.fake_api import Call, endpoint_slice, fake_api, pod, service

LABELS = {"app": "vllm"}


def _as_call(c: Call) -> tuple[str, str, str]:
    """A recorded request as (API group, resource, verb), the way a Role names it."""
    parts = [p for p in c.path.split("/") if p]
    group = "" if parts[0] == "api" else parts[1]
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    if rest[:1] == ["namespaces"]:
        rest = rest[2:]
    resource = rest[0]
    named = len(rest) > 1
    verb = {"GET": "get" if named else "list", "POST": "create", "PATCH": "patch", "DELETE": "delete"}[c.method]
    return group, resource, verb


def _cluster(monkeypatch: pytest.MonkeyPatch, kubeconfig: Path, in_cluster: bool) -> None:
    """`connect()` as the pod's master would get it: the fake server, marked in-cluster or not."""
    real = api.connect

    def fake_connect(**_: Any) -> api.Cluster:
        c = real(kubeconfig=str(kubeconfig))
        c.in_cluster = in_cluster
        return c

    monkeypatch.setattr(api, "connect", fake_connect)


def test_in_the_cluster_only_the_endpointslices_are_listed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with fake_api(tmp_path) as (c, kubeconfig):
        c.put("endpointslices", endpoint_slice("vllm", "llm", ["10.1.0.1", "10.1.0.2"], not_ready=("10.1.0.3",)))
        c.put("endpointslices", endpoint_slice("vllm", "llm", ["fd00::7"], name="vllm-v6"))
        c.put("endpointslices", endpoint_slice("other", "llm", ["10.9.9.9"], name="other-x"))
        _cluster(monkeypatch, kubeconfig, in_cluster=True)
        pods = ServicePods("llm", "vllm", 8000, in_cluster=True)
        first, again = pods.urls(), pods.urls()
        calls = list(c.calls)
    assert (
        first
        == again
        == [
            "http://10.1.0.1:8000/metrics",
            "http://10.1.0.2:8000/metrics",
            "http://[fd00::7]:8000/metrics",
        ]
    )
    assert {_as_call(call) for call in calls} == set(IN_CLUSTER_CALLS)
    assert all(call.query["labelSelector"] == ["kubernetes.io/service-name=vllm"] for call in calls)


@pytest.mark.parametrize(
    ("ports", "url"),
    [
        ([{"name": "http", "port": 8000}, {"name": "metrics", "port": 9090}], "http://10.1.0.1:9090/metrics"),
        ([{"name": "grpc", "port": 9000}, {"name": "web", "port": 80}], "http://10.1.0.1:80/metrics"),
        ([{"name": "grpc", "port": 9000}, {"name": "http", "port": 8080}], "http://10.1.0.1:8080/metrics"),
    ],
)
def test_the_endpoint_port_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ports: list[dict[str, Any]], url: str
) -> None:
    with fake_api(tmp_path) as (c, kubeconfig):
        c.put("endpointslices", endpoint_slice("vllm", "llm", ["10.1.0.1"], ports=ports))
        _cluster(monkeypatch, kubeconfig, in_cluster=True)
        assert ServicePods("llm", "vllm", 80, in_cluster=True).urls() == [url]


def test_with_a_kubeconfig_the_services_ready_pods_give_their_metrics_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with fake_api(tmp_path) as (c, kubeconfig):
        c.put("services", service("vllm", "llm", {}, LABELS, [{"name": "http", "port": 80, "targetPort": 8000}]))
        c.put("pods", pod("a", "llm", LABELS, ip="10.2.0.1", ports=[{"name": "http", "containerPort": 8000}]))
        c.put("pods", pod("b", "llm", LABELS, ip="10.2.0.2", ports=[{"name": "metrics", "containerPort": 9100}]))
        c.put("pods", pod("c", "llm", LABELS, ip="10.2.0.3", ready=False))
        c.put("pods", pod("d", "llm", {"app": "other"}, ip="10.2.0.4"))
        _cluster(monkeypatch, kubeconfig, in_cluster=False)
        urls = ServicePods("llm", "vllm", 80, in_cluster=False).urls()
    assert urls == ["http://10.2.0.1:8000/metrics", "http://10.2.0.2:9100/metrics"]


def test_a_connection_that_is_not_the_expected_kind_lists_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with fake_api(tmp_path) as (c, kubeconfig):
        _cluster(monkeypatch, kubeconfig, in_cluster=False)
        with pytest.raises(api.K8sError, match="not the one expected"):
            ServicePods("llm", "vllm", 80, in_cluster=True).urls()
        assert c.calls == []


def test_which_variants_are_looked_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import loadgen.k8s.pod_metrics as pm

    rec = SimpleNamespace(namespace="llm", service="vllm", port=8000)
    resolved = SimpleNamespace(resolved_from=rec, base_url="http://vllm.llm.svc:8000")
    by_dns = SimpleNamespace(resolved_from=None, base_url="http://vllm-int8.inference.svc.cluster.local:8000")
    plain = SimpleNamespace(resolved_from=None, base_url="http://127.0.0.1:8000")
    monkeypatch.setattr(pm, "_in_cluster", lambda: False)
    on_laptop = [pod_source(v) for v in (resolved, by_dns, plain)]
    assert isinstance(on_laptop[0], ServicePods) and not on_laptop[0].in_cluster
    assert on_laptop[1:] == [None, None]  # a laptop asks the cluster only about what it resolved itself
    monkeypatch.setattr(pm, "_in_cluster", lambda: True)
    in_pod = [pod_source(v) for v in (resolved, by_dns, plain)]
    assert in_pod[2] is None
    assert isinstance(in_pod[1], ServicePods) and (in_pod[1].namespace, in_pod[1].service) == ("inference", "vllm-int8")
    assert in_pod[1].in_cluster and in_pod[1].port == 8000
