"""`loadgen k8s coldstart` against the fake API server: scale to zero, wait for no pod, scale back, time Ready and
the first token through the service proxy; the original replicas come back on success, timeout and Ctrl-C."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loadgen.cli import main
from loadgen.k8s.api import connect
from loadgen.k8s.coldstart import ColdStartTimeout, cold_start
from tests.k8s.fake_api import FakeCluster, fake_api, pod, service

LABELS = {"app": "vllm", "loadgen.io/variant": "base"}


class Deployment:
    """A deployment whose pods take ``lag`` pod lists to go away or to turn Ready, and whose server answers a chat
    request after ``answer_after`` probes (None: never)."""

    def __init__(self, c: FakeCluster, replicas: int = 2, lag: int = 2, answer_after: int | None = 1) -> None:
        self.c, self.lag, self.answer_after = c, lag, answer_after
        self.pending: list[tuple[int, str]] = []  # (lists left, what happens)
        self.probes: list[dict[str, Any]] = []
        self.events: list[str] = []
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
        if self.answer_after is None or len(self.probes) <= self.answer_after:
            return 503, "text/plain", [b"upstream connect error"]
        # A role-only chunk first (no token yet), the token's line split across two writes.
        role = b'data: {"choices": [{"delta": {"role": "assistant"}}]}\n\n'
        token = b'data: {"choices": [{"delta": {"content": "Hi"}}]}\n\n'
        return 200, "text/event-stream", [role, token[:9], token[9:], b"data: [DONE]\n\n"]


def _replicas(c: FakeCluster) -> int:
    return int(c.objects[("deployments", "llm", "vllm")]["spec"]["replicas"])


def test_cold_start_times_the_split_and_restores(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with fake_api(tmp_path) as (c, kubeconfig):
        dep = Deployment(c)
        argv = [
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
            "20s",
        ]
        assert main(argv) == 0
        patches = [call.body["spec"]["replicas"] for call in c.calls_to("PATCH", "/scale")]
        replicas = _replicas(c)
    out = capsys.readouterr().out
    assert patches == [0, 2] and replicas == 2
    # the order the numbers rest on: down, up, a pod Ready, then the probes (the first refused) until a token
    assert dep.events == ["scale 0", "scale 2", "ready", "ready", "probe", "probe"], str(dep.events)
    assert dep.probes[0]["max_tokens"] == 1 and dep.probes[0]["stream"] is True and dep.probes[0]["model"] == "m"
    assert "vllm: cold start" in out and "scale request → pod Ready" in out and "2 replica(s) restored" in out


def test_an_endpoint_that_never_answers_times_out_and_restores(tmp_path: Path) -> None:
    with fake_api(tmp_path) as (c, kubeconfig):
        Deployment(c, answer_after=None)
        argv = [
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
            "1s",
        ]
        assert main(argv) == 3
        patches = [call.body["spec"]["replicas"] for call in c.calls_to("PATCH", "/scale")]
        replicas = _replicas(c)
    assert patches == [0, 2] and replicas == 2


def test_ctrl_c_while_scaled_down_restores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import loadgen.k8s.coldstart as coldstart

    sleeps = {"n": 0}

    def sleep_then_ctrl_c(seconds: float) -> None:
        # SIGINT lands where the command spends its time: between polls, while the pods are going away.
        sleeps["n"] += 1
        if sleeps["n"] == 3:
            raise KeyboardInterrupt

    with fake_api(tmp_path) as (c, kubeconfig):
        Deployment(c, replicas=3, lag=10**6)  # the pods take forever to go: the user gives up
        monkeypatch.setattr(coldstart.time, "sleep", sleep_then_ctrl_c)
        cluster = connect(kubeconfig=str(kubeconfig))
        with pytest.raises(KeyboardInterrupt):
            cold_start(cluster, "llm", "vllm", "vllm", 8000, "m", interval=0.01)
        cluster.close()
        patches = [call.body["spec"]["replicas"] for call in c.calls_to("PATCH", "/scale")]
        replicas = _replicas(c)
    assert sleeps["n"] == 3
    assert patches == [0, 3] and replicas == 3


def test_pods_that_never_leave_time_out_and_restore(tmp_path: Path) -> None:
    with fake_api(tmp_path) as (c, kubeconfig):
        Deployment(c, replicas=3, lag=10**6)
        cluster = connect(kubeconfig=str(kubeconfig))
        with pytest.raises(ColdStartTimeout, match="still there"):
            cold_start(cluster, "llm", "vllm", "vllm", 8000, "m", interval=0.01, timeout=0.2)
        cluster.close()
        replicas = _replicas(c)
    assert replicas == 3
