"""hdrhistogram's private internals that `histogram` uses, in one place (written against hdrhistogram 0.10.x).

The fast paths in `histogram` skip hdrh's per-value Python: they read and write an `HdrHistogram`'s counts array and
its total / min / max bookkeeping directly, walk the counts with its index helpers, and call its C extension
(`pyhdrh`) to decode a wire blob into a plain array and add arrays. None of that is hdrh's documented API, so an
upgrade may rename or change any of it. Everything of it that loadgen touches is named here, and `check()` fails with
the name of what changed (tests/unit/test_histogram_hdr_internals.py runs it, and so does `histogram` on first use).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import pyhdrh
from hdrh import codec
from hdrh.histogram import HdrHistogram

__all__ = [
    "ATTRIBUTES",
    "METHODS",
    "HdrInternalsChanged",
    "add_counts",
    "check",
    "counts",
    "counts_len",
    "decode_counts",
    "encode_payload",
    "index_for",
    "index_function",
    "layout_magnitudes",
    "note_recorded",
    "recorded",
    "walkers",
]

# Plain attributes of an HdrHistogram read (and, for the bookkeeping, written) here.
ATTRIBUTES = (
    "counts",
    "counts_len",
    "total_count",
    "min_value",
    "max_value",
    "unit_magnitude",
    "sub_bucket_half_count_magnitude",
)
# Methods called here (the first two are private: leading underscore).
METHODS = (
    "_counts_index_for",
    "_hdr_median_equiv_value",
    "get_value_from_index",
    "get_highest_equivalent_value",
)


class HdrInternalsChanged(RuntimeError):
    """An hdrhistogram upgrade changed something loadgen's fast paths rely on."""


def _changed(what: str, how: str) -> HdrInternalsChanged:
    return HdrInternalsChanged(
        f"hdrhistogram internals changed: {what} {how}. loadgen/measure/_hdr_internals.py wraps the private hdrh API "
        "that loadgen/measure/histogram.py uses; adapt it to this hdrhistogram version or pin the old one."
    )


def check(h: Any = None) -> None:
    """Every attribute, method and C entry point used here is present and behaves as assumed; else
    `HdrInternalsChanged` naming it."""
    if h is None:
        h = HdrHistogram(1, 3_600_000_000, 3)
    for name in ATTRIBUTES:
        if not hasattr(h, name):
            raise _changed(f"HdrHistogram.{name}", "is gone")
    for name in METHODS:
        if not callable(getattr(h, name, None)):
            raise _changed(f"HdrHistogram.{name}()", "is gone")
    for name in ("decode", "encode", "add_array"):
        if not callable(getattr(pyhdrh, name, None)):
            raise _changed(f"pyhdrh.{name}()", "is gone")
    if not isinstance(getattr(codec, "payload_header_size", None), int):
        raise _changed("hdrh.codec.payload_header_size", "is gone or not an int")
    arr = h.counts
    if not isinstance(arr, ctypes.Array) or ctypes.sizeof(arr._type_) != 8 or len(arr) != h.counts_len:
        raise _changed("HdrHistogram.counts", f"is no longer a ctypes array of counts_len 8-byte counts ({type(arr)})")
    for name in ("total_count", "min_value", "max_value", "counts_len"):
        if not isinstance(getattr(h, name), int):
            raise _changed(f"HdrHistogram.{name}", f"is no longer an int ({type(getattr(h, name))})")


def layout_magnitudes(h: HdrHistogram) -> tuple[int, int]:
    """(unit_magnitude, sub_bucket_half_count_magnitude): what the inline bucket index in `histogram` assumes."""
    return h.unit_magnitude, h.sub_bucket_half_count_magnitude


def counts(h: HdrHistogram) -> ctypes.Array[Any]:
    """The counts array itself (ctypes, one 8-byte count per bucket index), to add to in place."""
    return h.counts


def counts_len(h: HdrHistogram) -> int:
    return int(h.counts_len)


def index_for(h: HdrHistogram, value: int) -> int:
    """The counts index of a value (µs)."""
    return int(h._counts_index_for(value))


def index_function(h: HdrHistogram) -> Callable[[int], int]:
    """`index_for` of this histogram's layout, inline: hdrh's `_counts_index_for` is ~3 µs of Python method calls,
    this the same arithmetic in one function (tests/unit/test_histogram_hdr_internals.py checks they agree)."""
    unit, half = layout_magnitudes(h)
    mask = ((1 << (half + 1)) - 1) << unit  # hdrh's sub_bucket_mask
    shift0, half_count = unit + half + 1, 1 << half

    def index(value: int) -> int:
        b = (value | mask).bit_length() - shift0
        return ((b + 1) << half) + (value >> (b + unit)) - half_count

    return index


def recorded(h: HdrHistogram) -> tuple[int, int, int]:
    """(total count, min value, max value) as hdrh keeps them."""
    return h.total_count, h.min_value, h.max_value


def note_recorded(h: HdrHistogram, n: int, lo: int, hi: int) -> None:
    """After adding `n` counts straight into `counts(h)`, values `lo` … `hi`: hdrh's total, min and max brought along
    (what `record_value` does besides the count)."""
    h.total_count += n
    if lo < h.min_value:
        h.min_value = lo
    if hi > h.max_value:
        h.max_value = hi


def walkers(h: HdrHistogram) -> tuple[Callable[[int], int], Callable[[int], int], Callable[[int], int]]:
    """Bound (value from index, median equivalent value, highest equivalent value), for one pass over the counts."""
    return h.get_value_from_index, h._hdr_median_equiv_value, h.get_highest_equivalent_value


def decode_counts(payload: bytes, into: ctypes.Array[Any], length: int) -> tuple[int, int, int]:
    """Decode a V2 payload's counts (after zlib; header included) into the first `length` slots of `into`, which must
    be zero there; (total count, lowest nonzero index, highest nonzero index)."""
    res = pyhdrh.decode(payload, codec.payload_header_size, ctypes.addressof(into), length, 8)
    return res["total"], res["min_nonzero_index"], res["max_nonzero_index"]


def encode_payload(h: HdrHistogram, header: bytes) -> bytes:
    """hdrh's V2 payload of `h` before zlib (what `HdrPayload.compress` deflates): `header` (the layout's 40-byte
    payload header, as hdrh writes it) with its length set, then the ZigZag LEB128 counts up to the highest value's
    slot, encoded by hdrh's C."""
    n = int(h._counts_index_for(h.max_value)) + 1 if h.total_count else 0
    cap = 9 * n + 16  # a word is at most 9 bytes
    buf = ctypes.create_string_buffer(cap)
    used = pyhdrh.encode(ctypes.addressof(h.counts), n, 8, ctypes.addressof(buf), cap)
    return header[:4] + used.to_bytes(4, "big") + header[8:] + buf.raw[:used]


def add_counts(h: HdrHistogram, src: ctypes.Array[Any], lo: int, n: int) -> None:
    """counts(h)[lo : lo + n] += src[lo : lo + n], in C."""
    pyhdrh.add_array(ctypes.addressof(h.counts) + 8 * lo, ctypes.addressof(src) + 8 * lo, n, 8)
