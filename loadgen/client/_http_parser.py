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
from geventhttpclient.response import HEADER_STATE_DONE, HTTPParseError, HTTPResponse

__all__ = ["RELIED_ON", "HTTPParseError", "LLHTTPResponse"]

# (module, class or "" for the module itself, attribute): what this module uses of geventhttpclient, public or not.
# `_trailing_data_dropped` and `headers_complete` / `message_complete` are instance attributes set in __init__.
RELIED_ON: tuple[tuple[str, str, str], ...] = (
    ("geventhttpclient._parser", "", "HTTPResponseParser"),
    ("geventhttpclient._parser", "", "HTTPParseError"),
    ("geventhttpclient._parser", "HTTPResponseParser", "feed"),
    ("geventhttpclient._parser", "HTTPResponseParser", "get_code"),
    ("geventhttpclient._parser", "HTTPResponseParser", "get_http_version"),
    ("geventhttpclient._parser", "HTTPResponseParser", "should_keep_alive"),
    ("geventhttpclient.response", "", "HTTPResponse"),
    ("geventhttpclient.response", "HTTPResponse", "_on_headers_complete"),
    ("geventhttpclient.response", "HTTPResponse", "_on_body"),
    ("geventhttpclient.response", "HTTPResponse", "_trailing_data_dropped"),
    ("geventhttpclient.response", "HTTPResponse", "headers_complete"),
    ("geventhttpclient.response", "HTTPResponse", "message_complete"),
    ("geventhttpclient.response", "HTTPResponse", "get"),
    ("geventhttpclient.response", "HTTPResponse", "get_code"),
    ("geventhttpclient.response", "HTTPResponse", "should_close"),
    # `take_head` leaves what llhttp's callbacks leave after a head (response.py `_on_message_begin`,
    # `_on_status`, `_on_header_*`, `_flush_header`, `_on_headers_complete`).
    ("geventhttpclient.response", "HTTPResponse", "message_begun"),
    ("geventhttpclient.response", "HTTPResponse", "status_message"),
    ("geventhttpclient.response", "HTTPResponse", "_headers_index"),
    ("geventhttpclient.response", "HTTPResponse", "_header_state"),
    ("geventhttpclient.response", "HTTPResponse", "_header_position"),
    ("geventhttpclient.response", "", "HEADER_STATE_DONE"),
    ("geventhttpclient.header", "Headers", "add"),  # and its storage, which test_head_parity.py holds to llhttp's
)


class LLHTTPResponse(HTTPResponse):
    """A response parsed by llhttp, with public names for what loadgen needs of it.

    `status` is the status code once the head is complete (0 before); `on_body(buf)` receives every piece of body
    llhttp parses; `feed_llhttp(data)` parses one read; `drop_trailing_data()` marks the connection unusable after
    this response. Raises `HTTPParseError` on a malformed response.

    `take_head(...)`: a head read elsewhere (loadgen/protocol/_wire.c `parse_head`, which takes only a chunked
    `HTTP/1.1 200` head llhttp reads the same) leaves the state llhttp's callbacks leave after it; llhttp then parses
    nothing of this response, and what it would answer from its own state (code, version, keep-alive) is answered
    here."""

    def __init__(self) -> None:
        super().__init__(method="POST")
        self.status = 0
        self._keep_alive: bool | None = None  # the head was read by `take_head`: whether the connection stays open

    def take_head(
        self, reason: str | None, keep_alive: bool, fields: list[tuple[str, tuple[str, str]]], unique: bool
    ) -> None:
        """A complete chunked `HTTP/1.1 200` head, read elsewhere: `reason` (None: no reason phrase, not even
        its space), `keep_alive` (no `Connection: close`), the header lines in order as (lowercased name, (name,
        value)), `unique` when no name repeats. llhttp must not be fed."""
        self.message_begun = True
        self.status_message = reason
        index = self._headers_index
        if unique:  # Headers' own storage (header.py `add`: lowercased name -> (name, value)), in one update
            dict.update(index, fields)
        else:
            add = index.add
            for _, (name, value) in fields:
                add(name, value)
        self._header_position += len(fields)
        self._header_state = HEADER_STATE_DONE
        self.headers_complete = True
        self.status = 200
        self._keep_alive = keep_alive

    def get_code(self) -> int:
        return self.status if self._keep_alive is not None else HTTPResponseParser.get_code(self)

    def get_http_version(self) -> str:
        return "HTTP/1.1" if self._keep_alive is not None else HTTPResponseParser.get_http_version(self)

    def should_keep_alive(self) -> bool:
        keep_alive = self._keep_alive
        return HTTPResponseParser.should_keep_alive(self) if keep_alive is None else keep_alive

    def should_close(self) -> bool:
        keep_alive = self._keep_alive
        if keep_alive is None:
            return super().should_close()
        return self._trailing_data_dropped or not self.message_complete or not keep_alive

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
        self.status = HTTPResponseParser.get_code(self)
        return result

    def _on_body(self, buf: bytearray) -> None:
        self.on_body(buf)
