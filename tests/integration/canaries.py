"""Canary credentials for the secrets tests: one value per credential path a scenario or a command has, the servers
that receive them (an inference server and a Prometheus that answer some requests 401 quoting what they got, in the
body, a header and the status line, as gateways do), and the grep for them in any output."""

from __future__ import annotations

import base64
import json
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from tests.serving import threaded_http

from .harness import write_scenario

KEY = "sk-canary-7f3a9c1e5b2d4f60a8e1"  # variants[0].api_key_env: Authorization: Bearer KEY
APIM = "apim-canary-0b9d27c4e18f"  # variants[0].headers_from_env.api-key (Azure API Management)
XKEY = "xkey-canary-3c71aa90d4e2"  # variants[0].headers_from_env.x-api-key
AUTH = "auth-canary-62b0e9f1c7a4"  # variants[1].headers_from_env.Authorization: "Token AUTH"
PROM_USER = "promuser-canary-a1b2c3d4"  # metrics.prometheus.basic_auth_env.username
PROM_PASS = "prompass-canary-5e6a13f0c2d8"  # metrics.prometheus.basic_auth_env.password
PROM_TOKEN = "promtoken-canary-4d5e6f7a8b9c"  # metrics.prometheus.bearer_token_env
OTLP_TOKEN = "otlp-canary-91c2d3e4f5a6"  # OTEL_EXPORTER_OTLP_HEADERS (the OTLP receiver's own credential)
CANARIES = (KEY, APIM, XKEY, AUTH, PROM_USER, PROM_PASS, PROM_TOKEN, OTLP_TOKEN)
# What a server may quote instead of the value itself: HTTP basic auth's base64 pair.
BASIC = base64.b64encode(f"{PROM_USER}:{PROM_PASS}".encode()).decode()
FORMS = (*CANARIES, BASIC)
ENV = {
    "LG_CANARY_KEY": KEY,
    "LG_CANARY_APIM": APIM,
    "LG_CANARY_XKEY": XKEY,
    "LG_CANARY_AUTH": f"Token {AUTH}",
    "LG_PROM_USER": PROM_USER,
    "LG_PROM_PASS": PROM_PASS,
    "LG_PROM_TOKEN": PROM_TOKEN,
    "OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer {OTLP_TOKEN}",
}
# Every credential a variant can carry: the bearer key, key headers, a raw Authorization header of another scheme.
VARIANT_SECRETS = {
    "a": {
        "api_key_env": "LG_CANARY_KEY",
        "headers_from_env": {"api-key": "LG_CANARY_APIM", "x-api-key": "LG_CANARY_XKEY"},
    },
    "b": {"headers_from_env": {"Authorization": "LG_CANARY_AUTH"}},
}
PROM_BASIC = {"basic_auth_env": {"username": "LG_PROM_USER", "password": "LG_PROM_PASS"}}
PROM_BEARER = {"bearer_token_env": "LG_PROM_TOKEN"}
# The query the Prometheus refuses over a range (the report's read) with 401, quoting the credentials it got; its
# instant form (the preflight's check) it answers.
DENIED = "denied_metric"
CREDENTIAL_HEADERS = ("Authorization", "api-key", "x-api-key")


def leaks(text: str | bytes) -> list[str]:
    """The canaries (or a form of one) in ``text``."""
    if isinstance(text, bytes):
        return [c for c in FORMS if c.encode() in text]
    return [c for c in FORMS if c in text]


def all_bytes(root: Path) -> bytes:
    """Every file under ``root``, concatenated."""
    return b"\n".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


def quoted(headers: Any) -> str:
    """What a careless server says back: every credential header it got, whole and without its scheme, and a basic
    pair decoded."""
    said = []
    for name in CREDENTIAL_HEADERS:
        value = headers.get(name) or ""
        if not value:
            continue
        said.append(f"{name}: {value}")
        scheme, _, rest = value.partition(" ")
        if rest:
            said.append(rest)
            if scheme == "Basic":
                said.append(base64.b64decode(rest).decode("utf-8", "replace"))
    return "; ".join(said)


def send_reply(h: BaseHTTPRequestHandler, status: int, ctype: str, body: bytes, echo: str = "") -> None:
    if echo:
        # The status line and a header quote them too (a reason phrase is not supposed to hold a line break).
        h.send_response(status, f"Unauthorized ({echo})")
        h.send_header("WWW-Authenticate", f'Bearer realm="llm", error="invalid_token", error_description="{echo}"')
    else:
        h.send_response(status)
    h.send_header("Content-Type", ctype)
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


@dataclass
class Seen:
    """The credential headers each request brought, in arrival order."""

    requests: list[dict[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, headers: Any) -> int:
        with self.lock:
            self.requests.append({n: headers.get(n, "") for n in CREDENTIAL_HEADERS})
            return len(self.requests)

    def values(self, name: str) -> set[str]:
        with self.lock:
            return {r[name] for r in self.requests}


SSE_REPLY = (
    b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
    b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\ndata: [DONE]\n\n'
)


@contextmanager
def echoing_server() -> Iterator[tuple[str, Seen]]:
    """An inference server: odd requests get 401 whose body, header and status line quote the credentials they
    carried (as real APIs do), even ones a tiny SSE stream."""
    seen = Seen()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 - http.server API
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if seen.add(self.headers) % 2:
                echo = quoted(self.headers)
                body = json.dumps({"error": {"message": f"Incorrect API key provided: {echo}", "code": 401}})
                send_reply(self, 401, "application/json", body.encode(), echo)
            else:
                send_reply(self, 200, "text/event-stream", SSE_REPLY)

        def log_message(self, *args: object) -> None:
            pass

    with threaded_http(Handler) as srv:
        yield f"http://127.0.0.1:{srv.server_address[1]}", seen


@contextmanager
def prometheus(refuse_all: bool = False) -> Iterator[tuple[str, Seen]]:
    """A Prometheus that takes the canary credentials (basic or bearer) and answers one series per query; `DENIED`
    over a range (or everything, ``refuse_all``) and wrong credentials get a 401 quoting the credentials."""
    seen = Seen()
    good = {f"Basic {BASIC}", f"Bearer {PROM_TOKEN}"}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server API
            seen.add(self.headers)
            params = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))
            ranged = "step" in params
            if refuse_all or self.headers.get("Authorization") not in good or (ranged and params["query"] == DENIED):
                echo = quoted(self.headers)
                doc = {"status": "error", "errorType": "unauthorized", "error": f"bad credentials: {echo}"}
                # Refused whole: a JSON error, or (refuse_all) a plain-text one, which the client cannot parse.
                body = f"401 Unauthorized: {echo}".encode() if refuse_all else json.dumps(doc).encode()
                return send_reply(self, 401, "text/plain" if refuse_all else "application/json", body, echo)
            if not ranged:
                return self._json({"status": "success", "data": {"resultType": "vector", "result": []}})
            start, step = float(params["start"]), float(params["step"])
            values = [[start + i * step, "1"] for i in range(3)]
            result = [{"metric": {}, "values": values}]
            self._json({"status": "success", "data": {"resultType": "matrix", "result": result}})

        def _json(self, doc: dict[str, Any]) -> None:
            send_reply(self, 200, "application/json", json.dumps(doc).encode())

        def log_message(self, *args: object) -> None:
            pass

    with threaded_http(Handler) as srv:
        yield f"http://127.0.0.1:{srv.server_address[1]}", seen


def canary_scenario(path: Path, server: str, prom: str, duration: str, auth: dict[str, Any], **over: Any) -> Path:
    """Every secret-bearing field of a scenario, each from its canary variable: two variants on ``server``, the
    Prometheus at ``prom`` with ``auth`` (PROM_BASIC or PROM_BEARER) and a query it refuses."""
    variants = {name: {"base_url": server, **fields} for name, fields in VARIANT_SECRETS.items()}
    prometheus = {"url": prom, "queries": {"up": "up", "denied": DENIED}, **auth}
    over.setdefault("load", {"users": 2, "duration": duration})
    return write_scenario(path, variants, metrics={"server_scrape_interval": 0, "prometheus": prometheus}, **over)
