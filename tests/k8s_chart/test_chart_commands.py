"""The chart's headless commands, run for real: the master Job's container (report server wrapping `locust --master`)
and a worker Job's container, with the arguments Helm rendered, against the simulator on loopback. Only what a pod
gives differently is replaced: paths (locustfile, the mounted scenario, /reports), the master's host and free ports."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from loadgen.locust_plugin.launcher import LOCUSTFILE
from loadgen.sim.launch import start_sim_process
from tests.k8s_chart.conftest import helm_render


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _container(objs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (job,) = [o for o in objs if o["kind"] == "Job" and o["metadata"]["name"] == name]
    return dict(job["spec"]["template"]["spec"]["containers"][0])


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
        zmq, web = _free_port(), _free_port()
        swap = {
            "/opt/venv/lib/python3.11/site-packages/loadgen/locust_plugin/locustfile.py": str(LOCUSTFILE),
            "/etc/loadgen/scenario.yaml": str(scenario),
            "/reports": str(reports),
            "5557": str(zmq),
            "8089": str(web),
            "rel-loadgen-master": "127.0.0.1",
        }

        def argv(c: dict[str, Any]) -> list[str]:
            return [swap.get(a, a) for a in c["command"] + c["args"]]

        master_c, worker_c = _container(objs, "rel-loadgen-master"), _container(objs, "rel-loadgen-worker")
        logs = tmp_path / "master.log"
        with logs.open("wb") as log:
            master = subprocess.Popen(argv(master_c), stdout=log, stderr=subprocess.STDOUT)
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
                urllib.request.urlopen(f"http://127.0.0.1:{web}/done", timeout=5).close()
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
    swap = {
        "/opt/venv/lib/python3.11/site-packages/loadgen/locust_plugin/locustfile.py": str(LOCUSTFILE),
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
            procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        stats: dict[str, Any] = {}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not stats.get("workers"):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{web}/", timeout=2) as r:
                    assert r.status == 200 and b"<html" in r.read(4096).lower()
                with urllib.request.urlopen(f"http://127.0.0.1:{web}/stats/requests", timeout=2) as r:
                    stats = json.loads(r.read())
            except OSError:
                pass
            time.sleep(0.25)
        assert len(stats.get("workers", [])) == 1
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
