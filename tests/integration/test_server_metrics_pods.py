"""The master's server-metrics scraper against simulator processes: three sims as the pods of one variant, scraped
pod by pod, sum their generated tokens exactly as the requests sent to each report them (the ground truth); two sims
behind a round-robin proxy (a Service URL with two replicas) are named as several replicas instead of mixed numbers;
one sim behind the same proxy is not; and a `loadgen run` whose variant was resolved from a selector scrapes the
pods the kubeconfig lists (the fake API server's, two simulators).

The loop runs under gevent (as on the Locust master), so each check runs in a fresh interpreter and reports JSON.
"""

from __future__ import annotations

import os
from pathlib import Path

from loadgen.sim.launch import start_sim_process
from tests.fresh_interpreter import run_fresh
from tests.integration.harness import read_report, run_loadgen, verdict_why, write_scenario
from tests.k8s.fake_api import fake_api, pod, service

COMMON = r"""
import json
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import gevent

from loadgen.live.server_metrics import ServerTimeline
from loadgen.locust_plugin.server_scrape import scrape_loop
from loadgen.sim.launch import start_sim_process


def chat(base, max_tokens):
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "count"}], "max_tokens": max_tokens})
    headers = {"Content-Type": "application/json"}
    req = urllib.request.Request(base + "/v1/chat/completions", data=body.encode(), headers=headers)
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())["usage"]["completion_tokens"]


def wait_rounds(tl, n, limit=20.0):
    goal, end = len(tl.times) + n, time.monotonic() + limit
    while len(tl.times) < goal and time.monotonic() < end:
        gevent.sleep(0.05)
    assert len(tl.times) >= goal, (len(tl.times), goal)
"""

PODS = (
    COMMON
    + r"""
class Pods:
    def __init__(self, urls):
        self.listed, self._urls = 0, urls

    def urls(self):
        self.listed += 1
        return list(self._urls)

    def describe(self):
        return "Service llm/vllm"


sims = [start_sim_process([f"p{i}=int8"], seed=i) for i in range(3)]
try:
    bases = [s.base_url(f"p{i}") for i, s in enumerate(sims)]
    pods = Pods([b + "/metrics" for b in bases])
    tl = ServerTimeline("http://vllm.llm.svc:8000/metrics", 0.2)
    loop = gevent.spawn(scrape_loop, tl, 0.2, pods)
    wait_rounds(tl, 1)  # every pod read once before any request: the baseline
    sent = {}
    for i, (base, n, max_tokens) in enumerate(zip(bases, (3, 2, 1), (5, 9, 4))):
        sent[pods._urls[i]] = sum(chat(base, max_tokens) for _ in range(n))
    wait_rounds(tl, 2)  # read again after every request finished
    loop.kill()
    report = tl.report()
finally:
    for s in sims:
        s.stop()
print(json.dumps({"report": report, "sent": sent, "listed": pods.listed}))
"""
)

PROXY = (
    COMMON
    + r"""
class RoundRobin(BaseHTTPRequestHandler):
    backends, turn = [], [0]

    def do_GET(self):
        base = self.backends[self.turn[0] % len(self.backends)]
        self.turn[0] += 1
        body = urllib.request.urlopen(base + self.path, timeout=5).read()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_):
        pass


out = {}
sims = [start_sim_process([f"r{i}=int8"], seed=i) for i in range(2)]
try:
    for replicas in (2, 1):
        RoundRobin.backends = [s.base_url(f"r{i}") for i, s in enumerate(sims)][:replicas]
        srv = ThreadingHTTPServer(("127.0.0.1", 0), RoundRobin)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{srv.server_address[1]}/metrics"
        for i, b in enumerate(RoundRobin.backends):
            chat(b, 3 + 5 * i)  # the replicas' counters differ
        tl = ServerTimeline(url, 0.1)
        loop = gevent.spawn(scrape_loop, tl, 0.1, None)
        loop.join(timeout=3)  # with several replicas the loop stops by itself once it sees them
        stopped = loop.dead
        loop.kill()
        out[replicas] = {"report": tl.report(), "stopped": stopped, "url": url}
        srv.shutdown()
        srv.server_close()
finally:
    for s in sims:
        s.stop()
print(json.dumps(out))
"""
)

FALLBACK = (
    COMMON
    + r"""
class Forbidden:
    def urls(self):
        raise PermissionError("HTTP 403 Forbidden: endpointslices is forbidden")

    def describe(self):
        return "Service llm/vllm"


class Unreachable(Forbidden):
    def urls(self):
        return ["http://127.0.0.1:9/metrics"]  # nothing listens on the discard port


out = {}
with start_sim_process(["f=int8"]) as sim:
    url = sim.base_url("f") + "/metrics"
    for name, pods in (("forbidden", Forbidden()), ("unreachable", Unreachable())):
        tl = ServerTimeline(url, 0.1)
        loop = gevent.spawn(scrape_loop, tl, 0.1, pods)
        wait_rounds(tl, 3)
        loop.kill()
        out[name] = tl.report()
print(json.dumps(out))
"""
)


def test_pods_that_cannot_be_listed_or_reached_fall_back_to_the_url_with_a_note() -> None:
    out = run_fresh(FALLBACK, timeout=90)
    for name, why in (("forbidden", "could not list the pods of Service llm/vllm (HTTP 403 Forbidden"),
                      ("unreachable", "none of the 1 pods of Service llm/vllm answered")):  # fmt: skip
        r = out[name]
        assert r["scope"] == "service" and r["note"].startswith(why), r["note"]
        assert r["samples"] >= 3 and r["pods"] == [] and r["series"]["waiting"][-1] == 0


def test_pods_scraped_one_by_one_sum_to_what_each_sim_generated() -> None:
    out = run_fresh(PODS, timeout=90)
    r, sent = out["report"], out["sent"]
    assert r["scope"] == "pods" and r["note"] is None and r["several_replicas"] is False, r["note"]
    assert out["listed"] >= 1 and r["failures"] == 0
    assert sorted(p["url"] for p in r["pods"]) == sorted(sent)
    # each pod's own counter, differenced on its own, is exactly what its requests reported
    for p in r["pods"]:
        assert p["summary"]["generation_tokens"] == sent[p["url"]], (p, sent)
        assert p["restarts"] == 0 and p["failures"] == 0
    assert r["summary"]["generation_tokens"] == sum(sent.values()) == 3 * 5 + 2 * 9 + 1 * 4
    # the per-second series is the same total, interval by interval (rates x seconds)
    times, rates = r["t_unix_s"], r["series"]["generation_tokens_per_s"]
    area = sum(x * (b - a) for a, b, x in zip(times[:-1], times[1:], rates[1:], strict=True) if x is not None)
    assert abs(area - sum(sent.values())) < 0.5, (area, rates)
    # three idle pods: the queue is summed, KV use per pod (mean and the fullest pod's)
    assert set(r["series"]) >= {"waiting", "running", "kv_usage", "kv_usage_max"}


def test_several_replicas_behind_one_url_are_named_not_mixed() -> None:
    out = run_fresh(PROXY, timeout=90)
    two, one = out["2"], out["1"]
    r = two["report"]
    assert two["stopped"] and r["several_replicas"] is True and r["scope"] == "service", r
    assert r["note"].startswith(f"several replicas answer behind {two['url']}")
    assert r["series"] == {} and r["summary"] == {} and r["samples"] >= 2
    r1 = one["report"]
    assert not one["stopped"] and r1["several_replicas"] is False and r1["note"] is None
    assert r1["series"]["generation_tokens_per_s"] and r1["summary"]["waiting_max"] == 0


def test_a_run_scrapes_the_pods_of_a_resolved_variant(tmp_path: Path) -> None:
    """`loadgen run` on a user's machine: a variant resolved from a selector (`resolved_from`) is scraped pod by pod,
    its pods found with the kubeconfig (here the fake API server, whose two pods are two simulators); the load goes
    to one of them only, and the report keeps them apart."""
    with start_sim_process(["p0=int8", "p1=int8"]) as sims, fake_api(tmp_path) as (c, kubeconfig):
        ports = [sims.ports["p0"], sims.ports["p1"]]
        c.put("services", service("vllm", "llm", {}, {"app": "vllm"}, [{"name": "http", "port": 8000}]))
        for i, port in enumerate(ports):
            ports_spec = [{"name": "http", "containerPort": port}]
            c.put("pods", pod(f"vllm-{i}", "llm", {"app": "vllm"}, ip="127.0.0.1", ports=ports_spec))
        base = sims.base_url("p0")
        resolved = {"selector": "app=vllm", "namespace": "llm", "service": "vllm", "port": 8000, "base_url": base}
        scenario = write_scenario(
            tmp_path / "s.yaml",
            {"v": {"base_url": base, "resolved_from": resolved}},
            load={"users": 2, "duration": "3s"},
            metrics={"server_scrape_interval": "0.5s"},
            slos=[],  # the scrape is under test, not a slow sitting against the default SLOs (99 % success of ~17)
        )
        proc = run_loadgen(scenario, "--workers", "1", env=os.environ | {"KUBECONFIG": str(kubeconfig)})
        listed = [call.path for call in c.calls if call.method == "GET"]
    assert proc.returncode == 0, proc.stderr[-3000:] + verdict_why(tmp_path / "report")
    sm = read_report(tmp_path / "report")["variants"][0]["server_metrics"]
    assert sm["scope"] == "pods" and sm["note"] is None and sm["samples"] >= 3, sm["note"]
    pods = {p["url"]: p for p in sm["pods"]}
    loaded, idle = (f"http://127.0.0.1:{port}/metrics" for port in ports)
    assert set(pods) == {loaded, idle}
    assert pods[loaded]["summary"]["generation_tokens"] > 0 and pods[idle]["summary"]["generation_tokens"] == 0
    assert sm["summary"]["generation_tokens"] == pods[loaded]["summary"]["generation_tokens"]
    assert "/api/v1/namespaces/llm/services/vllm" in listed and "/api/v1/namespaces/llm/pods" in listed
    md = (tmp_path / "report" / "report.md").read_text()
    assert f"| v | {loaded} |" in md and f"| v | {idle} |" in md
