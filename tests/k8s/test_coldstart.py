"""`loadgen k8s coldstart` against the fake API server: probe first, scale to zero, wait for no pod, scale back, time
Ready and the first token through the service proxy. The original replicas come back on every way it can end:
success, a refused probe (401 / 403 / 404 / 500, an empty stream), a timeout, Ctrl-C while waiting, an API error
while scaling up; and a probe refused before the scale-down scales nothing.
(tests/k8s/test_coldstart_direct.py: the probe to --url with a key, against a loopback server.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loadgen.cli import main
from loadgen.k8s.api import K8sError, connect
from loadgen.k8s.coldstart import ColdStartTimeout, cold_start
from tests.k8s.fake_api import FakeCluster, fake_api, pod, service

LABELS = {"app": "vllm", "loadgen.io/variant": "base"}
ROLE = b'data: {"choices": [{"delta": {"role": "assistant"}}]}\n\n'
TOKEN = b'data: {"choices": [{"delta": {"content": "Hi"}}]}\n\n'


class Deployment:
    """A deployment whose pods take ``lag`` pod lists to go away or to turn Ready. Its server answers the probe
    sent before the scale-down with ``before``, and the probes after the scale-up with ``after`` in turn (the last
    one repeated): "token", "empty" (a stream with no token), or an HTTP status."""

    def __init__(
        self,
        c: FakeCluster,
        replicas: int = 2,
        lag: int = 2,
        before: str | int = "token",
        after: list[str | int] | None = None,
    ) -> None:
        self.c, self.lag, self.before, self.after = c, lag, before, after or [503, "token"]
        self.pending: list[tuple[int, str]] = []  # (lists left, what happens)
        self.probes: list[dict[str, Any]] = []
        self.events: list[str] = []
        self.scaled_down = False
        c.put(
            "deployments",
            {
                "metadata": {"name": "vllm", "namespace": "llm", "labels": {}},
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": {"app": "vllm"}},
                    "template": {
                        "metadata": {"labels": LABELS},
                        "spec": {"containers": [{"name": "vllm", "image": "vllm"}]},
                    },
                },
            },
        )
        c.put(
            "services",
            service("vllm", "llm", {"loadgen.io/variant": "base"}, {"app": "vllm"}, [{"name": "http", "port": 8000}]),
        )
        for i in range(replicas):
            c.put("pods", pod(f"vllm-{i}", "llm", LABELS))
        c.on_scale, c.on_list, c.proxy = self.scaled, self.listed, self.proxy

    def scaled(self, c: FakeCluster, ns: str, name: str, replicas: int) -> None:
        self.events.append(f"scale {replicas}")
        self.scaled_down = self.scaled_down or replicas == 0
        self.pending.append((self.lag, f"set {replicas}"))

    def listed(self, c: FakeCluster, coll: str) -> None:
        if coll != "pods":
            return
        still = []
        for left, what in self.pending:
            if left > 0:
                still.append((left - 1, what))
                continue
            n = int(what.split()[1])
            for key in [k for k in c.objects if k[0] == "pods"]:
                del c.objects[key]
            for i in range(n):
                # Scheduled at once, Ready only after another `lag` lists.
                c.put("pods", pod(f"vllm-new-{i}", "llm", LABELS, ready=False))
                still.append((self.lag, f"ready vllm-new-{i}"))
        for left, what in list(still):
            if what.startswith("ready") and left == 0:
                still.remove((left, what))
                c.objects[("pods", "llm", what.split()[1])]["status"]["conditions"][0]["status"] = "True"
                self.events.append("ready")
        self.pending = still

    def proxy(self, method: str, ns: str, svc: str, path: str, body: Any) -> tuple[int, str, list[bytes]]:
        assert (method, svc, path) == ("POST", "vllm:8000", "v1/chat/completions")
        self.probes.append(body)
        self.events.append("probe")
        answer = self.before
        if self.scaled_down:
            answer = self.after.pop(0) if len(self.after) > 1 else self.after[0]
        if answer == "token":
            # A role-only chunk first (no token yet), the token's line split across two writes.
            return 200, "text/event-stream", [ROLE, TOKEN[:9], TOKEN[9:], b"data: [DONE]\n\n"]
        if answer == "empty":
            return 200, "text/event-stream", [ROLE, b"data: [DONE]\n\n"]
        assert isinstance(answer, int)
        error = {"error": {"message": f"the server says {answer}", "code": answer}}
        return answer, "application/json", [json.dumps(error).encode()]


def _replicas(c: FakeCluster) -> int:
    return int(c.objects[("deployments", "llm", "vllm")]["spec"]["replicas"])


def _patches(c: FakeCluster) -> list[int]:
    return [call.body["spec"]["replicas"] for call in c.calls_to("PATCH", "/scale")]


def _argv(kubeconfig: Path, *extra: str, timeout: str = "20s") -> list[str]:
    return [
        "k8s",
        "coldstart",
        "vllm",
        "--variant",
        "base",
        "--model",
        "m",
        "--kubeconfig",
        str(kubeconfig),
        "--interval",
        "0.01",
        "--timeout",
        timeout,
        *extra,
    ]


def test_cold_start_times_the_split_and_restores(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with fake_api(tmp_path) as (c, kubeconfig):
        dep = Deployment(c)
        assert main(_argv(kubeconfig)) == 0
        patches, replicas = _patches(c), _replicas(c)
    out = capsys.readouterr().out
    assert patches == [0, 2] and replicas == 2
    # the order the numbers rest on: a probe while up, down, up, a pod Ready, then the probes (the first refused
    # with a 503, which means "not yet") until a token
    assert dep.events == ["probe", "scale 0", "scale 2", "ready", "ready", "probe", "probe"], str(dep.events)
    assert dep.probes[0]["max_tokens"] == 1 and dep.probes[0]["stream"] is True and dep.probes[0]["model"] == "m"
    assert "vllm: cold start" in out and "scale request → pod Ready" in out and "2 replica(s) restored" in out


@pytest.mark.parametrize(
    ("answer", "named"),
    [
        (401, "HTTP 401"),
        (403, "HTTP 403"),
        (404, "HTTP 404"),
        (500, "HTTP 500"),
        (400, "HTTP 400"),
        ("empty", "the stream ended without a token"),
    ],
)
def test_an_answer_waiting_cannot_change_stops_at_once_and_restores(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], answer: str | int, named: str
) -> None:
    with fake_api(tmp_path) as (c, kubeconfig):
        dep = Deployment(c, after=[503, answer, "token"])
        assert main(_argv(kubeconfig)) == 2
        patches, replicas = _patches(c), _replicas(c)
    err = capsys.readouterr().err
    assert patches == [0, 2] and replicas == 2
    # one probe before, then the 503 (retried) and the refusal: never the token after it
    assert dep.events.count("probe") == 3, dep.events
    assert named in err and "vllm scaled back to 2 replica(s)" in err, err
    if isinstance(answer, int):
        assert f"the server says {answer}" in err  # the server's own words


def test_a_refusal_before_the_scale_down_scales_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with fake_api(tmp_path) as (c, kubeconfig):
        dep = Deployment(c, before=404)
        assert main(_argv(kubeconfig)) == 2
        patches, replicas = _patches(c), _replicas(c)
    err = capsys.readouterr().err
    assert patches == [] and replicas == 2 and dep.events == ["probe"]
    assert "HTTP 404" in err and "nothing was scaled" in err and "--model" in err


def test_a_server_not_answering_before_the_scale_down_scales_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with fake_api(tmp_path) as (c, kubeconfig):
        Deployment(c, before=503)
        assert main(_argv(kubeconfig)) == 2
        patches = _patches(c)
    assert patches == [] and "HTTP 503" in capsys.readouterr().err


def test_the_api_servers_own_refusal_is_named_as_such(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with fake_api(tmp_path) as (c, kubeconfig):
        Deployment(c)

        def forbidden(*_: Any) -> tuple[int, str, list[bytes]]:
            why = 'services "vllm:8000" is forbidden: cannot create resource "services/proxy"'
            status = {"kind": "Status", "apiVersion": "v1", "code": 403, "reason": "Forbidden", "message": why}
            return 403, "application/json", [json.dumps(status).encode()]

        c.proxy = forbidden
        assert main(_argv(kubeconfig)) == 2
        patches = _patches(c)
    err = capsys.readouterr().err
    assert patches == [] and "from the Kubernetes API server" in err and "services/proxy" in err


def test_an_endpoint_that_never_answers_times_out_and_restores(tmp_path: Path) -> None:
    with fake_api(tmp_path) as (c, kubeconfig):
        Deployment(c, after=[503])
        assert main(_argv(kubeconfig, timeout="1s")) == 1  # a deployment that never came up: a dead target
        patches, replicas = _patches(c), _replicas(c)
    assert patches == [0, 2] and replicas == 2


def _ctrl_c_on_sleep(monkeypatch: pytest.MonkeyPatch, at: int) -> dict[str, int]:
    import loadgen.k8s.coldstart as coldstart

    sleeps = {"n": 0}

    def sleep_then_ctrl_c(seconds: float) -> None:
        # SIGINT lands where the command spends its time: between polls.
        sleeps["n"] += 1
        if sleeps["n"] == at:
            raise KeyboardInterrupt

    monkeypatch.setattr(coldstart.time, "sleep", sleep_then_ctrl_c)
    return sleeps


def test_ctrl_c_while_scaled_down_restores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with fake_api(tmp_path) as (c, kubeconfig):
        Deployment(c, replicas=3, lag=10**6)  # the pods take forever to go: the user gives up
        sleeps = _ctrl_c_on_sleep(monkeypatch, 3)
        cluster = connect(kubeconfig=str(kubeconfig))
        with pytest.raises(KeyboardInterrupt):
            cold_start(cluster, "llm", "vllm", "vllm", 8000, "m", interval=0.01)
        cluster.close()
        patches, replicas = _patches(c), _replicas(c)
    assert sleeps["n"] == 3
    assert patches == [0, 3] and replicas == 3


@pytest.mark.parametrize("waiting_for", ["ready", "token"])
def test_ctrl_c_while_waiting_for_the_pods_or_the_token_restores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, waiting_for: str
) -> None:
    with fake_api(tmp_path) as (c, kubeconfig):
        dep = Deployment(c, replicas=2, lag=2, after=[503])
        # sleeps 1-2: the pods going away; 3-6: none Ready yet; from 7 on: probes answered 503
        at = 3 if waiting_for == "ready" else 7
        sleeps = _ctrl_c_on_sleep(monkeypatch, at)
        assert main(_argv(kubeconfig)) == 130
        patches, replicas = _patches(c), _replicas(c)
    assert sleeps["n"] == at
    assert patches[:2] == [0, 2] and replicas == 2
    assert ("probe" in dep.events[2:]) == (waiting_for == "token"), dep.events


def test_an_error_while_scaling_up_restores(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with fake_api(tmp_path) as (c, kubeconfig):
        Deployment(c)
        c.scale_failures[2] = 1  # the scale-up's PATCH fails once with a 500
        assert main(_argv(kubeconfig)) == 4  # the API server refused a call: the command failed
        patches, replicas = _patches(c), _replicas(c)
    assert patches == [0, 2, 2] and replicas == 2
    assert "Kubernetes API: 500" in capsys.readouterr().err


def test_a_restore_that_keeps_failing_says_what_to_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import loadgen.k8s.coldstart as coldstart

    monkeypatch.setattr(coldstart.time, "sleep", lambda _s: None)
    with fake_api(tmp_path) as (c, kubeconfig):
        Deployment(c, replicas=3, lag=10**6)
        c.scale_failures[3] = 10**6  # neither the scale-up nor any restore gets through
        cluster = connect(kubeconfig=str(kubeconfig))
        with pytest.raises(K8sError, match=r"kubectl -n llm scale deployment/vllm --replicas=3") as info:
            cold_start(cluster, "llm", "vllm", "vllm", 8000, "m", interval=0.01, timeout=0.2)
        cluster.close()
        patches = _patches(c)
    assert isinstance(info.value.__cause__, Exception)
    assert patches[0] == 0 and patches[1:] == [3] * 3  # three restore attempts after the timed-out wait


def test_pods_that_never_leave_time_out_and_restore(tmp_path: Path) -> None:
    with fake_api(tmp_path) as (c, kubeconfig):
        Deployment(c, replicas=3, lag=10**6)
        cluster = connect(kubeconfig=str(kubeconfig))
        with pytest.raises(ColdStartTimeout, match="still there"):
            cold_start(cluster, "llm", "vllm", "vllm", 8000, "m", interval=0.01, timeout=0.2)
        cluster.close()
        replicas = _replicas(c)
    assert replicas == 3


def test_a_header_key_goes_through_the_proxy_and_a_bearer_key_is_refused_before_scaling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AZ_KEY", "SECRET-az-0123456789")
    monkeypatch.setenv("BEARER_KEY", "SECRET-bearer-0123456789")
    with fake_api(tmp_path) as (c, kubeconfig):
        Deployment(c)
        assert main(_argv(kubeconfig, "--header-env", "api-key=AZ_KEY")) == 0
        sent = [h.get("api-key") for h in c.proxy_headers]
        assert main(_argv(kubeconfig, "--api-key-env", "BEARER_KEY")) == 2
        assert main(_argv(kubeconfig, "--api-key-env", "UNSET_KEY_FOR_TEST")) == 2
        assert main(_argv(kubeconfig, "--header-env", "api-key")) == 2
        patches = _patches(c)
    err = capsys.readouterr().err
    assert sent == ["SECRET-az-0123456789"] * len(sent) and len(sent) >= 2
    assert patches == [0, 2]  # only the first run scaled anything
    assert "consumes the Authorization header" in err and "--url" in err
    assert "UNSET_KEY_FOR_TEST not set" in err and "HEADER=NAME" in err
    assert "SECRET-" not in err
