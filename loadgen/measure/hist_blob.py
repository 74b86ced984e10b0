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

from loadgen.measure.hdr_layout import PAYLOAD_HEADER_SIZE

__all__ = ["canonical", "payload", "payload_layout"]

_V2_HEADER = struct.Struct(">II")
_PAYLOAD_HEADER = struct.Struct(">IIIIQQ")  # cookie, length, normalizing offset, digits, lowest, highest
_COMPRESSION_COOKIE = 0x1C849304  # hdrh's V2 cookies, word-size bits masked off
_ENCODING_COOKIE = 0x1C849303
_RAW_FIRST = b"\x1c"


def payload(blob: bytes | str) -> bytes | None:
    """The V2 payload (header and LEB128 counts) of a blob in any form loadgen writes: the wire's raw payload
    (`wire()`), `encode()`'s base64 of the compressed one, or base64 of the raw one (the wire's bytes written to
    JSON); None when it is none of them."""
    if isinstance(blob, bytes) and blob[:1] == _RAW_FIRST:
        raw = blob
    else:
        try:
            raw = binascii.a2b_base64(blob)  # (base64.b64decode without its wrapper: the same, non-strict)
        except (binascii.Error, ValueError):
            return None
    if len(raw) < 8:
        return None
    cookie, length = _V2_HEADER.unpack_from(raw)
    if cookie & ~0xF0 == _ENCODING_COOKIE:
        return raw if len(raw) >= PAYLOAD_HEADER_SIZE else None
    if cookie & ~0xF0 != _COMPRESSION_COOKIE or 8 + length > len(raw):
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
    (or base64 of it) is deflated and wrapped as `encode()` would."""
    raw = blob if isinstance(blob, bytes) and blob[:1] == _RAW_FIRST else None
    if raw is None:
        try:
            decoded = binascii.a2b_base64(blob)
        except (binascii.Error, ValueError):
            return blob
        if len(decoded) < 4 or _V2_HEADER.unpack_from(decoded + bytes(4))[0] & ~0xF0 != _ENCODING_COOKIE:
            return blob
        raw = decoded
    packed = zlib.compress(raw)
    return binascii.b2a_base64(_V2_HEADER.pack(_COMPRESSION_COOKIE | 0x10, len(packed)) + packed, newline=False)
