"""Start the simulator from Python: as a child process (the realistic setup: its own interpreter and CPU time)
or on a background thread with its own event loop (fast in-process tests).
"""

from __future__ import annotations

import asyncio
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from pathlib import Path
from types import TracebackType
from typing import IO, Self, TypeVar

from loadgen.sim.server import SimCluster
from loadgen.sim.truth import TruthLog
from loadgen.sim.variant_spec import parse_variant, with_faults, with_profile_changes

T = TypeVar("T")


class SimStartError(RuntimeError):
    """The simulator did not become ready (bad arguments, port in use, timeout)."""


class _Endpoints:
    ports: dict[str, int]
    host: str

    def base_url(self, name: str) -> str:
        """``http://HOST:PORT`` of variant ``name``."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.ports[name]}"

    def stop(self) -> int | None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class SimProcess(_Endpoints):
    """A running ``python -m loadgen.sim`` child."""

    def __init__(self, proc: subprocess.Popen[bytes], ports: dict[str, int], host: str) -> None:
        self.proc, self.ports, self.host = proc, ports, host

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM, wait (the child flushes its truth log), SIGKILL if it hangs; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return self.proc.returncode


def _read_ready_line(stream: IO[bytes], deadline: float) -> bytes:
    """Read one line from the child's stdout without blocking past ``deadline``."""
    fd = stream.fileno()
    buf = b""
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while b"\n" not in buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not sel.select(remaining):
                raise SimStartError("timed out waiting for the simulator's ready line")
            chunk = os.read(fd, 4096)
            if not chunk:
                break  # child exited
            buf += chunk
    return buf.split(b"\n", 1)[0]


def start_sim_process(
    variants: list[str],
    truth_log: Path | None = None,
    host: str = "127.0.0.1",
    seed: int = 0,
    timeout: float = 15.0,
    faults: Mapping[str, Mapping[str, float]] | None = None,
    profile_changes: Mapping[str, Mapping[str, str]] | None = None,
) -> SimProcess:
    """Spawn ``python -m loadgen.sim`` with ``variants`` (``NAME[=PROFILE][:PORT]``) and wait until it listens.

    ``faults`` is ``{variant: {knob: value}}`` (knobs of ``loadgen.sim.faults.FaultSpec``), ``profile_changes``
    ``{variant: {profile field: value}}`` (``--set``); both are validated here first, so a typo raises
    ``ValueError`` in the caller instead of a child exiting with status 2.
    """
    with_profile_changes(with_faults([parse_variant(v) for v in variants], faults), profile_changes)
    cmd = [sys.executable, "-m", "loadgen.sim", "--host", host, "--seed", str(seed)]
    for v in variants:
        cmd += ["--variant", v]
    for name, knobs in (faults or {}).items():
        for knob, value in knobs.items():
            cmd += ["--fault", f"{name}:{knob}={float(value)!r}"]
    for name, fields in (profile_changes or {}).items():
        cmd += [arg for key, value in fields.items() for arg in ("--set", f"{name}:{key}={value}")]
    if truth_log is not None:
        cmd += ["--truth-log", str(truth_log)]
    env = dict(os.environ)
    # Make the child import this very loadgen, installed or not.
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    try:
        line = _read_ready_line(proc.stdout, time.monotonic() + timeout)
        msg = json.loads(line) if line else None
    except (SimStartError, ValueError) as e:
        proc.kill()
        proc.wait()
        raise SimStartError(f"simulator did not start: {e}") from e
    if not isinstance(msg, dict) or not msg.get("ready"):
        code = proc.wait(timeout)
        raise SimStartError(f"simulator exited with status {code} before it was ready (see its stderr)")
    return SimProcess(proc, {str(k): int(v) for k, v in msg["ports"].items()}, host)


class SimServerThread(_Endpoints):
    """The simulator on a daemon thread with its own event loop, for in-process tests."""

    def __init__(
        self,
        variants: list[str],
        truth_log: Path | None = None,
        host: str = "127.0.0.1",
        seed: int = 0,
        timeout: float = 15.0,
        faults: Mapping[str, Mapping[str, float]] | None = None,
        profile_changes: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self.host = host
        self.ports = {}
        specs = with_profile_changes(with_faults([parse_variant(v) for v in variants], faults), profile_changes)
        self.cluster = SimCluster(specs, host, seed, truth_log)
        self._loop = asyncio.new_event_loop()
        self._ready: Future[dict[str, int]] = Future()
        # asyncio.Event binds to a loop on first use, so it can be made here and set from stop() at any time.
        self._stop = asyncio.Event()
        self._thread = threading.Thread(target=self._run, name="loadgen-sim", daemon=True)
        self._thread.start()
        try:
            self.ports = self._ready.result(timeout)
        except BaseException:
            self.stop()
            raise

    @property
    def truth(self) -> TruthLog | None:
        return self.cluster.truth

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main())
        finally:
            self._loop.close()

    async def _main(self) -> None:
        try:
            ports = await self.cluster.start()
        except BaseException as e:
            self._ready.set_exception(e)
            await self.cluster.close()
            return
        self._ready.set_result(ports)
        try:
            await self._stop.wait()
        finally:
            await self.cluster.close()

    def call(self, fn: Callable[[], T], timeout: float = 5.0) -> T:
        """Run ``fn`` on the server's loop thread and return its result: the safe way to read or poke its state
        (engines, truth log, the loop's tasks) from a test thread."""

        async def _call() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(_call(), self._loop).result(timeout)

    def flush_truth(self, timeout: float = 5.0) -> None:
        """Write the truth log's buffer now (from the server's own loop, so no record is racing the swap)."""
        if self.cluster.truth is None or self._loop.is_closed():
            return
        self.call(self.cluster.truth.flush, timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the servers, flush the truth log, join the thread."""
        if self._thread.is_alive() and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)
