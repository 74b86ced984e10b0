"""geventhttpclient's private parser API, as loadgen/client/_http_parser.py uses it: an upgrade that renames or
drops any of it fails here, naming what is gone, instead of as wrong timings or stuck connections."""

from __future__ import annotations

import importlib

import geventhttpclient
import pytest

from loadgen.client._http_parser import RELIED_ON, HTTPParseError, LLHTTPResponse

_VERSION = getattr(geventhttpclient, "__version__", "?")
_SEE = "see loadgen/client/_http_parser.py"


@pytest.mark.parametrize(("module", "owner", "name"), RELIED_ON, ids=[".".join(filter(None, r)) for r in RELIED_ON])
def test_geventhttpclient_still_has_what_loadgen_relies_on(module: str, owner: str, name: str) -> None:
    where = f"{module}.{owner}" if owner else module
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        pytest.fail(f"geventhttpclient {_VERSION}: module {module} is gone ({e}); {_SEE}")
    obj = getattr(mod, owner, None) if owner else mod
    assert obj is not None, f"geventhttpclient {_VERSION}: {where} is gone; {_SEE}"
    if isinstance(obj, type) and not hasattr(obj, name):
        obj = obj()  # an instance attribute, set in __init__
    assert hasattr(obj, name), f"geventhttpclient {_VERSION}: {where}.{name} is gone; {_SEE}"


class _Recorder(LLHTTPResponse):
    def __init__(self) -> None:
        super().__init__()
        self.heads: list[int] = []
        self.body = bytearray()

    def _on_headers_complete(self) -> int | bool | None:
        result = super()._on_headers_complete()
        self.heads.append(self.status)
        return result

    def on_body(self, buf: bytearray) -> None:
        self.body += buf


def test_llhttp_still_calls_back_by_the_names_loadgen_overrides() -> None:
    r = _Recorder()
    r.feed_llhttp(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\nX-A: b\r\n\r\n")
    assert r.heads == [503], "llhttp no longer calls HTTPResponse._on_headers_complete"
    assert r.headers_complete and r.status == 503 and r.get("x-a") == "b"
    r.feed_llhttp(b"busy")
    assert bytes(r.body) == b"busy", "llhttp no longer calls HTTPResponse._on_body"
    assert r.message_complete and not r.should_close()


def test_dropped_trailing_data_closes_the_connection() -> None:
    r = LLHTTPResponse()
    r.feed_llhttp(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
    assert r.message_complete and not r.should_close()
    r.drop_trailing_data()
    assert r.should_close(), "HTTPResponse.should_close no longer reads _trailing_data_dropped"


def test_a_malformed_head_raises_http_parse_error() -> None:
    with pytest.raises(HTTPParseError):
        LLHTTPResponse().feed_llhttp(b"NOT HTTP AT ALL\r\n\r\n")
