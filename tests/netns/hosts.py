"""Hosts on one machine: Linux network namespaces on a bridge, each its own network stack and address, so the
master, the workers and the target talk over real links (veth pairs) that a test can cut and heal.

    with Hosts(["srv", "master", "w1", "w2"]) as net:
        net.popen("srv", [...])           # a process inside the namespace
        net.address("srv")                # 10.81.x.y
        net.cut("w1"); net.heal("w1")     # the host's link down / up: a partition, then the heal

    Hosts(["srv", "w1"], impaired={"w1": Impairment(delay=0.02, jitter=0.005, loss=0.01)})  # a slow, lossy link

Needs root (CI runs as root). The names carry the test process's pid and the instance's number in it, so parallel
or leftover runs do not clash, nor do two tests of one process (the kernel tears a deleted namespace's devices down in
the background: a second test reusing a name found it still there, in CI); everything is removed on exit, whatever
happened, the veth pairs explicitly. Traffic stays inside the namespaces and the bridge.

Delay and loss are not `tc netem`: this machine's kernel has no queueing disciplines beyond the default (`tc qdisc
add ... netem` says "Specified qdisc kind is unknown"), so an impaired host's packets go through TUN devices and a
thread that delays and drops them (impaired_link.py).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

from tests.netns.impaired_link import Impairment, LinkPump, open_tun

__all__ = ["Hosts"]

_instances = itertools.count()


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=10)


class Hosts:
    def __init__(self, names: Sequence[str], impaired: Mapping[str, Impairment] | None = None) -> None:
        """`impaired`: hosts whose link delays and drops packets (impaired_link.py), each way."""
        # An interface name holds at most 15 characters: "lv" + pid (5) + "x" + instance (2) + "h" + host + suffix fits.
        tag = f"{os.getpid() % 100000}x{next(_instances) % 100}"
        self.bridge = f"lgb{tag}"
        self.ns = {n: f"lg{tag}-{n}" for n in names}
        self._veth = {n: f"lv{tag}h{i}" for i, n in enumerate(names)}
        # A /16 per test process keeps leftovers of a crashed run from answering for this one.
        net = 16 + (os.getpid() % 200)
        self._addr = {n: f"10.{net}.0.{i + 2}" for i, n in enumerate(names)}
        self._impaired = dict(impaired or {})
        # An impaired host's edge: the namespace that routes for it onto the bridge, with an address of its own.
        self._edge = {n: f"lg{tag}-{n}-edge" for n in self._impaired}
        self._edge_addr = {n: f"10.{net}.1.{i + 2}" for i, n in enumerate(self._impaired)}
        self._pump = LinkPump() if self._impaired else None
        self._procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Hosts:
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("link", "set", self.bridge, "up")
            for n, ns in self.ns.items():
                _ip("netns", "add", ns)
                _ip("-n", ns, "link", "set", "lo", "up")
                if n in self._impaired:
                    self._impaired_link(n)
                    continue
                self._bridge_port(n, ns, self._addr[n])
            if self._pump is not None:
                self._pump.start()
        except BaseException:
            self.close()
            raise
        return self

    def _bridge_port(self, n: str, ns: str, addr: str) -> str:
        """A veth from namespace `ns` onto the bridge, holding `addr`; the name of its end inside `ns`."""
        outside, inside = self._veth[n], self._veth[n] + "p"
        _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        _ip("link", "set", inside, "netns", ns)
        _ip("link", "set", outside, "master", self.bridge)
        _ip("link", "set", outside, "up")
        _ip("-n", ns, "addr", "add", f"{addr}/16", "dev", inside)
        _ip("-n", ns, "link", "set", inside, "up")
        return inside

    def _impaired_link(self, n: str) -> None:
        """Host `n` holds its address on a TUN device; the pump carries its packets to a TUN device in its edge
        namespace, which forwards them onto the bridge and answers ARP for the host's address there."""
        assert self._pump is not None
        edge, host_tun, edge_tun = self._edge[n], self._veth[n] + "t", self._veth[n] + "e"
        _ip("netns", "add", edge)
        _ip("-n", edge, "link", "set", "lo", "up")
        a, b = open_tun(host_tun), open_tun(edge_tun)
        self._pump.connect(a, b, self._impaired[n])
        _ip("link", "set", host_tun, "netns", self.ns[n])
        _ip("link", "set", edge_tun, "netns", edge)
        _ip("-n", self.ns[n], "addr", "add", f"{self._addr[n]}/16", "dev", host_tun)
        _ip("-n", self.ns[n], "link", "set", host_tun, "up")
        port = self._bridge_port(n, edge, self._edge_addr[n])
        _ip("-n", edge, "link", "set", edge_tun, "up")
        _ip("-n", edge, "route", "add", f"{self._addr[n]}/32", "dev", edge_tun)
        for key in ("net.ipv4.ip_forward=1", f"net.ipv4.conf.{port}.proxy_arp=1"):
            subprocess.run(["ip", "netns", "exec", edge, "sysctl", "-qw", key], check=True, timeout=10)

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def address(self, name: str) -> str:
        return self._addr[name]

    def popen(
        self,
        name: str,
        argv: Sequence[str],
        log: IO[bytes] | int | None = subprocess.DEVNULL,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> subprocess.Popen[bytes]:
        """``argv`` run inside host ``name``'s namespace (killed on exit if still running)."""
        p = subprocess.Popen(
            ["ip", "netns", "exec", self.ns[name], *argv],
            stdout=log,
            stderr=subprocess.STDOUT if log not in (None, subprocess.DEVNULL) else subprocess.DEVNULL,
            env=None if env is None else dict(env),
            cwd=cwd,
        )
        self._procs.append(p)
        return p

    def link_counts(self) -> tuple[int, int]:
        """Packets the impaired links carried and dropped so far (0, 0 without any)."""
        return (0, 0) if self._pump is None else (self._pump.carried, self._pump.dropped)

    def cut(self, name: str) -> None:
        """Host ``name`` loses its link: nothing in or out (its sockets stay open; TCP retransmits until the heal)."""
        _ip("link", "set", self._veth[name], "down")

    def heal(self, name: str) -> None:
        _ip("link", "set", self._veth[name], "up")

    def close(self) -> None:
        for p in self._procs:
            if p.poll() is None:
                p.kill()
        for p in self._procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)
        if self._pump is not None:
            self._pump.close()
        # Deleting one end of a veth pair deletes both, at once (a namespace's are torn down in the background).
        for veth in self._veth.values():
            subprocess.run(["ip", "link", "del", veth], capture_output=True, timeout=10)
        for ns in [*self.ns.values(), *self._edge.values()]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=10)
