"""Where a variant's pods are, for the master's server-metrics scraper (locust_plugin): one /metrics URL per
ready pod behind the variant's Service, read again through the run.

Two ways, by what the master runs with:

- in the cluster, with the pod's service-account token, it lists the EndpointSlices of the Service and nothing
  else: `list_endpointslices` is the one call, and `IN_CLUSTER_CALLS` says so, for the chart's Role to grant exactly
  that (a test compares the two, and another records every request this module's in-cluster path sends);
- on a user's machine (`loadgen run` / `sweep` with a selector variant, the kubeconfig that resolved it), it reads the
  Service and lists its pods (`discover.service_pod_metrics`: each pod's `metrics` container port, else the serving
  one).

A variant is looked up when it was resolved from a selector (`resolved_from` names its Service), or, in the cluster
only, when its base URL is a Service's cluster DNS name (`http://SERVICE.NAMESPACE.svc[.cluster.local]:PORT`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
from typing import Any
from urllib.parse import urlsplit

from loadgen.k8s.api import Cluster, K8sError

__all__ = ["IN_CLUSTER_CALLS", "ServicePods", "list_endpointslices", "pod_source", "ready_endpoint_urls"]

# Every Kubernetes API call the in-cluster master makes, as (API group, resource, verb): the chart's Role grants
# exactly these (tests compare it with the rendered Role).
IN_CLUSTER_CALLS: tuple[tuple[str, str, str], ...] = (("discovery.k8s.io", "endpointslices", "list"),)

_SERVICE_LABEL = "kubernetes.io/service-name"
_DNS_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_SERVICE_DNS = re.compile(rf"^(?P<service>{_DNS_LABEL})\.(?P<ns>{_DNS_LABEL})\.svc(?:\.cluster\.local)?$")
_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
_SERVING_NAMES = ("http", "openai", "serve", "predictor")
_API_TIMEOUT_S = 10.0  # a list that hangs must not stop the scraping for good


def list_endpointslices(cluster: Cluster, namespace: str, service: str) -> list[Any]:
    """The EndpointSlices of Service ``namespace/service`` (label ``kubernetes.io/service-name``): the in-cluster
    master's only API call (IN_CLUSTER_CALLS)."""
    import kubernetes

    api = kubernetes.client.DiscoveryV1Api(cluster.api_client)
    found = api.list_namespaced_endpoint_slice(
        namespace, label_selector=f"{_SERVICE_LABEL}={service}", _request_timeout=_API_TIMEOUT_S
    )
    return list(found.items)


def _slice_port(ports: list[Any], service_port: int | None) -> int | None:
    """The endpoint port to read /metrics on: one named `metrics`, else the one with the Service's port number, else
    a serving name (`http`, …), else the only or first one."""
    ports = [p for p in ports if p.port is not None]
    for want in (
        lambda p: p.name == "metrics",
        lambda p: service_port is not None and int(p.port) == service_port,
        lambda p: p.name in _SERVING_NAMES,
    ):
        hit = [p for p in ports if want(p)]
        if hit:
            return int(hit[0].port)
    return int(ports[0].port) if ports else service_port


def ready_endpoint_urls(slices: list[Any], service_port: int | None, scheme: str = "http") -> list[str]:
    """One /metrics URL per ready endpoint address (a `ready` that is unset counts as ready, as the API says)."""
    urls: list[str] = []
    for s in slices:
        if (getattr(s, "address_type", None) or "IPv4") not in ("IPv4", "IPv6"):
            continue  # FQDN endpoints are not pods
        port = _slice_port(list(s.ports or []), service_port)
        if port is None:
            continue
        for ep in s.endpoints or []:
            cond = ep.conditions
            if cond is not None and cond.ready is False:
                continue
            for addr in (ep.addresses or [])[:1]:
                host = f"[{addr}]" if ":" in addr else addr
                urls.append(f"{scheme}://{host}:{port}/metrics")
    return sorted(dict.fromkeys(urls))


class ServicePods:
    """The ready pods of one Service, listed again at each ``urls()`` (one connection, opened at the first)."""

    def __init__(self, namespace: str, service: str, port: int | None, in_cluster: bool) -> None:
        self.namespace, self.service, self.port, self.in_cluster = namespace, service, port, in_cluster
        self._cluster: Cluster | None = None

    def describe(self) -> str:
        return f"Service {self.namespace}/{self.service}"

    def _connect(self) -> Cluster:
        if self._cluster is None:
            from loadgen.k8s.api import connect

            self._cluster = connect()
            if self._cluster.in_cluster != self.in_cluster:
                # Decided by the same rule as connect's; a mismatch would call what the Role does not grant.
                raise K8sError("the cluster connection is not the one expected (in-cluster vs kubeconfig)")
        return self._cluster

    def prepare(self) -> None:
        """Connect now, before a run: the kubernetes client's import and set-up take about half a CPU second, which
        the first listing of a run would otherwise spend on the master's loop while the run's clock already runs
        (its workers told to start that much later: a shorter measured window). A failure is left to `urls()`, which
        meets it again and raises it to the scrape loop (its note says why)."""
        with contextlib.suppress(Exception):
            self._connect()

    def urls(self) -> list[str]:
        cluster = self._connect()
        if self.in_cluster:
            return ready_endpoint_urls(list_endpointslices(cluster, self.namespace, self.service), self.port)
        from loadgen.k8s.discover import service_pod_metrics

        return service_pod_metrics(cluster, self.namespace, self.service)


def _in_cluster() -> bool:
    """What `connect()` would use: the pod's service account (a token mounted, no kubeconfig named)."""
    return bool(
        os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG") and os.path.exists(_TOKEN)
    )


def pod_source(variant: Any) -> ServicePods | None:
    """The pods of a variant's Service, or None when there is no way to list them (then the variant's URL is
    scraped): a variant resolved from a selector (its kubeconfig, or the in-cluster token), or in the cluster a base
    URL that names a Service by its cluster DNS name."""
    in_cluster = _in_cluster()
    rec = getattr(variant, "resolved_from", None)
    if rec is not None:
        found = ServicePods(rec.namespace, rec.service, int(rec.port), in_cluster)
    elif in_cluster:
        u = urlsplit(getattr(variant, "base_url", "") or "")
        m = _SERVICE_DNS.match(u.hostname or "")
        if m is None:
            return None
        found = ServicePods(m["ns"], m["service"], u.port or (443 if u.scheme == "https" else 80), in_cluster)
    else:
        return None
    # The `k8s` extra: without it there is nothing to list with (looked up, not imported: that takes a while).
    return found if importlib.util.find_spec("kubernetes") is not None else None
