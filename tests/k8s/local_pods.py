"""The fake API server's Jobs run as processes on this machine: each pod of a created Job runs its containers' own
command and arguments, as the chart (and `loadgen k8s run`, which renders the chart's objects) wrote them. What only
a cluster has is mapped to this machine, and nothing else is changed:

- the image: `locust`, `python` and `loadgen` are this interpreter's (first on PATH), and the chart's `locustfile` path
  (/opt/loadgen/locustfile.py, the link the Dockerfile makes) is loadgen's own locustfile;
- the volumes: each mount path a folder of the pod's (a ConfigMap's files written there; an emptyDir empty), an
  argument under a mount path moved with it;
- the network: a Service's port is a free port of 127.0.0.1, so `--master-host NAME-master --master-port 5557` is
  that port, and the pod the Service selects binds it (`--master-bind-port`, `--port`; `--host 0.0.0.0` becomes
  127.0.0.1); the API server's service proxy forwards to it (503 while nothing listens, as a real one answers);
- the environment: each `valueFrom.secretKeyRef` read from the fake cluster's Secrets. A missing Secret or key
  keeps the pod from starting (a real kubelet's CreateContainerConfigError): `errors` names it.

A pod's status follows its processes: Running; its init containers' and then its container's exit codes; Succeeded
or Failed. Its log is its container's output. `close()` kills what still runs.
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from loadgen.locust_plugin.launcher import LOCUSTFILE, free_port
from tests.k8s.fake_api import FakeCluster, pod

ROOT = Path(__file__).resolve().parents[2]
IMAGE_LOCUSTFILE = str(yaml.safe_load((ROOT / "charts" / "loadgen" / "values.yaml").read_text())["locustfile"])
# The image's programs: this interpreter's (a pod's PATH starts with these; a command runs them by name, e.g. the
# master's report server starts `locust`).
PROGRAMS = {"locust": "-m locust", "python": "", "loadgen": "-m loadgen"}
# What a pod's processes inherit from this machine (the image's own environment stands in for the rest).
_KEPT_ENV = ("PATH", "LANG", "LC_ALL", "PYTHONDONTWRITEBYTECODE", "SSL_CERT_FILE")


def _container_status(container: dict[str, Any], state: dict[str, Any], ready: bool = False) -> dict[str, Any]:
    image = container.get("image", "")
    return {"name": container["name"], "image": image, "imageID": "", "ready": ready, "restartCount": 0, "state": state}


@dataclass
class LocalPod:
    ns: str
    name: str
    job: str
    spec: dict[str, Any]
    folder: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    exit_codes: dict[str, int] = field(default_factory=dict)  # container -> exit code
    env: dict[str, dict[str, str]] = field(default_factory=dict)  # container -> its variables from the spec


class LocalPods:
    """Plays ``cluster``'s Jobs with local processes (see the module's docstring); pods' folders under ``root``."""

    def __init__(self, cluster: FakeCluster, root: Path) -> None:
        self.cluster, self.root = cluster, root
        self.pods: list[LocalPod] = []
        self.errors: list[str] = []
        self._ports: dict[tuple[str, str, int], int] = {}  # (namespace, Service, port) -> port on 127.0.0.1
        self._threads: list[threading.Thread] = []
        self._bin = root / "bin"
        self._bin.mkdir(parents=True, exist_ok=True)
        for name, args in PROGRAMS.items():
            (self._bin / name).write_text(f'#!/bin/sh\nexec {sys.executable} {args} "$@"\n', encoding="utf-8")
            (self._bin / name).chmod(0o755)
        cluster.on_create, cluster.proxy, cluster.on_list = self._created, self._proxy, self._logs

    # -- the network --------------------------------------------------------------------------------------------
    def port(self, ns: str, service: str, port: int) -> int:
        """The port of 127.0.0.1 that stands for ``service``'s ``port``: one, whichever pod (thread) asks first."""
        key = (ns, service, port)
        with self.cluster.lock:
            if key not in self._ports:
                assert ("services", ns, service) in self.cluster.objects, f"no Service {ns}/{service}"
                while (free := free_port()) in self._ports.values():
                    pass  # the kernel may hand out a port it handed out before: one port per Service port
                self._ports[key] = free
            return self._ports[key]

    def _service_of(self, ns: str, labels: dict[str, str]) -> str:
        """The Service whose selector selects a pod with ``labels`` (the one its ports are reached through)."""
        with self.cluster.lock:
            services = [
                (name, obj) for (coll, n, name), obj in self.cluster.objects.items() if (coll, n) == ("services", ns)
            ]
        for name, obj in services:
            selector = obj.get("spec", {}).get("selector") or {}
            if selector and all(labels.get(k) == v for k, v in selector.items()):
                return name
        raise AssertionError(f"no Service in {ns} selects a pod labelled {labels}")

    def _argv(self, p: LocalPod, container: dict[str, Any], mounts: dict[str, Path]) -> list[str]:
        words = [*container.get("command", []), *container.get("args", [])]
        out: list[str] = []
        labels = p.spec["metadata"]["labels"]
        for i, word in enumerate(words):
            flag = words[i - 1] if i else ""
            if flag in ("--master-bind-port", "--port"):  # a container port, reached through its Service
                word = str(self.port(p.ns, self._service_of(p.ns, labels), int(word)))
            elif flag == "--master-host":
                word = "127.0.0.1"
            elif flag == "--master-port":
                word = str(self.port(p.ns, words[words.index("--master-host") + 1], int(word)))
            elif flag in ("--host", "--master-bind-host") and word in ("0.0.0.0", "::"):
                word = "127.0.0.1"
            elif word == IMAGE_LOCUSTFILE:
                word = str(LOCUSTFILE)
            else:
                for mount, local in sorted(mounts.items(), key=lambda m: -len(m[0])):  # the innermost mount
                    if word == mount or word.startswith(mount + "/"):
                        word = str(local) + word[len(mount) :]
                        break
            out.append(word)
        return out

    def _env(self, p: LocalPod, container: dict[str, Any], tmp: Path) -> dict[str, str] | None:
        env = {k: os.environ[k] for k in _KEPT_ENV if k in os.environ}
        env |= {"HOME": str(tmp), "TMPDIR": str(tmp), "PYTHONPATH": str(ROOT)}
        env["PATH"] = f"{self._bin}{os.pathsep}{env.get('PATH', '')}"
        spec_env: dict[str, str] = {}
        for var in container.get("env", []):
            ref = (var.get("valueFrom") or {}).get("secretKeyRef")
            if ref is None:
                spec_env[var["name"]] = str(var.get("value", ""))
                continue
            secret = self.cluster.objects.get(("secrets", p.ns, ref["name"]))
            if secret is None or ref["key"] not in (secret.get("data") or {}):
                self.errors.append(f"pod {p.name}: {var['name']}: no key {ref['key']!r} in Secret {ref['name']!r}")
                return None
            spec_env[var["name"]] = base64.b64decode(secret["data"][ref["key"]]).decode()
        p.env[container["name"]] = spec_env
        return env | spec_env

    # -- the pods -------------------------------------------------------------------------------------------------
    def _created(self, c: FakeCluster, coll: str, obj: dict[str, Any]) -> None:
        if coll != "jobs":
            return
        ns, job = obj["metadata"]["namespace"], obj["metadata"]["name"]
        template = obj["spec"]["template"]
        for i in range(obj["spec"].get("parallelism", 1)):
            name = f"{job}-{i}"
            c.put("pods", pod(name, ns, template["metadata"]["labels"], phase="Pending"))
            p = LocalPod(ns, name, job, template, self.root / ns / name)
            self.pods.append(p)
            t = threading.Thread(target=self._run, args=(p,), daemon=True)
            self._threads.append(t)
            t.start()

    def _status(self, p: LocalPod, **status: Any) -> None:
        with self.cluster.lock:
            obj = self.cluster.objects.get(("pods", p.ns, p.name))
            if obj is not None:
                obj["status"] |= status

    def _mounts(self, p: LocalPod) -> dict[str, Path]:
        """Each volume of the pod as a folder, by the mount path of the containers that mount it."""
        volumes = {}
        for v in p.spec["spec"].get("volumes", []):
            folder = p.folder / "volumes" / v["name"]
            folder.mkdir(parents=True, exist_ok=True)
            if "configMap" in v:
                with self.cluster.lock:
                    cm = self.cluster.objects[("configmaps", p.ns, v["configMap"]["name"])]
                for key, text in (cm.get("data") or {}).items():
                    (folder / key).write_text(text, encoding="utf-8")
            volumes[v["name"]] = folder
        containers = [*p.spec["spec"].get("initContainers", []), *p.spec["spec"]["containers"]]
        return {m["mountPath"]: volumes[m["name"]] for c in containers for m in c.get("volumeMounts", [])}

    def _start(self, p: LocalPod, container: dict[str, Any], mounts: dict[str, Path]) -> subprocess.Popen[bytes] | None:
        tmp = mounts.get("/tmp", p.folder / "tmp")
        tmp.mkdir(parents=True, exist_ok=True)
        env = self._env(p, container, tmp)
        if env is None:
            return None
        log = (p.folder / f"{container['name']}.log").open("wb")
        proc = subprocess.Popen(
            self._argv(p, container, mounts), cwd=tmp, env=env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        log.close()
        p.procs.append(proc)
        return proc

    def _run(self, p: LocalPod) -> None:
        mounts = self._mounts(p)
        inits = []
        for container in p.spec["spec"].get("initContainers", []):
            proc = self._start(p, container, mounts)
            if proc is None:
                return  # stays Pending, as a pod whose Secret is missing does
            code = proc.wait()
            p.exit_codes[container["name"]] = code
            message = (p.folder / f"{container['name']}.log").read_text(errors="replace")[-2000:] if code else ""
            term = {"exitCode": code, "message": message}
            inits.append(_container_status(container, {"terminated": term}, ready=code == 0))
            self._status(p, initContainerStatuses=inits)
            if code:
                self._status(p, phase="Failed")
                return
        (container,) = p.spec["spec"]["containers"]
        proc = self._start(p, container, mounts)
        if proc is None:
            return
        self._status(p, phase="Running")
        code = proc.wait()
        p.exit_codes[container["name"]] = code
        cs = _container_status(container, {"terminated": {"exitCode": code}})
        self._status(p, phase="Succeeded" if code == 0 else "Failed", containerStatuses=[cs])

    def _logs(self, c: FakeCluster, coll: str) -> None:
        """Before each list: the pods' logs as their containers wrote them so far (what `kubectl logs` reads)."""
        for p in self.pods:
            (container,) = p.spec["spec"]["containers"]
            log = p.folder / f"{container['name']}.log"
            if log.exists():
                c.logs[(p.ns, p.name)] = log.read_text(errors="replace")[-20000:]

    # -- the service proxy ----------------------------------------------------------------------------------------
    def _proxy(self, method: str, ns: str, svc: str, path: str, body: Any) -> tuple[int, str, list[bytes]]:
        service, _, port = svc.partition(":")
        # The query string the client sent (the proxy passes it on): the last call to this path's.
        suffix = f"/services/{svc}/proxy/{path}"
        with self.cluster.lock:
            call = next(c for c in reversed(self.cluster.calls) if c.path.endswith(suffix) and c.method == method)
        query = urllib.parse.urlencode(call.query, doseq=True)
        url = f"http://127.0.0.1:{self.port(ns, service, int(port))}/{path}" + (f"?{query}" if query else "")
        try:
            with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=30) as r:
                return r.status, r.headers.get("Content-Type", ""), [r.read()]
        except urllib.error.HTTPError as e:
            return e.code, e.headers.get("Content-Type", ""), [e.read()]
        except OSError as e:
            return 503, "text/plain", [f"error trying to reach service: {e}".encode()]

    def wait(self, pods: list[LocalPod], timeout: float = 60) -> None:
        """Until every container of ``pods`` has ended (the workers end with their master)."""
        deadline = time.monotonic() + timeout
        for p in pods:
            for proc in p.procs:
                proc.wait(max(0.1, deadline - time.monotonic()))

    def close(self, timeout: float = 30) -> None:
        """Ends what still runs: SIGTERM to each process group, SIGKILL after ``timeout``."""
        running = [proc for p in self.pods for proc in p.procs if proc.poll() is None]
        for proc in running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in running:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for t in self._threads:
            t.join(timeout=5)
