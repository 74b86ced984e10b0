"""The image, run: `loadgen demo` in a container; the chart's headless master and a worker as two containers finishing a
run against the simulator; and the pods' posture (uid 10001, read-only root filesystem, no capabilities) holding.

Every container runs with its pod's securityContext and volumes as the chart renders them (conftest.Pod), so what
passes here is what the chart's pods run; only the master's host (127.0.0.1: the containers share the host's network)
and free ports replace the Service's name and the fixed ports.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from loadgen.sim.launch import start_sim_process
from tests.image.conftest import Image, Pod, container_name, podman
from tests.k8s_chart.conftest import helm_render


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _render(tmp: Path, values: dict[str, Any]) -> list[dict[str, Any]]:
    code, doc, err = helm_render(values, tmp)
    assert code == 0, err
    return list(doc["created"])


_NOWHERE = {"scenario": {"variants": [{"name": "a", "base_url": "http://127.0.0.1:9", "model": "m"}]}}

# Run in the master's container: who it runs as, and where it can write (errno name, or "ok").
_PROBE = r"""
import errno, json, os
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
writes = {}
for d in ["/", "/opt/venv", "/opt/loadgen", "/etc", "/var/tmp", "/etc/loadgen", "/tmp", "/reports"]:
    path = os.path.join(d, "probe")
    try:
        with open(path, "w") as f:
            f.write("x")
        os.unlink(path)
        writes[d] = "ok"
    except OSError as e:
        writes[d] = errno.errorcode[e.errno]
print(json.dumps({"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(), "writes": writes,
                  "cap_eff": int(status["CapEff"], 16), "no_new_privs": int(status["NoNewPrivs"])}))
"""


def test_the_pods_run_as_uid_10001_with_a_read_only_root_filesystem(
    image: Image, tmp_path: Path, container_names: list[str]
) -> None:
    """The image's own user is 10001; in the master pod's posture the root filesystem refuses every write (EROFS, not
    a permission: the read-only mount is what stops it), as does the ConfigMap's mount, while /tmp and /reports (the
    emptyDirs, the fsGroup's) take them; no capability is left and privileges cannot grow."""
    inspected = podman("image", "inspect", "--format", "{{.Config.User}} {{json .Config.Entrypoint}}", image.name)
    assert inspected.stdout.split(" ", 1) == ["10001:10001", '["loadgen"]\n'], inspected
    master = Pod(_render(tmp_path, _NOWHERE), "rel-loadgen-master", tmp_path)
    name = container_name(container_names, "probe")
    r = subprocess.run(
        master.argv(image, name, "master", command=["python", "-c", _PROBE]),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    seen = json.loads(r.stdout)
    assert (seen["uid"], seen["gid"]) == (10001, 10001) and 10001 in seen["groups"]
    assert seen["cap_eff"] == 0 and seen["no_new_privs"] == 1
    read_only = ["/", "/opt/venv", "/opt/loadgen", "/etc", "/var/tmp", "/etc/loadgen"]
    assert seen["writes"] == {**dict.fromkeys(read_only, "EROFS"), "/tmp": "ok", "/reports": "ok"}


def test_loadgen_demo_runs_in_the_image(image: Image, tmp_path: Path, container_names: list[str]) -> None:
    """`loadgen demo` (the simulator, a master and a worker process, three variants) in one container with the master
    pod's posture: it exits 0, prints the report, and writes it under /reports (the emptyDir)."""
    master = Pod(_render(tmp_path, _NOWHERE), "rel-loadgen-master", tmp_path)
    name = container_name(container_names, "demo")
    demo = ["loadgen", "demo", "--duration", "10s", "--set", "load.warmup=2s", "--no-progress"]
    r = subprocess.run(master.argv(image, name, "master", command=demo), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "## SLOs" in r.stdout and "Exit code: 0" in r.stdout, r.stdout[-3000:]
    out = master.volumes["reports"] / "loadgen-report"
    assert {"report.json", "report.md", "report.html"} <= {p.name for p in out.iterdir()}
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["exit_code"] == 0
    assert {v["name"] for v in report["variants"]} == {"baseline", "int8", "spec-decode"}
    for v in report["variants"]:
        assert v["overall"]["requests"] > 0 and v["overall"]["ok"] == v["overall"]["requests"], v["overall"]


def _listing(port: int, master: subprocess.Popen[bytes], log: Path) -> dict[str, Any]:
    """The master's report server's `/` once the run has ended (it starts serving then)."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and master.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as r:
                return dict(json.loads(r.read()))
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"the master served no reports (exit {master.poll()}):\n{log.read_text(errors='replace')}")


def test_master_and_worker_containers_finish_a_headless_run(
    image: Image, tmp_path: Path, container_names: list[str]
) -> None:
    """The chart's headless release as containers: the master Job's init container validates the mounted scenario,
    its master (the report server wrapping `locust --master`) and one worker Job's container run the scenario against
    the simulator, the master serves the reports from its emptyDir, and `GET /done` with the chart's token ends it
    with the run's exit code."""
    with start_sim_process(["baseline"], seed=0) as sim:
        values = {
            "mode": "headless",
            "workers": {"replicas": 1},
            "headless": {"duration": "6s", "serveReports": "120s"},
            "scenario": {
                "variants": [{"name": "baseline", "base_url": sim.base_url("baseline"), "model": "m"}],
                "load": {"users": 4, "spawn_rate": 4},
            },
        }
        objs = _render(tmp_path, values)
        master, worker = Pod(objs, "rel-loadgen-master", tmp_path), Pod(objs, "rel-loadgen-worker", tmp_path)
        zmq, web = _free_port(), _free_port()
        swap = {"5557": str(zmq), "8089": str(web), "rel-loadgen-master": "127.0.0.1"}

        checked = subprocess.run(
            master.argv(image, container_name(container_names, "validate"), "validate"),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert checked.returncode == 0 and ": OK" in checked.stdout, checked.stdout + checked.stderr
        log = tmp_path / "master.log"
        wlog = tmp_path / "worker.log"
        with log.open("wb") as out, wlog.open("wb") as wout:
            m = subprocess.Popen(
                master.argv(image, container_name(container_names, "master"), "master", swap),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
            w = subprocess.Popen(
                worker.argv(image, container_name(container_names, "worker"), "worker", swap),
                stdout=wout,
                stderr=subprocess.STDOUT,
            )
            try:
                listing = _listing(web, m, log)
                assert {"report.json", "report.md", "report.html"} <= set(listing["files"])
                with urllib.request.urlopen(f"http://127.0.0.1:{web}/report.json", timeout=5) as r:
                    report = json.loads(r.read())
                token = master.env(master.container("master"))["LOADGEN_DONE_TOKEN"]
                done = urllib.request.Request(f"http://127.0.0.1:{web}/done", headers={"X-Loadgen-Done-Token": token})
                with urllib.request.urlopen(done, timeout=5) as r:
                    assert r.status == 200
                assert m.wait(60) == report["exit_code"] == listing["exit_code"], log.read_text(errors="replace")
                assert w.wait(60) == 0, wlog.read_text(errors="replace")
            finally:
                for p in (m, w):
                    if p.poll() is None:
                        p.kill()
                        p.wait()
    # A verdict (0 met, 1 breached, 3 generator not trusted) on requests that were sent, answered and counted.
    assert report["exit_code"] in (0, 1, 3), log.read_text(errors="replace")
    (v,) = report["variants"]
    assert v["name"] == "baseline" and v["overall"]["requests"] > 0, v["overall"]
    assert v["overall"]["ok"] == v["overall"]["requests"], v["overall"]
    # The report in the master's emptyDir is the one served.
    assert json.loads((master.volumes["reports"] / "report.json").read_text(encoding="utf-8")) == report
