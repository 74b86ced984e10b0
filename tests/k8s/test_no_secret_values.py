"""The canary for Kubernetes: a scenario with an API key, a header from the environment and Prometheus basic auth,
rendered by the chart (real Helm) and built and created by `loadgen k8s run` (fake API server) while canary values sit
in the environment of the process that renders them. Every byte of the manifests holds the variables' names and
Secret references, never a value: no value is ever given to Helm (the chart has no value for a secret at all).
And `loadgen k8s coldstart` with every credential it can send (a bearer key, key headers), to a server and through
the API server's service proxy, each answering with the credentials quoted (a body, a status line, a Status)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from loadgen.cli import main
from loadgen.k8s.run_objects import RunSpec, build_objects, rendered
from tests.integration.canaries import APIM, ENV, KEY, SSE_REPLY, XKEY, leaks, quoted, send_reply
from tests.k8s.fake_api import FakeCluster, fake_api
from tests.k8s.test_coldstart import Deployment, _argv, _patches, _replicas
from tests.k8s.test_run import Run

pytest.importorskip("helm_sdkpy", reason="pip install --ignore-requires-python helm-sdkpy (.ci/run does)")

CANARY = {
    "VLLM_KEY": "CANARY-api-key-7f3a",
    "APIM_KEY": "CANARY-header-91bd",
    "PROM_USER": "CANARY-prom-user-55c0",
    "PROM_PASSWORD": "CANARY-prom-pass-e2a8",
}
SCENARIO = {
    "name": "canary",
    "variants": [
        {"name": "a", "base_url": "http://vllm-a:8000", "model": "m", "api_key_env": "VLLM_KEY"},
        {"name": "b", "base_url": "http://apim:8080", "model": "m", "headers_from_env": {"api-key": "APIM_KEY"}},
    ],
    "metrics": {
        "prometheus": {
            "url": "http://prometheus.monitoring:9090",
            "queries": {"gpu": "avg(DCGM_FI_DEV_GPU_UTIL)"},
            "basic_auth_env": {"username": "PROM_USER", "password": "PROM_PASSWORD"},
        }
    },
}
ROOT = Path(__file__).resolve().parents[2]
REFS = {name: {"name": "llm-secrets", "key": name.lower()} for name in CANARY}


def _no_canary(text: str) -> None:
    assert not [c for c in CANARY.values() if c in text]
    assert "CANARY" not in text


def _credential_env(objs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for o in objs:
        if o["kind"] not in ("Deployment", "Job"):
            continue
        for c in o["spec"]["template"]["spec"]["containers"]:
            out[o["metadata"]["name"]] = [e for e in c.get("env", []) if e["name"] in CANARY]
    return out


def _assert_refs_only(objs: list[dict[str, Any]], master: str, worker: str) -> None:
    env = _credential_env(objs)
    for entries in env.values():
        for e in entries:
            assert set(e) == {"name", "valueFrom"}, e  # a reference, never `value`
            assert e["valueFrom"] == {"secretKeyRef": REFS[e["name"]]}
    assert sorted(e["name"] for e in env[worker]) == ["APIM_KEY", "VLLM_KEY"]
    assert sorted(e["name"] for e in env[master]) == ["PROM_PASSWORD", "PROM_USER"]


def test_the_chart_and_the_builder_hold_names_and_refs_never_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.k8s_chart.conftest import helm_render

    for name, value in CANARY.items():
        monkeypatch.setenv(name, value)  # in the environment of whoever renders: must not leak into a manifest
    chart = yaml.safe_load((ROOT / "charts/loadgen/values.yaml").read_text(encoding="utf-8"))
    assert chart["apiKeySecrets"] == {}  # names → refs; no value anywhere
    _no_canary(json.dumps(rendered()))
    for mode in ("ui", "headless"):
        values = {"mode": mode, "scenario": SCENARIO, "apiKeySecrets": REFS}
        _no_canary(json.dumps(values))
        code, doc, err = helm_render(values, tmp_path, release="c")
        assert code == 0, err
        _no_canary(json.dumps(doc))
        _assert_refs_only(doc["created"], "c-loadgen-master", "c-loadgen-worker")
        (cm,) = [o for o in doc["created"] if o["kind"] == "ConfigMap"]
        for name in CANARY:
            assert name in cm["data"]["scenario.yaml"]  # the variable's name is what the scenario holds
    ours = build_objects(RunSpec("c", SCENARIO, secrets=REFS), "ns")
    _no_canary(json.dumps(ours))
    _assert_refs_only(ours, "c-master", "c-worker")


def test_k8s_run_sends_no_value_to_the_api_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in CANARY.items():
        monkeypatch.setenv(name, value)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO), encoding="utf-8")
    flags = [f"--secret={name}=llm-secrets:{name.lower()}" for name in CANARY]
    with fake_api(tmp_path) as (c, kubeconfig):
        Run(c, exit_code=0)
        argv = ["k8s", "run", str(scenario), "--kubeconfig", str(kubeconfig), "--name", "c", "--interval", "0.01"]
        code = main([*argv, "--report-dir", str(tmp_path / "out"), *flags])
        posted = [call.body for call in c.calls if call.method == "POST"]
    assert code == 0
    _no_canary(json.dumps(posted))
    _assert_refs_only(posted, "c-master", "c-worker")
    # Its NetworkPolicy: the web port (read-only reports; /done takes the run's token) from any address, since the
    # API server's service proxy is how the reports come out; ZMQ from the run's workers only.
    (policy,) = [o for o in posted if o["kind"] == "NetworkPolicy"]
    rules = {r["ports"][0]["port"]: r["from"] for r in policy["spec"]["ingress"]}
    assert {"ipBlock": {"cidr": "0.0.0.0/0"}} in rules["web"] and {"ipBlock": {"cidr": "::/0"}} in rules["web"]
    assert rules["zmq"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "loadgen",
                                                             "app.kubernetes.io/instance": "c",
                                                             "app.kubernetes.io/component": "worker"}}}]  # fmt: skip


def test_k8s_run_wants_a_secret_for_every_credential_variable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO), encoding="utf-8")
    code = main(["k8s", "run", str(scenario), "--secret", "VLLM_KEY=llm-secrets:vllm_key"])
    err = capsys.readouterr().err
    assert code == 2
    assert "APIM_KEY (variants[1].headers_from_env.api-key)" in err
    assert "PROM_PASSWORD (metrics.prometheus.basic_auth_env.password)" in err
    assert "PROM_USER" in err and "VLLM_KEY" not in err


# --- `loadgen k8s coldstart` ------------------------------------------------------------------------------------------

KEY_HEADERS = ["--header-env", "api-key=LG_CANARY_APIM", "--header-env", "x-api-key=LG_CANARY_XKEY"]


@contextmanager
def _quoting_server(dep: Deployment, after: int) -> Iterator[str]:
    """The variant's server: a token before the scale-down; after it, ``after`` (503: retried, a refusal otherwise)
    with the credentials it got quoted in the body and the status line."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 - http.server API
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if not dep.scaled_down:
                return send_reply(self, 200, "text/event-stream", SSE_REPLY)
            echo = quoted(self.headers)
            body = json.dumps({"error": {"message": f"key rejected: {echo}"}}).encode()
            send_reply(self, after, "application/json", body, echo)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize("after", [503, 401])
def test_coldstart_to_a_url_never_repeats_what_the_server_quotes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], after: int
) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    with fake_api(tmp_path) as (c, kubeconfig):
        dep = Deployment(c, lag=0)
        with _quoting_server(dep, after) as url:
            argv = _argv(kubeconfig, "--url", url, "--api-key-env", "LG_CANARY_KEY", *KEY_HEADERS, timeout="1s")
            code = main(argv)
        patches, replicas = _patches(c), _replicas(c)
    out = capsys.readouterr()
    assert code != 0 and patches == [0, 2] and replicas == 2
    assert (f"HTTP {after}" in out.err) and ("no first token" in out.err) == (after == 503), out.err
    assert "quotes the credential" in out.err
    assert leaks(out.out + out.err) == []


def test_coldstart_through_the_proxy_never_repeats_what_the_api_server_quotes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The key headers go through the service proxy; the API server refuses the proxied request with a Status whose
    # message quotes them.
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    with fake_api(tmp_path) as (c, kubeconfig):
        Deployment(c)

        def refuse(
            method: str, ns: str, svc: str, path: str, body: Any, c: FakeCluster = c
        ) -> tuple[int, str, list[bytes]]:
            sent = c.proxy_headers[-1]
            message = f"forbidden: api-key {sent.get('api-key')} x-api-key {sent.get('x-api-key')}"
            status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": 403}
            return 403, "application/json", [json.dumps(status).encode()]

        c.proxy = refuse
        code = main(_argv(kubeconfig, *KEY_HEADERS))
        sent = c.proxy_headers
    out = capsys.readouterr()
    assert code == 2 and "HTTP 403 from the Kubernetes API server" in out.err and "nothing was scaled" in out.err
    assert [(h.get("api-key"), h.get("x-api-key")) for h in sent] == [(APIM, XKEY)]
    assert KEY not in json.dumps(sent)  # no bearer key through the proxy
    assert leaks(out.out + out.err) == []
