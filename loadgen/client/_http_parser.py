"""geventhttpclient's C (llhttp) response parser: the one module that touches its private API.

The streaming connection (connection.py) parses response heads, and the bodies it does not de-chunk itself, with
geventhttpclient's llhttp binding, fed read by read. That binding's Python face is half private: the parser lives in
`geventhttpclient._parser`, it calls back into the response object by private method names, and "close this
connection after the response" is a private flag. Everything loadgen relies on is named in `RELIED_ON` below and
checked by tests/unit/test_client_http_parser.py, which fails naming the attribute when an upgrade changes it
(pyproject.toml pins the major version).
"""

from __future__ import annotations

from geventhttpclient._parser import HTTPResponseParser
from geventhttpclient.response import HTTPParseError, HTTPResponse

__all__ = ["RELIED_ON", "HTTPParseError", "LLHTTPResponse"]

# (module, class or "" for the module itself, attribute): what this module uses of geventhttpclient, public or not.
# `_trailing_data_dropped` and `headers_complete` / `message_complete` are instance attributes set in __init__.
RELIED_ON: tuple[tuple[str, str, str], ...] = (
    ("geventhttpclient._parser", "", "HTTPResponseParser"),
    ("geventhttpclient._parser", "", "HTTPParseError"),
    ("geventhttpclient._parser", "HTTPResponseParser", "feed"),
    ("geventhttpclient.response", "", "HTTPResponse"),
    ("geventhttpclient.response", "HTTPResponse", "_on_headers_complete"),
    ("geventhttpclient.response", "HTTPResponse", "_on_body"),
    ("geventhttpclient.response", "HTTPResponse", "_trailing_data_dropped"),
    ("geventhttpclient.response", "HTTPResponse", "headers_complete"),
    ("geventhttpclient.response", "HTTPResponse", "message_complete"),
    ("geventhttpclient.response", "HTTPResponse", "get"),
    ("geventhttpclient.response", "HTTPResponse", "get_code"),
    ("geventhttpclient.response", "HTTPResponse", "should_close"),
)


class LLHTTPResponse(HTTPResponse):
    """A response parsed by llhttp, with public names for what loadgen needs of it.

    `status` is the status code once the head is complete (0 before); `on_body(buf)` receives every piece of body
    llhttp parses; `feed_llhttp(data)` parses one read; `drop_trailing_data()` marks the connection unusable after
    this response. Raises `HTTPParseError` on a malformed response."""

    def __init__(self) -> None:
        super().__init__(method="POST")
        self.status = 0

    # `feed_llhttp(data)`: the C parser's own feed, not HTTPResponse.feed, whose wrapper only recovers HEAD
    # responses (loadgen sends POST) and costs a Python frame per read.
    feed_llhttp = HTTPResponseParser.feed

    def drop_trailing_data(self) -> None:
        """Bytes followed the response that nobody asked for: `should_close()` is True from now on."""
        self._trailing_data_dropped = True

    def on_body(self, buf: bytearray) -> None:
        """A piece of body parsed by llhttp (override: the default drops it)."""

    # llhttp calls these by name.
    def _on_headers_complete(self) -> int | bool | None:
        result = super()._on_headers_complete()
        self.status = self.get_code()
        return result

    def _on_body(self, buf: bytearray) -> None:
        self.on_body(buf)
