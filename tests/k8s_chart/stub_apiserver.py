"""A loopback stand-in for the Kubernetes API server, enough for `helm install --wait=false` to run its real code path.

It answers /version, /api, /apis and the discovery documents of the kinds the chart uses, the objects it was given
as already there (what a `lookup` finds; a PATCH of one, Helm adopting it, is accepted), 404 on every other GET (so
Helm finds nothing installed), and echoes back every POST (Helm's create) with 201, recording it. Nothing is kept:
it is a renderer's audience, not a cluster.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# group/version -> [(plural, kind, namespaced)]
RESOURCES: dict[str, list[tuple[str, str, bool]]] = {
    "v1": [
        ("configmaps", "ConfigMap", True),
        ("services", "Service", True),
        ("serviceaccounts", "ServiceAccount", True),
        ("secrets", "Secret", True),
        ("pods", "Pod", True),
        ("namespaces", "Namespace", False),
    ],
    "apps/v1": [("deployments", "Deployment", True)],
    "batch/v1": [("jobs", "Job", True)],
    "rbac.authorization.k8s.io/v1": [("roles", "Role", True), ("rolebindings", "RoleBinding", True)],
    "networking.k8s.io/v1": [("ingresses", "Ingress", True), ("networkpolicies", "NetworkPolicy", True)],
    "monitoring.coreos.com/v1": [("servicemonitors", "ServiceMonitor", True), ("podmonitors", "PodMonitor", True)],
}
VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]


def _resource_list(gv: str) -> dict[str, Any]:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv,
        "resources": [
            {"name": plural, "singularName": kind.lower(), "namespaced": ns, "kind": kind, "verbs": VERBS}
            for plural, kind, ns in RESOURCES[gv]
        ],
    }


def _group_list() -> dict[str, Any]:
    groups = []
    for gv in RESOURCES:
        if "/" not in gv:
            continue
        group, version = gv.split("/")
        ver = {"groupVersion": gv, "version": version}
        groups.append({"name": group, "versions": [ver], "preferredVersion": ver})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


class StubAPIServer:
    """``existing``: objects the cluster already holds, by API path (what Helm's `lookup` finds), e.g.
    ``{"/api/v1/namespaces/loadtest/secrets/NAME": {...}}``."""

    def __init__(self, existing: dict[str, dict[str, Any]] | None = None) -> None:
        self.existing = dict(existing or {})
        self.created: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str]] = []
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> StubAPIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

            def _json(self, status: int, doc: dict[str, Any]) -> None:
                body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _not_found(self) -> None:
                status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}
                self._json(404, {**status, "message": f"{self.path} not found"})

            def do_GET(self) -> None:  # noqa: N802
                path = self.path.split("?", 1)[0]
                stub.requests.append(("GET", self.path))
                if path == "/version":
                    self._json(200, {"major": "1", "minor": "33", "gitVersion": "v1.33.0", "platform": "linux/amd64"})
                elif path == "/api":
                    self._json(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})
                elif path == "/apis":
                    self._json(200, _group_list())
                elif path == "/api/v1":
                    self._json(200, _resource_list("v1"))
                elif path.startswith("/apis/") and path[len("/apis/") :] in RESOURCES:
                    self._json(200, _resource_list(path[len("/apis/") :]))
                elif path in stub.existing:
                    self._json(200, stub.existing[path])
                else:
                    self._not_found()

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                doc = json.loads(self.rfile.read(length) or b"{}")
                stub.requests.append(("POST", self.path))
                stub.created.append(doc)
                self._json(201, doc)

            def _refuse(self) -> None:
                stub.requests.append((self.command, self.path))
                path = self.path.split("?", 1)[0]
                if self.command in ("PATCH", "PUT") and path in stub.existing:
                    # Helm adopting an object already there (its own, from an earlier install): accepted as is.
                    self.rfile.read(int(self.headers.get("Content-Length") or 0))
                    self._json(200, stub.existing[path])
                    return
                self._not_found()

            do_PUT = do_PATCH = do_DELETE = _refuse  # noqa: N815

        return Handler
