"""`loadgen k8s coldstart`: how long a deployment takes from nothing to its first token.

Probe the server once (it must answer before anything is scaled), scale to zero, wait until no pod is left, scale
back, and time three points on one clock: the scale request, the first pod Ready, the first streamed token (a
one-token chat request with the variant's credentials, through the API server's service proxy so that it works from
outside the cluster, or to ``--url``). An answer that waiting cannot change (401 / 403, 404, any other error but
429 / 502 / 503 / 504) stops the probe at once. The original replica count is restored whatever ends the sequence,
Ctrl-C included; a second Ctrl-C during the restore waits for it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from loadgen.config.credentials import credential_values, quotes_secret
from loadgen.k8s.api import Cluster, K8sError

__all__ = [
    "RETRYABLE_STATUS",
    "ColdStart",
    "ColdStartTimeout",
    "DirectProbe",
    "ProbeRefused",
    "ProxyProbe",
    "cold_start",
    "command",
]

# Answers that mean "not serving yet": a gateway or the API server's proxy with no pod behind it, or a server that
# sheds load while it loads the model. Everything else is an answer that waiting does not change.
RETRYABLE_STATUS = frozenset({429, 502, 503, 504})
_RESTORE_ATTEMPTS = 3


class ColdStartTimeout(K8sError):
    """A step did not finish in time: the deployment (or its endpoint) never came up; exit 1 (a dead target is a
    breach), not a usage error."""


class ProbeRefused(K8sError):
    """The server gave an answer that waiting cannot change (exit 2). Names the answer, never a credential."""

    def __init__(self, answer: str) -> None:
        super().__init__(answer)
        self.answer = answer
        self.outcome = ""  # what happened to the deployment, filled in by cold_start

    def __str__(self) -> str:
        return f"the probe was refused: {self.answer}" + (f"; {self.outcome}" if self.outcome else "")


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


def _error_text(body: bytes, secrets: list[str]) -> str:
    """The server's own words from an error body (OpenAI's error.message, FastAPI's detail, a Status' message),
    short, and withheld when it quotes a credential."""
    text = body[:2048].decode("utf-8", "replace").strip()
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        err = doc.get("error")
        found = (err.get("message") if isinstance(err, dict) else err) or doc.get("message") or doc.get("detail")
        text = found if isinstance(found, str) else json.dumps(found) if found else text
    return _shown(" ".join(text.split())[:200], secrets, "the body")


def _shown(text: str, secrets: list[str], what: str) -> str:
    """``text`` as the server said it, or withheld whole when it quotes a credential (even in part)."""
    return f"({what} quotes the credential: not shown)" if quotes_secret(text, secrets) else text


class _Probe:
    """One streaming chat request for one token. ``__call__`` is True once a chunk carrying a token arrives, False
    for an answer that may change while the pods start (``last`` says which), and raises ProbeRefused otherwise."""

    where = "the server"

    def __init__(self, model: str, headers: Mapping[str, str], timeout: float) -> None:
        self.body = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, "stream": True}
        self.headers = dict(headers)
        self.secrets = credential_values(self.headers)
        self.timeout = timeout
        self.last = "no answer yet"

    def __call__(self) -> bool:
        try:
            resp = self._send()
        except ProbeRefused:
            raise
        except Exception as e:  # noqa: BLE001 - refused, reset, timed out: the pods are not serving yet
            self.last = f"no answer ({type(e).__name__})"
            return False
        try:
            return self._read(resp)
        finally:
            resp.close()  # left mid-stream or read whole: this connection is not reused

    def _send(self) -> Any:
        raise NotImplementedError

    def _refused_by_cluster(self, status: int, body: bytes) -> str | None:
        return None

    def _read(self, resp: Any) -> bool:
        status = int(resp.status)
        if status != 200:
            try:
                body = resp.read(4096)
            except Exception:  # noqa: BLE001 - a body cut short: the status is the answer
                body = b""
            said = self._refused_by_cluster(status, body)
            if said is not None:
                raise ProbeRefused(said)
            reason = _shown(getattr(resp, "reason", "") or "", self.secrets, "the status line")
            answer = f"HTTP {status} {reason}".strip() + f" from {self.where}"
            text = _error_text(body, self.secrets)
            if status in RETRYABLE_STATUS:
                self.last = answer
                return False
            hint = {
                401: " (the credentials: --api-key-env / --header-env)",
                403: " (the credentials: --api-key-env / --header-env)",
                404: " (the model: --model; or the path: an OpenAI-compatible server's /v1/chat/completions)",
            }.get(status, "")
            raise ProbeRefused(answer + (f": {text}" if text else "") + hint)
        ctype = (resp.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if ctype != "text/event-stream":
            raise ProbeRefused(f"HTTP 200 from {self.where} with {ctype or 'no content type'}, not an event stream")
        buf = b""
        try:
            for raw in resp.stream(64):
                buf += raw
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    data = line.strip()
                    if data.startswith(b"data:") and _has_token(data[5:]):
                        return True
        except Exception as e:  # noqa: BLE001 - a stream cut or stalled before its first token: not serving yet
            self.last = f"HTTP 200 from {self.where}, stream cut before a token ({type(e).__name__})"
            return False
        raise ProbeRefused(f"HTTP 200 from {self.where}, but the stream ended without a token")


class ProxyProbe(_Probe):
    """Through the API server's service proxy (``services/NAME:PORT/proxy``): works wherever the kubeconfig does.
    The API server consumes the Authorization header, so a bearer key cannot go this way (``command`` refuses it)."""

    def __init__(
        self,
        cluster: Cluster,
        ns: str,
        service: str,
        port: int,
        model: str,
        headers: Mapping[str, str] | None = None,
        timeout: float = 30.0,
    ) -> None:
        super().__init__(model, headers or {}, timeout)
        self.cluster, self.path = cluster, f"/api/v1/namespaces/{ns}/services/{service}:{port}/proxy"
        self.where = f"{service}:{port} (through the API server's service proxy)"

    def _send(self) -> Any:
        api = self.cluster.api_client
        method, url, headers, data, _ = api.param_serialize(
            "POST",
            f"{self.path}/v1/chat/completions",
            header_params={"Content-Type": "application/json", "Accept": "text/event-stream", **self.headers},
            body=self.body,
            auth_settings=["BearerToken"],
        )
        # call_api does not read the body: the stream is read as it arrives, up to its first data line.
        return api.call_api(method, url, header_params=headers, body=data, _request_timeout=self.timeout).response

    def _refused_by_cluster(self, status: int, body: bytes) -> str | None:
        """The API server's own refusal (a `Status` object): the kubeconfig's rights, not the model server's."""
        if status not in (401, 403, 404):
            return None
        try:
            doc = json.loads(body)
        except ValueError:
            return None
        if not (isinstance(doc, dict) and doc.get("kind") == "Status" and doc.get("apiVersion") == "v1"):
            return None
        msg = _shown(" ".join(str(doc.get("message") or doc.get("reason") or "").split())[:200], self.secrets, "it")
        return f"HTTP {status} from the Kubernetes API server: {msg} (needs `create services/proxy`)"


class DirectProbe(_Probe):
    """Straight to ``url`` (the variant's base URL from inside the cluster, or an ingress / gateway URL)."""

    def __init__(self, url: str, model: str, headers: Mapping[str, str] | None = None, timeout: float = 30.0) -> None:
        import urllib3

        super().__init__(model, headers or {}, timeout)
        self.url = url.rstrip("/") + "/v1/chat/completions"
        self.where = url.rstrip("/")
        self.pool = urllib3.PoolManager(retries=False)

    def _send(self) -> Any:
        import urllib3

        return self.pool.request(
            "POST",
            self.url,
            body=json.dumps(self.body).encode(),
            # A new connection each time: one kept from before the scale-down would reach a pod that is gone.
            headers={
                "Content-Type": "application/json",
                "Accept": "text/event-stream",
                "Connection": "close",
                **self.headers,
            },
            timeout=urllib3.Timeout(connect=min(10.0, self.timeout), read=self.timeout),
            preload_content=False,
            redirect=False,
        )


def first_token(cluster: Cluster, ns: str, service: str, port: int, model: str, timeout: float) -> bool:
    """One keyless probe through the service proxy (see ProxyProbe)."""
    return ProxyProbe(cluster, ns, service, port, model, timeout=timeout)()


@contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Ctrl-C waits until the block is done (the restore of a production deployment), then is raised."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pressed: list[int] = []
    old = signal.signal(signal.SIGINT, lambda *_: pressed.append(1))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
    if pressed:
        raise KeyboardInterrupt


def _restore(cluster: Cluster, ns: str, deployment: str, original: int) -> None:
    """Scale back to ``original`` unless it is there already; retried, and a failure says what to run."""
    with _sigint_deferred():
        for attempt in range(_RESTORE_ATTEMPTS):
            try:
                current = cluster.apps.read_namespaced_deployment_scale(deployment, ns)
                if int(current.spec.replicas or 0) != original:
                    _scale(cluster, ns, deployment, original)
                return
            except Exception as e:  # noqa: BLE001 - an API error or a dropped connection: try again, then say so
                if attempt + 1 == _RESTORE_ATTEMPTS:
                    raise K8sError(
                        f"could not restore {ns}/{deployment} to {original} replica(s) ({type(e).__name__}: "
                        f"{getattr(e, 'reason', e)}): run `kubectl -n {ns} scale deployment/{deployment} "
                        f"--replicas={original}`"
                    ) from e
                time.sleep(1.0)


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
    """Scale ``deployment`` to zero and back; raises ColdStartTimeout on a timeout, ProbeRefused on an answer that
    waiting cannot change (before the scale-down: nothing is scaled). Restores the original replicas."""
    scale = cluster.apps.read_namespaced_deployment_scale(deployment, ns)
    original = int(scale.spec.replicas or 0)
    if original == 0:
        raise K8sError(f"deployment {ns}/{deployment} has 0 replicas: nothing to time (scale it up first)")
    dep = cluster.apps.read_namespaced_deployment(deployment, ns)
    selector = ",".join(f"{k}={v}" for k, v in (dep.spec.selector.match_labels or {}).items())
    ask = probe or ProxyProbe(cluster, ns, service, port, model, timeout=min(30.0, timeout))
    say(f"probing {service} before scaling anything")
    try:
        answered = ask()
    except ProbeRefused as e:
        e.outcome = f"nothing was scaled ({deployment} keeps its {original} replica(s))"
        raise
    if not answered:
        raise K8sError(
            f"{service} does not answer while {deployment} has {original} replica(s) "
            f"({getattr(ask, 'last', 'no token')}): nothing was scaled"
        )
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
                raise ColdStartTimeout(
                    f"no first token from {service}:{port} {timeout:g}s after the scale request "
                    f"(last: {getattr(ask, 'last', 'no token')})"
                )
            time.sleep(interval)
        t_token = time.monotonic()
        return ColdStart(original, t_ready - t0, t_token - t_ready)
    except ProbeRefused as e:
        e.outcome = f"{deployment} scaled back to {original} replica(s)"
        raise
    finally:
        # Whatever ended the sequence (a refusal, a timeout, an API error, Ctrl-C), the deployment gets its replicas
        # back. A restore that fails raises its own error (what to run), chained to the first.
        _restore(cluster, ns, deployment, original)


def _credentials(args: argparse.Namespace, name: str, model: str, url: str) -> tuple[dict[str, str], str | None]:
    """The probe's headers from the variant's credentials (``Variant.credential_headers``), or a usage error."""
    from pydantic import ValidationError

    from loadgen.config.scenario import Variant

    from_env: dict[str, str] = {}
    for spec in args.header_env:
        header, sep, env = spec.partition("=")
        if not (sep and header.strip() and env.strip()):
            return {}, "--header-env: expected HEADER=NAME, e.g. api-key=AZURE_OPENAI_KEY"
        from_env[header.strip()] = env.strip()
    try:
        variant = Variant(name=name, model=model, base_url=url, api_key_env=args.api_key_env, headers_from_env=from_env)
    except ValidationError as e:
        # The field and the rule, never the input (a key pasted in place of its variable's name).
        what = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'variant'}: {err['msg']}" for err in e.errors())
        return {}, f"the probe's credentials: {what}"
    unset = [n for n in variant.secret_env_names() if not os.environ.get(n)]
    if unset:
        return {}, f"{', '.join(unset)} not set (or empty): the probe would be refused, so nothing was scaled"
    return variant.credential_headers(), None


def command(args: argparse.Namespace, connect: Callable[[argparse.Namespace], Cluster]) -> int:
    """`loadgen k8s coldstart`: checks the flags and the credentials before the cluster is touched."""
    from loadgen.config.durations import parse_duration
    from loadgen.exit_codes import ExitCode
    from loadgen.k8s.discover import discover

    try:
        timeout = parse_duration(args.timeout)
    except ValueError as e:
        print(f"loadgen: --timeout: {e}", file=sys.stderr)
        return ExitCode.USAGE
    cluster = connect(args)
    try:
        found = [f for f in discover(cluster, cluster.namespace) if f.name == args.variant]
        if len(found) != 1:
            raise K8sError(f"variant {args.variant!r}: {len(found)} Services found in {cluster.namespace}")
        model = args.model or found[0].model
        if not model:
            raise K8sError(f"variant {args.variant!r}: no model label; give --model")
        headers, problem = _credentials(args, args.variant, model, args.url or found[0].base_url)
        if problem is None and not args.url and any(h.lower() == "authorization" for h in headers):
            problem = (
                "the API server's service proxy consumes the Authorization header, so a bearer key cannot reach "
                "the server through it: give --url (the variant's base URL, e.g. "
                f"{found[0].base_url}, from inside the cluster; or an ingress / gateway URL)"
            )
        if problem is not None:
            print(f"loadgen: {problem}", file=sys.stderr)
            return ExitCode.USAGE
        probe_timeout = min(30.0, timeout)
        probe: _Probe = (
            DirectProbe(args.url, model, headers, probe_timeout)
            if args.url
            else ProxyProbe(cluster, cluster.namespace, found[0].service, found[0].port, model, headers, probe_timeout)
        )
        result = cold_start(
            cluster,
            cluster.namespace,
            args.deployment,
            found[0].service,
            found[0].port,
            model,
            timeout=timeout,
            interval=args.interval,
            probe=probe,
            say=lambda s: print(f"loadgen: {s}", file=sys.stderr, flush=True),
        )
    finally:
        cluster.close()
    print(result.render(args.deployment))
    return 0
