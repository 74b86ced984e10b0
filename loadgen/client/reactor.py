"""One reader for every streaming socket of a worker process (the `Reactor` its runtime owns and hands to every
connection).

Why: with a greenlet per stream reading its own socket, every chunk costs a hub switch into that greenlet, a
successful `recv()`, a failed one (EAGAIN, raised and caught) and a per-wait timer for the read timeout — about as much
CPU as parsing the chunk itself. Here one epoll set holds all the sockets being read; the hub calls back when any is
ready, and for each ready socket the callback does one non-blocking `recv()`, stamps it with the monotonic clock and
feeds it to that request's parser, in turn, without switching. The user greenlet that sent the request sleeps until
its response is complete (or failed); the callback switches to it right then, as gevent does for a socket it waits
on, so it records and sends its next request before anything queued later (a stop's kill) can cut it short. Read
timeouts ("no bytes for N s") are checked by a sweep a few times a second instead of a timer per `recv()`.

Timestamps come from the kernel: each socket has SO_TIMESTAMPNS on, and `recvmsg()` returns, with the bytes, the
time the kernel received the last of them (the software receive stamp, taken as the packet came in, before any of
this process's scheduling). So a reader that is busy — a hundred sockets ready at once, a report being encoded, a
GC pause — stamps every chunk with the time it arrived, not the time it was got round to. The stamp is on the
realtime clock; it is moved onto the monotonic clock (what every other loadgen timestamp uses) with the offset read
once per wake-up, bracketed so a preemption cannot skew it (`clock.realtime_offset_ns`; TLS streams too:
connection.py decrypts after the read). Where the kernel gives no stamp (not Linux), the time the wake-up began
stands in: an upper bound on every arrival it reports, and never later than reading each socket in turn.

With loadgen's C half built (protocol/_wire.c), the per-wake-up loop below runs in C: `Drainer.wake` is the event
loop's callback itself; it polls the set, reads and stamps every ready socket, and the leading whole token chunks of
a read (and the common end of a stream) go straight into its request's record through the stream's armed
`TokenChunkCounter`; only the rest (a response head, the first token, the chunked terminator, errors, EOF, any shape
it does not know) comes back here (`_on_reads`), with its stamp, for the Python parser. A wake-up that leaves
nothing for Python runs no Python.

What a stamp cannot fix: TCP keeps one stamp per read (the last segment's), so when a reader is later than the gap
between two chunks of one stream, both come in one read with the later one's time. The reactor counts reads that
came more than 1 ms after their bytes arrived (`late_reads`, `max_read_delay`): the worker's health says how often
that happened.
"""

from __future__ import annotations

import contextlib
import os
import platform
import socket
import struct
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import gevent
from gevent import monkey
from gevent.hub import Hub, Waiter, get_hub

from loadgen.client.clock import realtime_offset_ns
from loadgen.protocol.native import fast_path_available
from loadgen.protocol.native import wire as _wire

__all__ = ["Reactor", "Reading", "enable_rx_timestamps"]

_epoll: Any = monkey.get_original("select", "epoll")
_EPOLLIN = 0x001
_SWEEP_S = 0.1
# While a wake-up parses reads and wakes greenlets, the sockets are read again this often (see `_on_ready`).
_REPOLL_S = 0.001
_MAX_EVENTS = 4096
_NEVER = float("inf")
_RECV = 65536
# SO_TIMESTAMPNS (= SCM_TIMESTAMPNS) is 35 in Linux's generic socket ABI (x86, ARM, POWER, s390, RISC-V); other
# architectures number it differently, and Python only names it on some builds: elsewhere, no kernel stamps.
_GENERIC_ABI = {"x86_64", "i686", "aarch64", "arm64", "armv7l", "ppc64le", "s390x", "riscv64"}
# With the C half built, its compile-time constant is the authority.
_SO_TIMESTAMPNS = getattr(_wire, "SO_TIMESTAMPNS", 0) or getattr(
    socket, "SO_TIMESTAMPNS", 35 if sys.platform.startswith("linux") and platform.machine() in _GENERIC_ABI else 0
)
_TIMESPEC = struct.Struct("@qq")
_CMSG_SPACE = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
# A kernel stamp this far from the wake-up time is not believed (the realtime clock was stepped meanwhile).
_STAMP_SLACK_S = 5.0
LATE_READ_S = 0.001


def enable_rx_timestamps(sock: socket.socket) -> bool:
    """Ask the kernel to stamp what `sock` receives; False where it cannot (the wake-up time is used then)."""
    if not _SO_TIMESTAMPNS:
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


class Reading:
    """One response being read. `on_data(t, data)` returns True once the response is complete (or must stop);
    it may raise, which ends the reading with that exception. `on_eof()` is called when the peer closed the socket
    (it must raise or return True); `on_error(exc)` maps a socket error to the exception to raise, and `on_idle()`
    gives the one for a read timeout (either returns None when the response is whole anyway: the stream's end
    marker came). `read_timeout` may be shortened while the reading runs."""

    __slots__ = (
        "fd",
        "raw",
        "on_data",
        "on_eof",
        "on_error",
        "on_idle",
        "read_timeout",
        "last_rx",
        "waiter",
        "chunk_counter",
        "_done",
    )

    def __init__(
        self,
        raw: Any,
        on_data: Callable[[float, bytes], bool],
        on_eof: Callable[[], bool],
        on_error: Callable[[OSError], BaseException | None],
        on_idle: Callable[[], BaseException | None],
        read_timeout: float,
        chunk_counter: Any = None,
    ) -> None:
        self.raw = raw
        self.fd = raw.fileno()
        self.on_data = on_data
        self.on_eof = on_eof
        self.on_error = on_error
        self.on_idle = on_idle
        self.read_timeout = read_timeout
        self.last_rx = time.monotonic()
        self.waiter: Waiter = Waiter()
        # The stream's C fast half (`_wire.TokenChunkCounter`), which counts whole token chunks while armed; None for
        # TLS, dialects it does not know, or without the C half.
        self.chunk_counter = chunk_counter
        self._done = False

    def last_arrival(self) -> float:
        counter = self.chunk_counter
        if counter is not None and counter.last_rx > self.last_rx:
            return float(counter.last_rx)
        return self.last_rx


class Reactor:
    """An epoll set, the hub callback that reads it, and the read-timeout sweep, on one gevent hub (`hub`, by
    default the calling thread's): only greenlets of that hub may `read` through it. Whoever owns the connections'
    life owns their reactor (loadgen's per-process `Runtime`; a connection given none makes its own), so that all
    of them are read by one callback; `close()` ends it."""

    def __init__(self, hub: Hub | None = None) -> None:
        hub = get_hub() if hub is None else hub
        self._hub = hub
        self._ep = _epoll()
        self._readings: dict[int, Reading] = {}
        # The C drainer, where built, with the chunk counters of the readings that have one (what it may hand reads to).
        self.fast = fast_path_available()
        self._drainer: Any = _wire.Drainer() if self.fast else None
        self._counters: dict[int, Any] = {}
        self._reads_in_c_reported = 0
        self._watcher = hub.loop.io(self._ep.fileno(), 1)
        self._watcher.ref = False  # an idle reactor must not keep the loop (gevent.wait(), joinall) from ending
        if self._drainer is not None:
            # The wake-up itself in C: one whose reads the chunk counters took whole (most of a stream's) runs no
            # Python; `_on_reads` gets the rest.
            self._watcher.start(self._drainer.wake, self._ep.fileno(), self._counters, self._on_reads)
        else:
            self._watcher.start(self._on_ready)
        self._closed = False
        self._sweeper = gevent.spawn(self._sweep)
        # A call due at a time, run between the reads of a wake-up (`call_between_reads`).
        self._due_at = _NEVER
        self._on_due: Callable[[], None] | None = None
        # Read-delay counters (kernel-stamped reads only), returned and reset by `pop_read_stats`.
        self.reads = 0
        self.late_reads = 0
        self.max_read_delay = 0.0

    def pop_read_stats(self) -> tuple[int, int, float]:
        """(stamped reads, reads more than 1 ms after their bytes arrived, the longest delay in s) since last time."""
        out = (self.reads, self.late_reads, self.max_read_delay)
        if self._drainer is not None:
            reads, late, worst = self._drainer.pop_stats()
            out = (out[0] + reads, out[1] + late, max(out[2], worst))
        self.reads = self.late_reads = 0
        self.max_read_delay = 0.0
        return out

    def pop_reads_in_c(self) -> int:
        """Reads the C half took whole (token chunks Python never parsed) since last time."""
        if self._drainer is None:
            return 0
        total = self._drainer.reads_counted
        out = total - self._reads_in_c_reported
        self._reads_in_c_reported = total
        return int(out)

    def close(self) -> None:
        """Stop reading (nothing may be reading through it now): the epoll set, the hub callback, the sweep."""
        if self._readings:
            raise RuntimeError(f"reactor closed with {len(self._readings)} reading(s) in progress")
        self._closed = True
        self._watcher.stop()
        self._sweeper.kill(block=False)
        self._ep.close()

    def read(self, reading: Reading) -> None:
        """Read until `reading` completes; returns normally or raises what ended it. Interruptible (a deadline)."""
        fd = reading.fd
        self._readings[fd] = reading
        if reading.chunk_counter is not None and self._drainer is not None:
            self._counters[fd] = reading.chunk_counter
        self._ep.register(fd, _EPOLLIN)
        # A reading in progress keeps the loop alive (with nothing else scheduled, waiting must not be a LoopExit);
        # an idle reactor does not.
        self._watcher.ref = True
        try:
            outcome = reading.waiter.get()
        finally:
            self._forget(reading)
        if outcome is not None:
            raise outcome

    def _forget(self, reading: Reading) -> None:
        if self._readings.get(reading.fd) is reading:
            del self._readings[reading.fd]
            self._counters.pop(reading.fd, None)
            with contextlib.suppress(OSError, ValueError):
                self._ep.unregister(reading.fd)
            if not self._readings:
                self._watcher.ref = False

    def _finish(self, reading: Reading) -> bool:
        """Mark `reading` ended (once): True the first time, when its greenlet is to be woken."""
        if reading._done:
            return False
        reading._done = True
        self._forget(reading)
        return True

    def call_between_reads(self, at: float, callback: Callable[[], None] | None) -> None:
        """Run `callback()` (in the hub) between two reads or wake-ups of a wave once `time.monotonic() >= at`, in
        place of any call set before; None: no call. The open-loop dispatcher's timer cannot fire inside a wave
        (the loop polls again only after it): a send due during a long wave goes out within one read's handling
        instead of after the whole wave. The callback must not block; the caller's own timer still covers the time
        outside waves."""
        self._due_at = at if callback is not None else _NEVER
        self._on_due = callback

    def _run_due(self) -> None:
        callback = self._on_due
        self._due_at, self._on_due = _NEVER, None
        if callback is not None:
            callback()

    def _on_ready(self) -> None:
        """In the hub: read every ready socket, parse what was read, and wake the greenlets whose response ended
        (from the hub, as a Waiter must be; the hub comes back here when that greenlet next waits).

        Every read is stamped when it is taken off the socket, so parsing and waking can come later without
        costing accuracy, as long as each stream is read again before its next chunk arrives. A wave of requests
        ending together (each greenlet records, then draws and sends its next request: the "aggregate.add" and
        "request setup" rows of `python -m bench.hotpath`) would otherwise hold the loop for that times the wave,
        and a stream's next chunks would pile up into one read with one stamp: so while this runs, the sockets are
        polled again every `_REPOLL_S`. Reads of one stream stay in order."""
        pending: deque[tuple[Reading, float, bytes | int]] = deque()
        self._poll(pending)
        if pending:
            self._wave(pending)

    def _on_reads(self, reads: list[tuple[int, float, bytes | int]]) -> None:
        """`_on_ready` after the C half's `Drainer.wake` read the set: the reads it left for Python."""
        pending: deque[tuple[Reading, float, bytes | int]] = deque()
        self._queue(reads, pending)
        if pending:
            self._wave(pending)

    def _queue(
        self, reads: list[tuple[int, float, bytes | int]], pending: deque[tuple[Reading, float, bytes | int]]
    ) -> None:
        """Queue the C half's reads (fd, arrival, bytes | errno) for their readings' parsers."""
        readings = self._readings
        for fd, t, data in reads:
            r = readings.get(fd)
            if r is not None:
                pending.append((r, t, data))

    def _wave(self, pending: deque[tuple[Reading, float, bytes | int]]) -> None:
        """Parse `pending`, wake the greenlets whose response ended, and read the set again while this lasts."""
        ended: deque[tuple[Reading, BaseException | None]] = deque()
        mark = time.monotonic()
        while pending or ended:
            if pending:
                self._handle(*pending.popleft(), ended)
            else:
                r, outcome = ended.popleft()
                r.waiter.switch(outcome)
                if self._closed:
                    # The greenlet woken closed this reactor (a connection that owns its reactor, closed after its
                    # last response): nothing is read through it any more.
                    return
            now = time.monotonic()
            if now >= self._due_at:
                self._run_due()
            if now - mark > _REPOLL_S:
                self._poll(pending)
                mark = now

    def _handle(
        self, r: Reading, t: float, data: bytes | int, ended: deque[tuple[Reading, BaseException | None]]
    ) -> None:
        """One read for `r`'s parser: its bytes (b"" at EOF), or the errno its recvmsg failed with."""
        if r._done:
            return  # ended by an earlier read of the same socket (or the sweep) since this one was taken
        if isinstance(data, int):  # OSError picks the subclass from the errno (ConnectionResetError, ...)
            if self._finish(r):
                ended.append((r, r.on_error(OSError(data, os.strerror(data)))))
            return
        r.last_rx = t  # arrival, as the chunk counter's last_rx: the sweep compares the two
        try:
            done = r.on_data(t, data) if data else r.on_eof()
        except Exception as e:  # noqa: BLE001 - handed to the request's own greenlet
            if self._finish(r):
                ended.append((r, e))
            return
        if done and self._finish(r):
            ended.append((r, None))

    def _poll(self, pending: deque[tuple[Reading, float, bytes | int]]) -> None:
        """Read every ready socket once (no wait), each with its arrival time; queue what is left to parse."""
        readings = self._readings
        if self._drainer is not None:
            # In C: reads stamped and late reads counted there; reads an armed chunk counter took whole stay there.
            self._queue(self._drainer.drain(self._ep.fileno(), self._counters), pending)
            return
        events = self._ep.poll(0, _MAX_EVENTS)
        if not events:
            return
        # realtime − monotonic, in ns, to move kernel stamps onto the monotonic clock
        offset, woke_ns = realtime_offset_ns()
        woke = woke_ns * 1e-9
        lo, hi = woke - _STAMP_SLACK_S, woke + _STAMP_SLACK_S
        unpack, ts_size = _TIMESPEC.unpack, _TIMESPEC.size
        mono = time.monotonic
        stamped = late = 0
        worst = self.max_read_delay
        for fd, _ in events:
            r = readings.get(fd)
            if r is None:
                continue
            try:
                data, anc, _, _ = r.raw.recvmsg(_RECV, _CMSG_SPACE)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError as e:
                pending.append((r, woke, e.errno or 0))
                continue
            t = woke
            if anc:
                _, kind, stamp = anc[0]
                if kind == _SO_TIMESTAMPNS and len(stamp) == ts_size:
                    sec, nsec = unpack(stamp)
                    k = (sec * 1_000_000_000 + nsec - offset) * 1e-9
                    if lo < k < hi:
                        t = k
                        stamped += 1
                        delay = mono() - k
                        if delay > LATE_READ_S:
                            late += 1
                            if delay > worst:
                                worst = delay
            pending.append((r, t, data))
        self.reads += stamped
        self.late_reads += late
        self.max_read_delay = worst

    def _sweep(self) -> None:
        while True:
            gevent.sleep(_SWEEP_S, ref=False)
            now = time.monotonic()
            for r in [r for r in self._readings.values() if now - r.last_arrival() > r.read_timeout]:
                if self._finish(r):
                    self._hub.loop.run_callback(r.waiter.switch, r.on_idle())
