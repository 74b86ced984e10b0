"""The chart's headless commands, run for real: the master Job's container (report server wrapping `locust --master`)
and a worker Job's container, with the arguments Helm rendered, against the simulator on loopback. Only what a pod
gives differently is replaced: paths (locustfile, the mounted scenario, /reports), the master's host and free ports;
the env is the container's, a secretKeyRef read from the Secret the chart rendered, as the kubelet would. The
locustfile is the chart's path made as the Dockerfile makes it (a link to the installed package's file)."""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from loadgen.sim.launch import start_sim_process
from tests.k8s_chart.conftest import helm_render, image_locustfile


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _container(objs: list[dict[str, Any]], name: str, part: str = "containers") -> dict[str, Any]:
    (job,) = [o for o in objs if o["kind"] in ("Job", "Deployment") and o["metadata"]["name"] == name]
    return dict(job["spec"]["template"]["spec"][part][0])


def _validate(objs: list[dict[str, Any]], scenario: Path) -> subprocess.CompletedProcess[str]:
    """The master's init container, run: `loadgen validate` (the image's console script, here this Python's) on
    the mounted scenario, with the container's env."""
    init = _container(objs, "rel-loadgen-master", "initContainers")
    assert init["name"] == "validate" and init["command"][0] == "loadgen"
    argv = [str(scenario) if a == "/etc/loadgen/scenario.yaml" else a for a in init["command"][1:]]
    env = _env(objs, init)
    return subprocess.run([sys.executable, "-m", "loadgen.cli", *argv], env=env, capture_output=True, text=True)


def _env(objs: list[dict[str, Any]], c: dict[str, Any]) -> dict[str, str]:
    """The process environment plus the container's env, each secretKeyRef read from the rendered Secret."""
    secrets = {o["metadata"]["name"]: o["data"] for o in objs if o["kind"] == "Secret"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOADGEN_")}
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        else:
            ref = e["valueFrom"]["secretKeyRef"]
            env[e["name"]] = base64.b64decode(secrets[ref["name"]][ref["key"]]).decode()
    return env


def _status(url: str, headers: dict[str, str] | None = None) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return e.code


def test_headless_master_and_worker_run_serve_and_exit_with_the_verdict(tmp_path: Path) -> None:
    with start_sim_process(["baseline"], seed=0) as sim:
        values = {
            "mode": "headless",
            "workers": {"replicas": 1},
            "headless": {"duration": "4s", "serveReports": "60s"},
            "scenario": {
                "variants": [{"name": "baseline", "base_url": sim.base_url("baseline"), "model": "m"}],
                "load": {"users": 4, "spawn_rate": 4},
                # Unmeetable: the run must end with exit 1, and the Job with it.
                "slos": [{"metric": "ttft", "stat": "p99", "max_ms": 0.001}],
            },
        }
        code, doc, err = helm_render(values, tmp_path)
        assert code == 0, err
        objs = doc["created"]
        (cm,) = [o for o in objs if o["kind"] == "ConfigMap"]
        scenario = tmp_path / "scenario.yaml"
        scenario.write_text(cm["data"]["scenario.yaml"], encoding="utf-8")
        reports = tmp_path / "reports"
        image_path, link = image_locustfile(tmp_path)
        zmq, web = _free_port(), _free_port()
        swap = {
            image_path: str(link),
            "/etc/loadgen/scenario.yaml": str(scenario),
            "/reports": str(reports),
            "5557": str(zmq),
            "8089": str(web),
            "rel-loadgen-master": "127.0.0.1",
        }

        def argv(c: dict[str, Any]) -> list[str]:
            return [swap.get(a, a) for a in c["command"] + c["args"]]

        checked = _validate(objs, scenario)  # before any load: the init container
        assert checked.returncode == 0 and ": OK" in checked.stdout, checked.stderr
        master_c, worker_c = _container(objs, "rel-loadgen-master"), _container(objs, "rel-loadgen-worker")
        logs = tmp_path / "master.log"
        with logs.open("wb") as log:
            master_env = _env(objs, master_c)
            master = subprocess.Popen(argv(master_c), stdout=log, stderr=subprocess.STDOUT, env=master_env)
            worker = subprocess.Popen(argv(worker_c), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                listing = None
                deadline = time.monotonic() + 90
                while time.monotonic() < deadline and master.poll() is None:
                    try:
                        with urllib.request.urlopen(f"http://127.0.0.1:{web}/", timeout=2) as r:
                            listing = json.loads(r.read())
                        break
                    except OSError:
                        time.sleep(0.25)
                assert listing is not None, logs.read_text(errors="replace")
                assert listing["exit_code"] == 1
                assert {"report.json", "report.md", "report.html"} <= set(listing["files"])
                with urllib.request.urlopen(f"http://127.0.0.1:{web}/report.json", timeout=5) as r:
                    report = json.loads(r.read())
                assert report["exit_code"] == 1
                # /done takes the token of the Secret the chart made (403 without it, from loopback too).
                assert _status(f"http://127.0.0.1:{web}/done") == 403
                token = master_env["LOADGEN_DONE_TOKEN"]
                assert len(token) == 32
                assert _status(f"http://127.0.0.1:{web}/done", {"X-Loadgen-Done-Token": token}) == 200
                assert master.wait(30) == 1
                assert worker.wait(30) == 0
            finally:
                for p in (master, worker):
                    if p.poll() is None:
                        p.kill()
                        p.wait()


def test_ui_master_serves_the_web_ui_and_a_worker_joins(tmp_path: Path) -> None:
    """ui mode's containers: the master answers on its web port (what the helm test GETs) and counts the worker."""
    values = {"scenario": {"variants": [{"name": "a", "base_url": "http://127.0.0.1:9", "model": "m"}]}}
    code, doc, err = helm_render(values, tmp_path)
    assert code == 0, err
    objs = doc["created"]
    (cm,) = [o for o in objs if o["kind"] == "ConfigMap"]
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(cm["data"]["scenario.yaml"], encoding="utf-8")
    zmq, web = _free_port(), _free_port()
    image_path, link = image_locustfile(tmp_path)
    swap = {
        image_path: str(link),
        "/etc/loadgen/scenario.yaml": str(scenario),
        "/reports": str(tmp_path / "reports"),
        "5557": str(zmq),
        "8089": str(web),
        "rel-loadgen-master": "127.0.0.1",
    }
    deps = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Deployment"}
    procs = []
    try:
        for name in ("rel-loadgen-master", "rel-loadgen-worker"):
            c = deps[name]["spec"]["template"]["spec"]["containers"][0]
            argv = [swap.get(a, a) for a in c["command"] + c["args"]]
            env = _env(objs, c)
            procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env))
            if name == "rel-loadgen-master":
                assert "--web-login" in argv
                login = f"{env['LOADGEN_WEB_USERNAME']}:{env['LOADGEN_WEB_PASSWORD']}"
        auth = {"Authorization": "Basic " + base64.b64encode(login.encode()).decode()}
        stats: dict[str, Any] = {}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not stats.get("workers"):
            try:
                with urllib.request.urlopen(
                    urllib.request.Request(f"http://127.0.0.1:{web}/", headers=auth), timeout=2
                ) as r:
                    assert r.status == 200 and b"<html" in r.read(4096).lower()
                req = urllib.request.Request(f"http://127.0.0.1:{web}/stats/requests", headers=auth)
                with urllib.request.urlopen(req, timeout=2) as r:
                    stats = json.loads(r.read())
            except OSError:
                pass
            time.sleep(0.25)
        assert len(stats.get("workers", [])) == 1
        # Without the login the UI sends the browser to its login page (urllib follows the redirect there).
        with urllib.request.urlopen(f"http://127.0.0.1:{web}/stats/requests", timeout=5) as r:
            assert urllib.parse.urlsplit(r.url).path == "/login"
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def test_the_masters_init_container_refuses_a_scenario_before_any_load(tmp_path: Path) -> None:
    """What only the pod can check (a `tokenizer: server` nobody answers, here): `loadgen validate` exits 2 naming
    the field, so the master pod fails before Locust starts (its message is the pod's termination message)."""
    variants = [{"name": "a", "base_url": "http://127.0.0.1:9", "model": "m"}]
    code, doc, err = helm_render({"scenario": {"variants": variants, "tokenizer": "server"}}, tmp_path)
    assert code == 0, err
    (cm,) = [o for o in doc["created"] if o["kind"] == "ConfigMap"]
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(cm["data"]["scenario.yaml"], encoding="utf-8")
    refused = _validate(doc["created"], scenario)
    assert refused.returncode == 2 and "tokenizer" in refused.stderr and "127.0.0.1:9" in refused.stderr, refused
    init = _container(doc["created"], "rel-loadgen-master", "initContainers")
    assert init["terminationMessagePolicy"] == "FallbackToLogsOnError"
