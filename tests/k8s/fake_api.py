"""A loopback fake Kubernetes API server: the REST paths loadgen's client uses, with state, and a record of calls.

Not a mock of loadgen: it speaks the API server's wire protocol (paths, label selectors, list / create / delete /
patch, pod logs, the service proxy) to the real `kubernetes` client, which a generated kubeconfig points here.
Tests shape the cluster's behaviour with hooks (what a created Job's pods do, what the proxy answers).
kubectl's own requests are understood too: it sends built-in objects as protobuf (`create namespace`, `create
secret generic`: the two decoded here, `_from_protobuf`), and with ``strict_namespaces`` an object is created only
in a namespace that exists, as the API server does.
"""

from __future__ import annotations

import base64
import json
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

# URL collection name -> (kind, API prefix)
COLLECTIONS = {
    "services": ("Service", "/api/v1"),
    "pods": ("Pod", "/api/v1"),
    "configmaps": ("ConfigMap", "/api/v1"),
    "secrets": ("Secret", "/api/v1"),
    "serviceaccounts": ("ServiceAccount", "/api/v1"),
    "networkpolicies": ("NetworkPolicy", "/apis/networking.k8s.io/v1"),
    "jobs": ("Job", "/apis/batch/v1"),
    "deployments": ("Deployment", "/apis/apps/v1"),
    "endpointslices": ("EndpointSlice", "/apis/discovery.k8s.io/v1"),
    "namespaces": ("Namespace", "/api/v1"),  # cluster-scoped: kept under namespace ""
}


def matches(selector: str | None, labels: dict[str, str]) -> bool:
    """The API server's equality-based label selector semantics (what the client sends as labelSelector)."""
    for term in filter(None, (t.strip() for t in (selector or "").split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k) == v:
                return False
        elif "=" in term:
            k, v = term.replace("==", "=").split("=", 1)
            if labels.get(k) != v:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


@dataclass
class Call:
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any


# A proxy hook gets (method, namespace, service[:port], subpath, body) and returns (status, content type, chunks).
ProxyHook = Callable[[str, str, str, str, Any], tuple[int, str, list[bytes]]]


@dataclass
class FakeCluster:
    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)  # (collection, ns, name)
    calls: list[Call] = field(default_factory=list)
    logs: dict[tuple[str, str], str] = field(default_factory=dict)
    proxy: ProxyHook | None = None
    on_create: Callable[[FakeCluster, str, dict[str, Any]], None] | None = None
    on_scale: Callable[[FakeCluster, str, str, int], None] | None = None
    on_list: Callable[[FakeCluster, str], None] | None = None  # called before each list: time passes
    # replicas -> how many PATCHes of deployments/scale to that count fail with a 500 before one succeeds
    scale_failures: dict[int, int] = field(default_factory=dict)
    proxy_headers: list[dict[str, str]] = field(default_factory=list)  # the headers of each proxied request
    strict_namespaces: bool = False  # refuse (404) an object in a namespace not created first, as the API server does
    lock: threading.RLock = field(default_factory=threading.RLock)

    def put(self, collection: str, obj: dict[str, Any]) -> dict[str, Any]:
        kind, prefix = COLLECTIONS[collection]
        obj.setdefault("kind", kind)
        obj.setdefault("apiVersion", prefix.rsplit("/", 2)[-2] + "/v1" if "apis" in prefix else "v1")
        meta = obj.setdefault("metadata", {})
        meta.setdefault("labels", {})
        if collection == "namespaces":  # cluster-scoped
            meta.pop("namespace", None)
            ns = ""
        else:
            ns = meta.setdefault("namespace", "default")
        self.objects[(collection, ns, meta["name"])] = obj
        return obj

    def names(self, collection: str) -> list[str]:
        return sorted(n for c, _, n in self.objects if c == collection)

    def calls_to(self, method: str, fragment: str) -> list[Call]:
        return [c for c in self.calls if c.method == method and fragment in c.path]


def pod(
    name: str,
    ns: str,
    labels: dict[str, str],
    *,
    ip: str = "10.0.0.1",
    ready: bool = True,
    ports: list[dict[str, Any]] | None = None,
    phase: str = "Running",
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"containers": [{"name": "server", "image": "vllm", "ports": ports or []}]},
        "status": {
            "phase": phase,
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def service(
    name: str, ns: str, labels: dict[str, str], selector: dict[str, str], ports: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"selector": selector, "ports": ports},
    }


def endpoint_slice(
    service_name: str,
    ns: str,
    ready: list[str],
    *,
    not_ready: tuple[str, ...] = (),
    ports: list[dict[str, Any]] | None = None,
    name: str | None = None,
) -> dict[str, Any]:
    """An EndpointSlice of Service ``service_name`` (labelled ``kubernetes.io/service-name``, as the controller does)
    with one endpoint per address, Ready or not."""
    return {
        "metadata": {
            "name": name or f"{service_name}-abcde",
            "namespace": ns,
            "labels": {"kubernetes.io/service-name": service_name},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [a], "conditions": {"ready": True}} for a in ready]
        + [{"addresses": [a], "conditions": {"ready": False}} for a in not_ready],
        "ports": ports if ports is not None else [{"name": "http", "port": 8000, "protocol": "TCP"}],
    }


PROTOBUF = "application/vnd.kubernetes.protobuf"


def _fields(buf: bytes) -> list[tuple[int, int | bytes]]:
    """A protobuf message's (field number, value) pairs, in order: varints as ints, the rest as bytes."""
    out: list[tuple[int, int | bytes]] = []
    i = 0

    def varint() -> int:
        nonlocal i
        value = shift = 0
        while True:
            byte = buf[i]
            i += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7

    while i < len(buf):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            out.append((number, varint()))
            continue
        size = varint() if wire == 2 else {1: 8, 5: 4}[wire]
        out.append((number, buf[i : i + size]))
        i += size
    return out


def _entries(fields: list[tuple[int, int | bytes]], number: int) -> dict[str, bytes]:
    """A `map<string, …>` field: its entries (key 1, value 2)."""
    out = {}
    for n, v in fields:
        if n == number and isinstance(v, bytes):
            entry = dict(_fields(v))
            out[bytes(entry.get(1, b"")).decode()] = bytes(entry.get(2, b""))  # type: ignore[arg-type]
    return out


def _from_protobuf(raw: bytes) -> dict[str, Any] | None:
    """The JSON form of an object kubectl sent as protobuf (k8s.io/apimachinery's `runtime.Unknown` envelope):
    a Namespace or a Secret, the kinds its `create namespace` and `create secret generic` send; None for another
    (answered 415)."""
    if raw[:4] != b"k8s\x00":
        return None
    envelope = dict(_fields(raw[4:]))
    type_meta = dict(_fields(bytes(envelope.get(1, b""))))  # type: ignore[arg-type]
    kind, api_version = bytes(type_meta.get(2, b"")).decode(), bytes(type_meta.get(1, b"")).decode()  # type: ignore[arg-type]
    fields = _fields(bytes(envelope.get(2, b"")))  # type: ignore[arg-type]
    meta_fields = _fields(next((bytes(v) for n, v in fields if n == 1 and isinstance(v, bytes)), b""))
    text = {n: bytes(v).decode() for n, v in meta_fields if n in (1, 3) and isinstance(v, bytes)}
    meta: dict[str, Any] = {"name": text.get(1, "")}
    if text.get(3):
        meta["namespace"] = text[3]
    labels = {k: v.decode() for k, v in _entries(meta_fields, 11).items()}
    if labels:
        meta["labels"] = labels
    obj: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "metadata": meta}
    if kind == "Namespace":
        return obj
    if kind == "Secret":
        obj["data"] = {k: base64.b64encode(v).decode() for k, v in _entries(fields, 2).items()}
        obj["type"] = next((bytes(v).decode() for n, v in fields if n == 3 and isinstance(v, bytes)), "") or "Opaque"
        return obj
    return None


def _handler(cluster: FakeCluster) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

        def _reply(self, status: int, doc: Any, ctype: str = "application/json") -> None:
            body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _stream(self, status: int, ctype: str, chunks: list[bytes]) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for c in chunks:
                self.wfile.write(f"{len(c):x}\r\n".encode() + c + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")

        def _status(self, code: int, reason: str, message: str = "") -> None:
            doc = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code}
            self._reply(code, doc | ({"message": message} if message else {}))

        def _body(self) -> Any:
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n) if n else b""
            if raw and self.headers.get("Content-Type") == PROTOBUF:
                return _from_protobuf(raw)
            return json.loads(raw) if raw else None

        def _handle(self, method: str) -> None:
            u = urlsplit(self.path)
            query = parse_qs(u.query)
            body = self._body() if method in ("POST", "PATCH", "PUT", "DELETE") else None
            with cluster.lock:
                cluster.calls.append(Call(method, u.path, query, body))
            parts = [unquote(p) for p in u.path.split("/") if p]  # as the API server decodes them
            # /api/v1/... or /apis/GROUP/VERSION/...
            rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
            ns = None
            if rest[:1] == ["namespaces"] and len(rest) >= 3:
                ns, rest = rest[1], rest[2:]
            elif rest[:1] == ["namespaces"]:  # the namespaces themselves: /api/v1/namespaces[/NAME]
                ns = ""
            if not rest or rest[0] not in COLLECTIONS:
                return self._status(404, "NotFound")
            coll, name, sub = rest[0], (rest[1] if len(rest) > 1 else None), rest[2:]
            if coll == "services" and name and sub[:1] == ["proxy"]:
                with cluster.lock:
                    cluster.proxy_headers.append(dict(self.headers.items()))
                if cluster.proxy is None:
                    return self._status(503, "ServiceUnavailable")
                status, ctype, chunks = cluster.proxy(method, ns or "", name, "/".join(sub[1:]), body)
                return self._stream(status, ctype, chunks)
            with cluster.lock:
                if name is None and method == "GET":
                    if cluster.on_list:
                        cluster.on_list(cluster, coll)
                    sel = (query.get("labelSelector") or [None])[0]
                    items = [
                        o
                        for (c, n, _), o in sorted(cluster.objects.items())
                        if c == coll and (ns is None or n == ns) and matches(sel, o["metadata"]["labels"])
                    ]
                    kind = COLLECTIONS[coll][0]
                    return self._reply(200, {"kind": kind + "List", "apiVersion": "v1", "metadata": {}, "items": items})
                if name is None and method == "POST":
                    if body is None:
                        return self._status(415, "UnsupportedMediaType")
                    if ns and cluster.strict_namespaces and ("namespaces", "", ns) not in cluster.objects:
                        return self._status(404, "NotFound", f'namespaces "{ns}" not found')
                    body.setdefault("metadata", {})["namespace"] = ns
                    if (coll, ns, body["metadata"]["name"]) in cluster.objects:
                        return self._status(409, "AlreadyExists")
                    obj = cluster.put(coll, body)
                    if cluster.on_create:
                        cluster.on_create(cluster, coll, obj)
                    return self._reply(201, obj)
                obj = cluster.objects.get((coll, ns or "", name or ""))
                if obj is None:
                    return self._status(404, "NotFound")
                if sub == ["log"] and method == "GET":
                    return self._reply(200, cluster.logs.get((ns or "", name or ""), "").encode(), "text/plain")
                if sub == ["scale"]:
                    if method == "PATCH":
                        replicas = int(body["spec"]["replicas"])
                        if cluster.scale_failures.get(replicas, 0) > 0:
                            cluster.scale_failures[replicas] -= 1
                            return self._status(500, "InternalError")
                        obj["spec"]["replicas"] = replicas
                        if cluster.on_scale:
                            cluster.on_scale(cluster, ns or "", name or "", replicas)
                    scale = {
                        "kind": "Scale",
                        "apiVersion": "autoscaling/v1",
                        "metadata": obj["metadata"],
                        "spec": {"replicas": obj["spec"].get("replicas", 1)},
                        "status": {"replicas": 0},
                    }
                    return self._reply(200, scale)
                if method == "GET" and not sub:
                    return self._reply(200, obj)
                if method == "DELETE" and not sub:
                    del cluster.objects[(coll, ns or "", name or "")]
                    policy = (query.get("propagationPolicy") or [(body or {}).get("propagationPolicy")])[0]
                    if coll == "jobs" and policy in ("Background", "Foreground"):  # else the pods are orphaned
                        job_labels = obj["spec"]["template"]["metadata"]["labels"]
                        for key in [
                            k
                            for k, o in cluster.objects.items()
                            if k[0] == "pods"
                            and k[1] == ns
                            and all(o["metadata"]["labels"].get(a) == b for a, b in job_labels.items())
                        ]:
                            del cluster.objects[key]
                    return self._reply(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})
            return self._status(405, "MethodNotAllowed")

        def do_GET(self) -> None:  # noqa: N802
            self._handle("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._handle("POST")

        def do_PATCH(self) -> None:  # noqa: N802
            self._handle("PATCH")

        def do_DELETE(self) -> None:  # noqa: N802
            self._handle("DELETE")

    return Handler


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up (a `loadgen` or `kubectl` process ending with a kept-alive connection) is no error."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@contextmanager
def fake_api(tmp: Path, namespace: str = "llm") -> Iterator[tuple[FakeCluster, Path]]:
    """A running fake API server and a kubeconfig (token auth, default namespace ``namespace``) pointing at it."""
    cluster = FakeCluster()
    httpd = _Server(("127.0.0.1", 0), _handler(cluster))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    kubeconfig = tmp / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": f"http://127.0.0.1:{httpd.server_address[1]}"}}],
                "users": [{"name": "tester", "user": {"token": "fake-token"}}],
                "contexts": [
                    {"name": "fake", "context": {"cluster": "fake", "user": "tester", "namespace": namespace}}
                ],
                "current-context": "fake",
            }
        ),
        encoding="utf-8",
    )
    try:
        yield cluster, kubeconfig
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)
