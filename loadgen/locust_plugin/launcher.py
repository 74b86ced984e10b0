"""Runs a scenario headless: a Locust master and N worker processes on loopback (or one local process).

Each process runs the packaged locustfile; the master's exit code is the run's (0 SLOs met, 1 breached,
2 bad configuration, 3 not trustworthy, 4 the run failed) when it wrote its report; a master that crashed without
one, or was killed (128 + N for signal N), failed the run, whose report is then rebuilt from the raw shards where
there are any (report/failed_run.py). Locust's own console output goes to log files in the report folder so
that what the user reads is loadgen's report (and, during the run, the master's status line on stderr).

Ctrl-C and SIGTERM stop the run gracefully. The master and the workers run in sessions of their own, so a Ctrl-C
at the terminal reaches this process alone (else each worker would quit at once, its last figures with it). The
first SIGINT / SIGTERM is passed to the master as SIGTERM: it stops the users, collects every worker's final
figures and writes the report, marked interrupted (`run.interrupted`, a failed run: exit 4). A second one kills
every process at once: exit 128 + N (130 for Ctrl-C), the report rebuilt from the raw shards where there are any.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from urllib.parse import urlsplit

from loadgen.config.precedence import ENV_VARS
from loadgen.config.scenario import Scenario
from loadgen.exit_codes import ExitCode
from loadgen.report.failed_run import settle_run

__all__ = [
    "REPORT_FILES",
    "RunOptions",
    "default_workers",
    "refused_before_load",
    "run_scenario",
    "set_aside_reports",
    "unreachable_variants",
]

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
REPORT_FILES = ("report.json", "report.md", "report.html")


@dataclass
class RunOptions:
    scenario_path: Path
    workers: int = 0
    report_dir: Path | None = None
    duration: str | None = None
    raw_records: Path | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    quiet: bool = False
    # The master's status line on this process's stderr (locust_plugin/progress.py); off with quiet too.
    progress: bool = True
    # The master's Prometheus exporter port (0: none) and a Pushgateway for the final figures ("" : none).
    metrics_port: int = 0
    metrics_linger: float = 0.0
    pushgateway: str = ""


def default_workers() -> tuple[int, str]:
    """Worker processes for this machine, and a sentence saying why: one per core, one core kept for the master
    (it merges every worker's deltas), but at least one."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    workers = max(1, cores - 1)
    plural = "es" if workers != 1 else ""
    if cores > 1:
        return workers, f"{workers} worker process{plural} ({cores} cores, one kept for the master)"
    return workers, f"{workers} worker process{plural} (1 core, shared with the master)"


def set_aside_reports(report_dir: Path) -> list[Path]:
    """Rename the reports (`REPORT_FILES`) left by an earlier run to report.previous.*, so that whatever is there after
    this run was written by it. Returns the new paths."""
    moved = []
    for name in REPORT_FILES:
        old = report_dir / name
        if old.exists():
            new = old.with_name(name.replace("report.", "report.previous.", 1))
            old.replace(new)
            moved.append(new)
    return moved


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def unreachable_variants(scenario: Scenario, timeout: float = 3.0) -> list[str]:
    """TCP-connect to every variant once; returns one message per unreachable variant."""
    problems = []
    for v in scenario.variants:
        u = urlsplit(v.base_url)
        port = u.port or (443 if u.scheme == "https" else 80)
        try:
            with socket.create_connection((u.hostname or "", port), timeout=timeout):
                pass
        except OSError as e:
            problems.append(f"variant {v.name!r}: cannot connect to {u.hostname}:{port} ({e.strerror or e})")
    return problems


def refused_before_load(scenario: Scenario, source: str) -> int | None:
    """The last check before a command starts load: a TCP connect to every variant (exit 1 when one is unreachable:
    a dead target is a breach; the checks of files and other servers, exit 2, ran in loadgen/preflight.py). Prints
    why and returns the exit code; None when the run may start."""
    problems = unreachable_variants(scenario)
    if problems:
        print("loadgen: target unreachable, nothing was run (a breach, exit 1):", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        return ExitCode.SLO_BREACHED
    return None


class _Stopper:
    """This process's SIGINT / SIGTERM handler while a run goes on: the first signal asks the master to stop (it
    collects the workers' final figures and writes the report); a second kills the master and the workers at once
    (each leads a process group of its own). `forced`: the signal that forced the stop, else 0."""

    def __init__(self, master: subprocess.Popen[bytes], workers: list[subprocess.Popen[bytes]]) -> None:
        self.master = master
        self.workers = workers
        self.signals = 0
        self.forced = 0
        self._previous: dict[int, object] = {}

    def install(self) -> None:
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self)

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        self._previous.clear()

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.signals += 1
        name = signal.Signals(signum).name
        if self.signals == 1:
            print(
                f"\nloadgen: {name}: stopping the run; collecting every worker's figures and writing the report "
                "(Ctrl-C again to kill everything at once)",
                file=sys.stderr,
                flush=True,
            )
            if self.master.poll() is None:
                self.master.send_signal(signal.SIGTERM)
            return
        if not self.forced:
            self.forced = signum
            print(f"\nloadgen: {name} again: killing the master and the workers", file=sys.stderr, flush=True)
        for p in (self.master, *self.workers):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    p.kill()


def _locust_cmd(opts: RunOptions, report_dir: Path) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(LOCUSTFILE),
        "--scenario",
        str(opts.scenario_path),
        "--report-dir",
        str(report_dir),
        "--headless",
        "--only-summary",
    ]
    if opts.duration:
        cmd += ["--loadgen-duration", opts.duration]
    if opts.raw_records:
        cmd += ["--raw-records", str(opts.raw_records)]
    return cmd


def run_scenario(scenario: Scenario, opts: RunOptions) -> int:
    report_dir = Path(opts.report_dir or scenario.report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    # The settings the environment gives (LOCUST_USERS, LOADGEN_DURATION, …) are in the scenario the caller resolved
    # (config/precedence.py): the processes must not apply them again, over the command line's.
    inherited = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    env = {**inherited, **opts.extra_env, "PYTHONUNBUFFERED": "1"}
    base = _locust_cmd(opts, report_dir)
    procs: list[subprocess.Popen[bytes]] = []
    logs = []
    started = time.time() - 1.0  # shards written from now on are this run's (mtime, to the second on some systems)
    try:
        if opts.workers <= 0:
            master_cmd = base
        else:
            port = free_port()
            master_cmd = base + [
                "--master",
                "--master-bind-host",
                "127.0.0.1",
                "--master-bind-port",
                str(port),
                "--expect-workers",
                str(opts.workers),
                "--expect-workers-max-wait",
                # Each worker process starts its own interpreter (about a CPU second of imports): on a small
                # machine a hundred of them take longer than a minute to connect.
                str(max(60, 2 * opts.workers)),
            ]
            for i in range(opts.workers):
                log = open(report_dir / f"locust-worker-{i}.log", "wb")  # noqa: SIM115
                logs.append(log)
                wcmd = base + ["--worker", "--master-host", "127.0.0.1", "--master-port", str(port)]
                procs.append(
                    # A session of its own: a Ctrl-C at the terminal does not reach it (it is told to stop by the
                    # master, after its final figures).
                    subprocess.Popen(wcmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
                )
        # Only the master exports and pushes: it holds the merged figures.
        if opts.metrics_port:
            master_cmd = master_cmd + ["--metrics-port", str(opts.metrics_port)]
            master_cmd += ["--metrics-linger", str(opts.metrics_linger)]
        if opts.pushgateway:
            master_cmd = master_cmd + ["--pushgateway", opts.pushgateway]
        mlog = open(report_dir / "locust-master.log", "wb")  # noqa: SIM115
        logs.append(mlog)
        # The master's own output goes to its log; its status line comes to our stderr through a descriptor of it
        # handed down (a terminal stays a terminal: the line is redrawn in place there).
        progress_fd = os.dup(2) if opts.progress and not opts.quiet else None
        if progress_fd is None:
            master_cmd = master_cmd + ["--loadgen-progress", "0"]
        else:
            master_cmd = master_cmd + ["--loadgen-progress-fd", str(progress_fd)]
        try:
            master = subprocess.Popen(
                master_cmd,
                stdout=mlog,
                stderr=subprocess.STDOUT,
                env=env,
                pass_fds=() if progress_fd is None else (progress_fd,),
                start_new_session=True,
            )
        finally:
            if progress_fd is not None:
                os.close(progress_fd)
        stopper = _Stopper(master, procs)
        if threading.current_thread() is threading.main_thread():
            stopper.install()
        try:
            code = master.wait()
        finally:
            stopper.restore()
        if stopper.forced:
            # Killed on a second signal: the run's exit is that signal's (128 + N), as if it had killed the master.
            code = -stopper.forced
        if code < 0 and not stopper.forced:
            # The master died (killed): nothing will tell its workers to stop. SIGTERM ends each one at once, its
            # raw shard flushed (instead of 15 s more load against the target, then SIGKILL).
            for p in procs:
                if p.poll() is None:
                    p.terminate()
        deadline = time.monotonic() + 15
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
        # The workers are done (their shards complete) before a failed run's report is rebuilt from them.
        settled, failed = settle_run(code, report_dir, scenario, opts.raw_records, started, bool(stopper.forced))
        if failed:
            print(
                f"loadgen: the run failed (exit {settled}): {failed}; see {report_dir}/locust-master.log",
                file=sys.stderr,
                flush=True,
            )
        return settled
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for f in logs:
            f.close()
