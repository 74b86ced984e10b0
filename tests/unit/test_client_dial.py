"""The dialer keeps what connections share (resolved names, TLS contexts) on itself, not in module globals: two
dialers share nothing, one dialer resolves a name once per TTL and loads a trust store once."""

from __future__ import annotations

import socket
import ssl
from pathlib import Path
from typing import Any

import pytest

from loadgen.client import dial
from loadgen.client.dial import Dialer


def test_a_trust_setting_is_loaded_once_per_dialer() -> None:
    d = Dialer()
    ctx = d.tls_context(None, True)
    assert d.tls_context(None, True) is ctx and ctx.verify_mode == ssl.CERT_REQUIRED
    loose = d.tls_context(None, False)
    assert loose is not ctx and loose.verify_mode == ssl.CERT_NONE and not loose.check_hostname
    assert Dialer().tls_context(None, True) is not ctx  # nothing shared between dialers


def test_a_trust_store_that_fails_to_load_is_not_kept(tmp_path: Path) -> None:
    d = Dialer()
    missing = str(tmp_path / "ca.pem")
    for _ in range(2):  # raised each time: the file may appear later
        with pytest.raises(OSError):
            d.tls_context(missing, True)


def test_names_are_resolved_once_per_ttl_and_per_dialer(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, int]] = []

    def getaddrinfo(host: str, port: int, *_: Any) -> list[tuple[Any, ...]]:
        calls.append((host, port))
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]

    monkeypatch.setattr(dial.gsocket, "getaddrinfo", getaddrinfo)
    d = Dialer()
    first = d._resolve("example.test", 80)
    assert d._resolve("example.test", 80) == first == [(socket.AF_INET, socket.SOCK_STREAM, 6, ("127.0.0.1", 80))]
    d._resolve("example.test", 81)
    assert calls == [("example.test", 80), ("example.test", 81)]
    Dialer()._resolve("example.test", 80)
    assert len(calls) == 3
    now = dial.time.monotonic()
    monkeypatch.setattr(dial.time, "monotonic", lambda: now + dial._DNS_TTL_S + 1)
    d._resolve("example.test", 80)
    assert len(calls) == 4  # expired


def test_ip_literals_need_no_resolver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dial.gsocket, "getaddrinfo", lambda *a: pytest.fail("resolved an IP literal"))
    d = Dialer()
    assert d._resolve("127.0.0.1", 8) == [(socket.AF_INET, socket.SOCK_STREAM, 0, ("127.0.0.1", 8))]
    assert d._resolve("::1", 8)[0][0] == socket.AF_INET6
