"""A slow, lossy link without `tc netem`: packets carried between two TUN devices by a thread that delays and drops.

This machine's kernel has no queueing disciplines beyond the default (`tc qdisc add … netem` is refused), so the
impairment is done in user space. A host's namespace gets a TUN device holding its address instead of a veth; the
other end of the link is a TUN device in an "edge" namespace that routes for it onto the bridge (proxy ARP answers
for the host's address there). Every IP packet either way is read from one TUN device and written to the other
after `delay ± jitter` (uniform, drawn per packet, so packets may be reordered as on a real path with jitter), or
dropped with probability `loss`: TCP sees real delay, loss and retransmission. One thread serves every link.

The TUN devices are created in the test's own namespace (where it can attach to them) and then moved into the
host's and the edge's namespaces; an attached TUN device keeps its file descriptor across the move.
"""

from __future__ import annotations

import contextlib
import fcntl
import heapq
import os
import random
import select
import struct
import threading
import time
from dataclasses import dataclass

__all__ = ["Impairment", "LinkPump", "open_tun"]

_TUNSETIFF = 0x400454CA
_IFF_TUN = 0x0001
_IFF_NO_PI = 0x1000


@dataclass(frozen=True)
class Impairment:
    """Each way: `delay` ± `jitter` seconds, and a share `loss` of the packets dropped."""

    delay: float = 0.020
    jitter: float = 0.005
    loss: float = 0.01


def open_tun(name: str) -> int:
    """A new TUN device `name` (layer 3, no packet-info header), attached to the returned non-blocking fd."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    try:
        fcntl.ioctl(fd, _TUNSETIFF, struct.pack("16sH", name.encode(), _IFF_TUN | _IFF_NO_PI))
    except OSError:
        os.close(fd)
        raise
    return fd


class LinkPump:
    """Carries packets between pairs of TUN fds (`connect(a, b, impairment)`), in one thread, until `close()`."""

    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)
        self._peer: dict[int, tuple[int, Impairment]] = {}
        self._due: list[tuple[float, int, int, bytes]] = []
        self._seq = 0
        self._wake_r, self._wake_w = os.pipe()
        self._stop = False
        self._thread: threading.Thread | None = None
        self.carried = 0
        self.dropped = 0

    def connect(self, a: int, b: int, impairment: Impairment) -> None:
        self._peer[a] = (b, impairment)
        self._peer[b] = (a, impairment)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="impaired-links", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        fds = [*self._peer, self._wake_r]
        rng, due = self._rng, self._due
        while not self._stop:
            timeout = max(0.0, due[0][0] - time.monotonic()) if due else 1.0
            ready, _, _ = select.select(fds, [], [], timeout)
            now = time.monotonic()
            for fd in ready:
                if fd == self._wake_r:
                    continue
                out, imp = self._peer[fd]
                while True:
                    try:
                        packet = os.read(fd, 65536)
                    except (BlockingIOError, InterruptedError):
                        break
                    except OSError:  # the device went away (the namespace was deleted)
                        break
                    if rng.random() < imp.loss:
                        self.dropped += 1
                        continue
                    self._seq += 1
                    at = now + imp.delay + rng.uniform(-imp.jitter, imp.jitter)
                    heapq.heappush(due, (at, self._seq, out, packet))
            now = time.monotonic()
            while due and due[0][0] <= now:
                _, _, out, packet = heapq.heappop(due)
                with contextlib.suppress(OSError):  # a full queue or a device gone: the packet is lost, as on a wire
                    os.write(out, packet)
                    self.carried += 1

    def close(self) -> None:
        self._stop = True
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")
        if self._thread is not None:
            self._thread.join(timeout=5)
        for fd in [*self._peer, self._wake_r, self._wake_w]:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._peer.clear()
