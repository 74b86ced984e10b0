"""`loadgen k8s run`: create a run's objects, follow it, copy its reports out, clean up, exit with its code.

The headless master serves its report folder after the run (``--serve-reports``); the client reads it through the
API server's service proxy (``GET /`` lists the files and the exit code, ``GET /<file>``, then ``GET /done`` lets
the master end and its Job complete with that code). No port-forward, no sidecar, nothing restarted. ``/done`` takes
the run's own token: the objects carry a Secret with a fresh random one (the master reads it as
``LOADGEN_DONE_TOKEN``), which this client alone knows besides whoever may read Secrets in the namespace.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen.exit_codes import ExitCode
from loadgen.k8s.api import Cluster, api_exception
from loadgen.k8s.run_objects import RunSpec, build_objects, done_token, master_service

__all__ = ["KINDS", "RunResult", "cleanup", "create", "follow", "run_in_cluster"]

INTERRUPTED = 130  # the shell's code for SIGINT: no verdict
_CONNECTED = re.compile(r"(\d+) workers connected")
# The master's own status line in its log (loadgen/live/progress.py, plain lines off a terminal): "loadgen: 0m12s/…".
_MASTER_STATUS = re.compile(r"^loadgen: (\d+m?\d*s(?:/\S+)? \| users .*)$", re.MULTILINE)


@dataclass
class RunResult:
    code: int
    files: list[str] = field(default_factory=list)
    status: str = ""


# Every kind the chart renders for a run: its API (an attribute of Cluster) and its name in the client's methods.
KINDS = {
    "ServiceAccount": ("core", "service_account"),
    "ConfigMap": ("core", "config_map"),
    "Secret": ("core", "secret"),
    "Service": ("core", "service"),
    "NetworkPolicy": ("networking", "network_policy"),
    "Job": ("batch", "job"),
    "Deployment": ("apps", "deployment"),
}


def _verbs(cluster: Cluster, kind: str) -> tuple[Any, Any]:
    """(create, delete) of one kind of object the chart renders."""
    api, name = KINDS[kind]
    client = getattr(cluster, api)
    return getattr(client, f"create_namespaced_{name}"), getattr(client, f"delete_namespaced_{name}")


def _create_one(cluster: Cluster, obj: dict[str, Any]) -> None:
    # The created object is not needed back: not parsing it spares a client / server version mismatch.
    _verbs(cluster, obj["kind"])[0](obj["metadata"]["namespace"], obj, _preload_content=False)


def create(cluster: Cluster, objects: list[dict[str, Any]], created: list[dict[str, Any]]) -> None:
    """Create in order, appending each to ``created`` as soon as it exists (what clean-up must delete)."""
    for obj in objects:
        _create_one(cluster, obj)
        created.append(obj)


def cleanup(cluster: Cluster, created: list[dict[str, Any]]) -> list[str]:
    """Delete what was created, newest first; a missing object is fine. Returns the problems, if any."""
    problems = []
    for obj in reversed(created):
        ns, name, kind = obj["metadata"]["namespace"], obj["metadata"]["name"], obj["kind"]
        delete = _verbs(cluster, kind)[1]
        try:
            # Background: the Job's pods go with it (the default, orphan, would leave them running the load).
            delete(name, ns, propagation_policy="Background", _preload_content=False)
        except api_exception() as e:
            if getattr(e, "status", None) != 404:
                problems.append(f"{kind} {ns}/{name}: {getattr(e, 'reason', e)}")
    return problems


class ProxyError(Exception):
    """The service proxy did not give a 200: nothing listens yet (503), or the file is not there (404)."""


def _proxy(cluster: Cluster, ns: str, service: str, path: str, token: str | None = None) -> bytes:
    """GET ``path`` of the master's report server through the API server's service proxy ("<service>:<port>").
    Always `/proxy/<path>`, with the slash: `/proxy` alone is redirected by real API servers. ``token``: sent as
    `?token=`, which the service proxy passes on (an API server's audit log may record the URL: the token ends only
    this run's report window, and is worth nothing once its Job ended)."""
    api = cluster.api_client
    method, url, headers, _, _ = api.param_serialize(
        "GET",
        f"/api/v1/namespaces/{ns}/services/{service}/proxy/{path}",
        query_params=[("token", token)] if token else None,
        auth_settings=["BearerToken"],
    )
    resp = api.call_api(method, url, header_params=headers, _request_timeout=60)
    data = bytes(resp.read() or b"")
    if resp.status != 200:
        raise ProxyError(f"GET {path or '/'}: {resp.status} {data[:200]!r}")
    return data


def _master_exit(cluster: Cluster, ns: str, release: str) -> tuple[int, str] | None:
    """(exit code, what to say) once the master pod ended, else None: its `validate` init container's code and
    message when it refused the scenario (the master never started), else the master container's code."""
    pods = cluster.core.list_namespaced_pod(
        ns, label_selector=f"app.kubernetes.io/instance={release},app.kubernetes.io/component=master"
    ).items
    for pod in pods:
        for cs in (pod.status.init_container_statuses or []) if pod.status else []:
            term = cs.state.terminated if cs.state else None
            if term is not None and term.exit_code:
                said = (
                    " ".join((term.message or "").split())
                    or f"see kubectl -n {ns} logs {pod.metadata.name} -c {cs.name}"
                )
                code = int(term.exit_code)
                what = "refused the scenario" if code == ExitCode.USAGE else f"failed (exit {code})"
                return code, f"the master pod's {cs.name} container {what} before any load: {said}"
        for cs in (pod.status.container_statuses or []) if pod.status else []:
            term = cs.state.terminated if cs.state else None
            if term is not None:
                return int(term.exit_code), "the master ended without serving its reports (see its log)"
    return None


def _progress(cluster: Cluster, ns: str, release: str) -> str:
    pods = cluster.core.list_namespaced_pod(ns, label_selector=f"app.kubernetes.io/instance={release}").items
    phases: dict[str, int] = {}
    master = None
    for pod in pods:
        comp = (pod.metadata.labels or {}).get("app.kubernetes.io/component")
        phase = (pod.status.phase if pod.status else None) or "Pending"
        if comp == "worker":
            phases[phase] = phases.get(phase, 0) + 1
        elif comp == "master":
            master = pod
    connected, live = "?", ""
    if master is not None and master.status and master.status.phase == "Running":
        try:
            log = cluster.core.read_namespaced_pod_log(master.metadata.name, ns, tail_lines=200) or ""
            found = _CONNECTED.findall(log)
            connected = found[-1] if found else "0"
            lines = _MASTER_STATUS.findall(log)
            live = f" | {lines[-1]}" if lines else ""  # once the load runs: its req/s, TTFT, errors, trust
        except api_exception():
            pass
    workers = ", ".join(f"{n} {p.lower()}" for p, n in sorted(phases.items())) or "none yet"
    mphase = (master.status.phase if master is not None and master.status else None) or "pending"
    return f"master {mphase.lower()} · workers {workers} · {connected} connected{live}"


def follow(
    cluster: Cluster,
    ns: str,
    release: str,
    service: str,
    out_dir: Path,
    *,
    interval: float = 2.0,
    timeout: float | None = None,
    status: Callable[[str], None] | None = None,
    token: str | None = None,
) -> RunResult:
    """Poll until the master's report server answers (or the master ends without one); copy every file it lists
    into ``out_dir``; tell it we are done (with the run's ``token``). The run's exit code comes from the report
    server, else the pod."""
    started = time.monotonic()
    say = status or (lambda _s: None)
    exc = api_exception()
    while True:
        say(_progress(cluster, ns, release))
        try:
            listing = json.loads(_proxy(cluster, ns, service, ""))
            break
        except (exc, ProxyError, ValueError):
            pass  # the master is still running the load (nothing listens on 8089 until then)
        ended = _master_exit(cluster, ns, release)
        if ended is not None:
            # No report served: the run failed (4), unless the master refused its configuration (2) or was killed
            # by signal N (128 + N); never a verdict.
            code, said = ended
            failed = code if code == ExitCode.USAGE or code > 128 else ExitCode.RUN_FAILED
            return RunResult(failed, status=said)
        if timeout is not None and time.monotonic() - started > timeout:
            return RunResult(ExitCode.RUN_FAILED, status=f"no reports after {timeout:g}s")
        time.sleep(interval)
    out_dir.mkdir(parents=True, exist_ok=True)
    fetched, missed = [], []
    for fname in listing.get("files", []):
        if "/" in fname or fname.startswith("."):
            continue  # never write outside out_dir, whatever the server says
        try:
            data = _proxy(cluster, ns, service, fname)
        except (exc, ProxyError):
            missed.append(fname)  # the others are still worth having; the status says which one is not
            continue
        (out_dir / fname).write_bytes(data)
        fetched.append(fname)
    with contextlib.suppress(exc, ProxyError):  # the master ends on its own when its serving time is up
        _proxy(cluster, ns, service, "done", token)
    note = "reports copied" + (f" (could not fetch {', '.join(missed)})" if missed else "")
    return RunResult(int(listing.get("exit_code", ExitCode.RUN_FAILED)), fetched, status=note)  # none: no verdict


def _status_printer() -> Callable[[str], None]:
    """The live status line of `loadgen run` (loadgen/live/progress.py): redrawn in place on a terminal, a plain
    line in a log, and only when it changed."""
    from loadgen.live.progress import render

    last = [""]
    tty = sys.stderr.isatty()
    started = time.monotonic()

    def say(text: str) -> None:
        if text == last[0]:
            return
        last[0] = text
        columns = shutil.get_terminal_size((120, 24)).columns
        sys.stderr.write(render(text, time.monotonic() - started, None, tty, columns))
        sys.stderr.flush()

    return say


def run_in_cluster(
    cluster: Cluster,
    spec: RunSpec,
    out_dir: Path,
    *,
    keep: bool = False,
    interval: float = 2.0,
    timeout: float | None = None,
    status: Callable[[str], None] | None = None,
) -> RunResult:
    """The whole `k8s run` of the chart's objects for ``spec`` (headless mode) in the cluster's namespace: objects up,
    followed, reports out, objects down (unless ``keep``; always on Ctrl-C, which is how the run is stopped:
    deleting the master Job ends the load)."""
    ns, release = cluster.namespace, spec.name
    objects = build_objects(spec, ns)
    service = master_service(objects)
    created: list[dict[str, Any]] = []
    say = status or _status_printer()
    result = RunResult(INTERRUPTED, status="interrupted")
    interrupted = False
    try:
        create(cluster, objects, created)
        say(f"created {', '.join(o['kind'] + ' ' + o['metadata']['name'] for o in objects)}")
        result = follow(
            cluster,
            ns,
            release,
            service,
            out_dir,
            interval=interval,
            timeout=timeout,
            status=say,
            token=done_token(objects),
        )
    except KeyboardInterrupt:
        interrupted = True
    finally:
        if created and (not keep or interrupted or result.code == INTERRUPTED):
            for problem in cleanup(cluster, created):
                print(f"loadgen: clean-up: {problem}", file=sys.stderr)
    return result
