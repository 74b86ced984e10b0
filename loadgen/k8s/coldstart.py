"""`loadgen k8s coldstart`: how long a deployment takes from nothing to its first token.

Scale to zero, wait until no pod is left, scale back, and time three points on one clock: the scale request, the
first pod Ready, the first streamed token (a one-token chat request through the API server's service proxy, so it
works from outside the cluster). The original replica count is restored whatever happens, Ctrl-C included.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loadgen.k8s.api import Cluster, K8sError

__all__ = ["ColdStart", "ColdStartTimeout", "cold_start", "first_token"]


class ColdStartTimeout(K8sError):
    """A step did not finish in time: the deployment (or its endpoint) never came up; exit 3, not a usage error."""


@dataclass
class ColdStart:
    replicas: int
    scale_to_ready_s: float
    ready_to_first_token_s: float

    @property
    def total_s(self) -> float:
        return self.scale_to_ready_s + self.ready_to_first_token_s

    def render(self, deployment: str) -> str:
        return (
            f"{deployment}: cold start {self.total_s:.2f} s to the first token "
            f"(scale request → pod Ready {self.scale_to_ready_s:.2f} s, Ready → first token "
            f"{self.ready_to_first_token_s:.2f} s; {self.replicas} replica(s) restored)"
        )


def _scale(cluster: Cluster, ns: str, deployment: str, replicas: int) -> None:
    cluster.apps.patch_namespaced_deployment_scale(deployment, ns, {"spec": {"replicas": replicas}})


def _pods(cluster: Cluster, ns: str, selector: str) -> list[Any]:
    return list(cluster.core.list_namespaced_pod(ns, label_selector=selector).items)


def _ready(pod: Any) -> bool:
    conditions = (pod.status.conditions or []) if pod.status else []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def _has_token(payload: bytes) -> bool:
    """A chunk that carries generated text (content or reasoning): a role-only or usage-only chunk is no token."""
    try:
        doc = json.loads(payload)
    except ValueError:
        return False  # `[DONE]`, a keep-alive, or garbage
    for choice in (doc.get("choices") or []) if isinstance(doc, dict) else []:
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or choice.get("text"):
            return True
    return False


def first_token(cluster: Cluster, ns: str, service: str, port: int, model: str, timeout: float) -> bool:
    """One streaming chat request for one token; True once a chunk carrying a generated token arrives."""
    body = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, "stream": True}
    api = cluster.api_client
    try:
        method, url, headers, data, _ = api.param_serialize(
            "POST",
            f"/api/v1/namespaces/{ns}/services/{service}:{port}/proxy/v1/chat/completions",
            header_params={"Content-Type": "application/json", "Accept": "text/event-stream"},
            body=body,
            auth_settings=["BearerToken"],
        )
        # call_api does not read the body: the stream is read as it arrives, up to its first data line.
        resp = api.call_api(method, url, header_params=headers, body=data, _request_timeout=timeout).response
    except Exception:  # noqa: BLE001 - refused, reset, timed out, 503 from the proxy: all mean "not answering yet"
        return False
    if resp.status >= 400:
        # Read the (short) error body first: a connection handed back with bytes unread corrupts the next answer.
        resp.drain_conn()
        resp.release_conn()
        return False
    buf = b""
    try:
        for raw in resp.stream(64):
            buf += raw
            *lines, buf = buf.split(b"\n")
            for line in lines:
                data = line.strip()
                if data.startswith(b"data:") and _has_token(data[5:]):
                    return True
    except Exception:  # noqa: BLE001 - a stream cut before its first token is no first token
        return False
    finally:
        resp.close()  # left mid-stream: this connection cannot be reused
    return False


def cold_start(
    cluster: Cluster,
    ns: str,
    deployment: str,
    service: str,
    port: int,
    model: str,
    *,
    timeout: float = 900.0,
    interval: float = 1.0,
    probe: Callable[[], bool] | None = None,
    say: Callable[[str], None] = lambda _s: None,
) -> ColdStart:
    """Scale ``deployment`` to zero and back; raises K8sError on a timeout. Restores the original replicas."""
    scale = cluster.apps.read_namespaced_deployment_scale(deployment, ns)
    original = int(scale.spec.replicas or 0)
    if original == 0:
        raise K8sError(f"deployment {ns}/{deployment} has 0 replicas: nothing to time (scale it up first)")
    dep = cluster.apps.read_namespaced_deployment(deployment, ns)
    selector = ",".join(f"{k}={v}" for k, v in (dep.spec.selector.match_labels or {}).items())
    ask = probe or (lambda: first_token(cluster, ns, service, port, model, timeout=min(30.0, timeout)))
    try:
        say(f"scaling {deployment} from {original} to 0")
        _scale(cluster, ns, deployment, 0)
        deadline = time.monotonic() + timeout
        while _pods(cluster, ns, selector):
            if time.monotonic() > deadline:
                raise ColdStartTimeout(f"pods of {deployment} still there {timeout:g}s after scaling to 0")
            time.sleep(interval)
        say(f"no pod left; scaling back to {original}")
        t0 = time.monotonic()
        _scale(cluster, ns, deployment, original)
        deadline = t0 + timeout
        while not any(_ready(p) for p in _pods(cluster, ns, selector)):
            if time.monotonic() > deadline:
                raise ColdStartTimeout(f"no pod of {deployment} Ready {timeout:g}s after the scale request")
            time.sleep(interval)
        t_ready = time.monotonic()
        say(f"pod Ready after {t_ready - t0:.2f} s; waiting for the first token")
        while not ask():
            if time.monotonic() > deadline:
                raise ColdStartTimeout(f"no first token from {service}:{port} {timeout:g}s after the scale request")
            time.sleep(interval)
        t_token = time.monotonic()
        return ColdStart(original, t_ready - t0, t_token - t_ready)
    finally:
        # Whatever ended the sequence (a timeout, an API error, Ctrl-C), the deployment gets its replicas back.
        current = cluster.apps.read_namespaced_deployment_scale(deployment, ns)
        if int(current.spec.replicas or 0) != original:
            _scale(cluster, ns, deployment, original)
