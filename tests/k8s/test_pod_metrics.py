"""Where a variant's pods are, against the fake API server: in the cluster, from the Service's EndpointSlices and
nothing else (every request recorded and compared with IN_CLUSTER_CALLS); with a kubeconfig, from the Service's
pods (discover's per-pod metrics endpoints); and which variants are looked up at all."""

from __future__ import annotations

import json
import subprocess
import sys
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


def test_a_lister_connects_before_the_run_and_leaves_a_failure_to_its_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`prepare()` spends the client's set-up before a run (no API call yet); a kubeconfig that does not work is not
    raised there but by the listing, where the scrape loop turns it into its note."""
    with fake_api(tmp_path) as (c, kubeconfig):
        c.put("services", service("vllm", "llm", {}, LABELS, [{"name": "http", "port": 80}]))
        c.put("pods", pod("a", "llm", LABELS, ip="10.2.0.1", ports=[{"name": "http", "containerPort": 80}]))
        _cluster(monkeypatch, kubeconfig, in_cluster=False)
        pods = ServicePods("llm", "vllm", 80, in_cluster=False)
        pods.prepare()
        assert pods._cluster is not None and c.calls == []
        assert pods.urls() == ["http://10.2.0.1:80/metrics"]
    monkeypatch.undo()
    broken = tmp_path / "broken"
    broken.write_text("- not a kubeconfig\n")
    monkeypatch.setenv("KUBECONFIG", str(broken))
    pods = ServicePods("llm", "vllm", 80, in_cluster=False)
    pods.prepare()
    assert pods._cluster is None
    with pytest.raises(api.K8sError, match="no Kubernetes configuration"):
        pods.urls()


_AT_INIT = r"""
import json, sys
from types import SimpleNamespace
import locust  # (first: it patches the process)
from loadgen.config.scenario import validate_scenario
from loadgen.locust_plugin import live_metrics

rec = {"selector": "app=vllm", "namespace": "llm", "service": "vllm", "port": 80, "base_url": "http://x:80"}
scenario = validate_scenario(
    {
        "name": "s",
        "variants": [
            {"name": "resolved", "base_url": "http://x:80", "model": "m", "resolved_from": rec},
            {"name": "plain", "base_url": "http://127.0.0.1:1", "model": "m"},
        ],
        "traffic": {"mixes": [{"name": "chat"}]},
        "metrics": {"server_scrape_interval": sys.argv[1]},
    }
)
live_metrics.runtime_of = lambda _env: SimpleNamespace(scenario=scenario)
state = live_metrics.ExporterState(SimpleNamespace())
print(json.dumps({n: None if p is None else p._cluster is not None for n, p in state.pods.items()}))
"""


@pytest.mark.parametrize("every", ["2s", "0s"])
def test_the_master_connects_each_resolved_variants_lister_at_init(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, every: str
) -> None:
    """Before any run starts (Locust's init: the exporter's state), where it scrapes: a run's first listing must not
    hold the master's loop for the client's set-up while the run's clock runs (its workers would start that much into
    the window). Locust patches the process it is imported in: the check runs in a fresh interpreter."""
    with fake_api(tmp_path) as (c, kubeconfig):
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        proc = subprocess.run(
            [sys.executable, "-c", _AT_INIT, every], capture_output=True, text=True, timeout=60, check=False
        )
        calls = list(c.calls)
    assert proc.returncode == 0, proc.stderr[-3000:]
    connected = json.loads(proc.stdout.strip().splitlines()[-1])
    # Connected, not yet listed: the listing is the scrape loop's, in the run.
    assert connected == ({} if every == "0s" else {"resolved": True, "plain": None}) and calls == []
