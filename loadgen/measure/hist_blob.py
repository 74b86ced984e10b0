"""The forms one HDR histogram travels in, and the V2 payload they all hold.

- the wire's (`LatencyHistogram.wire`): hdrh's V2 payload itself (cookie, length, layout, then ZigZag LEB128
  counts), raw bytes inside msgpack;
- `encode()`'s (hdrh's own, portable to other HDR implementations): that payload deflated, behind the V2 header,
  in base64;
- the wire's bytes written to JSON (report/combine.py `aggregate.json`): base64 of the raw payload.

A raw payload starts with its cookie's first byte (0x1c), never a base64 character, so the forms cannot be taken
for one another.
"""

from __future__ import annotations

import binascii
import struct
import zlib
from typing import TypeGuard

from loadgen.measure.hdr_layout import PAYLOAD_HEADER_SIZE

__all__ = ["canonical", "is_raw", "payload", "payload_layout"]

_V2_HEADER = struct.Struct(">II")
_PAYLOAD_HEADER = struct.Struct(">IIIIQQ")  # cookie, length, normalizing offset, digits, lowest, highest
_COMPRESSION_COOKIE = 0x1C849304  # hdrh's V2 cookies, word-size bits masked off
_ENCODING_COOKIE = 0x1C849303
_RAW_FIRST = b"\x1c"


def is_raw(blob: object) -> TypeGuard[bytes]:
    """Whether `blob` is the wire's raw payload (bytes starting with the cookie's first byte)."""
    return isinstance(blob, bytes) and blob[:1] == _RAW_FIRST


def _unwrapped(blob: bytes | str) -> bytes | None:
    """The blob's bytes: itself when raw, else its base64 decoded; None when it is neither."""
    if is_raw(blob):
        return blob
    try:
        return binascii.a2b_base64(blob)  # (base64.b64decode without its wrapper: the same, non-strict)
    except (binascii.Error, ValueError):
        return None


def _cookie(raw: bytes) -> int | None:
    """The V2 cookie of unwrapped bytes, word-size bits masked off; None when too short to hold the V2 header."""
    return _V2_HEADER.unpack_from(raw)[0] & ~0xF0 if len(raw) >= _V2_HEADER.size else None


def payload(blob: bytes | str) -> bytes | None:
    """The V2 payload (header and LEB128 counts) of a blob in any form loadgen writes: the wire's raw payload
    (`wire()`), `encode()`'s base64 of the compressed one, or base64 of the raw one (the wire's bytes written to
    JSON); None when it is none of them."""
    raw = _unwrapped(blob)
    if raw is None:
        return None
    cookie = _cookie(raw)
    if cookie == _ENCODING_COOKIE:
        return raw if len(raw) >= PAYLOAD_HEADER_SIZE else None
    if cookie != _COMPRESSION_COOKIE:
        return None
    length = _V2_HEADER.unpack_from(raw)[1]
    if 8 + length > len(raw):
        return None
    try:
        return zlib.decompress(raw[8 : 8 + length])
    except zlib.error:
        return None


def payload_layout(data: bytes) -> tuple[int, int, int, int]:
    """A payload's (normalizing offset, lowest, highest, digits): its bucket layout, as `Layout.key` after the
    offset."""
    _, _, offset, digits, lowest, highest = _PAYLOAD_HEADER.unpack_from(data)
    return offset, lowest, highest, digits


def canonical(blob: bytes | str) -> bytes | str:
    """`blob` in hdrh's own form (base64 of the compressed payload), for hdrh's decoder: the wire's raw payload
    (or base64 of it) is deflated and wrapped as `encode()` would; anything else as it is (hdrh says what is
    wrong)."""
    raw = _unwrapped(blob)
    if raw is None or _cookie(raw) != _ENCODING_COOKIE:
        return blob
    packed = zlib.compress(raw)
    return binascii.b2a_base64(_V2_HEADER.pack(_COMPRESSION_COOKIE | 0x10, len(packed)) + packed, newline=False)
