"""Types of loadgen.measure._hist_merge, the master's merge of a wire histogram (loadgen/measure/_hist_merge.c).
A target's `counts`: anything with the writable buffer protocol over 8-byte integers (a ctypes int64 array), or None
while the histogram holds no window."""

from collections.abc import Callable, Sequence
from typing import Any, Literal

def merge_v2(
    blob: bytes | str,
    lowest: int,
    highest: int,
    digits: int,
    counts_len: int,
    targets: Sequence[tuple[object | None, int]],
) -> tuple[int, int, int, int]: ...
def merge_many(
    items: list[Any],  # (blob, a sequence of LatencyHistogram) each
    start: int,
    lay: object,
    lowest: int,
    highest: int,
    digits: int,
    counts_len: int,
    lowest_at: object,
    highest_at: object,
) -> int: ...
def wire_items(
    targets: dict[str, Any], hists: object, alias: object, make: Callable[[str], Any]
) -> list[tuple[Any, Any]] | None: ...
def add_fields(obj: object, wire: dict[str, Any], kinds: dict[str, int], add_counts: Callable[..., None]) -> None: ...
def merge_bin_pairs(hist: object, flat: list[Any]) -> bool: ...
def merge_bin_row(obj: object, names: tuple[str, ...], is_max: tuple[bool, ...], row: object) -> bool: ...
def admit_rows(
    keys: object, columns: list[Any], ncolumns: int, width: int, level: int, seen: list[int]
) -> tuple[int, bytes, list[bytes]] | None: ...
def merge_stats(
    obj: object,
    wire: dict[str, Any],
    kinds: dict[str, int],
    add_counts: Callable[..., None],
    make: Callable[[str], Any],
    use_alias: bool,
    lay: object,
    lowest: int,
    highest: int,
    digits: int,
    counts_len: int,
    lowest_at: object,
    highest_at: object,
) -> None | tuple[list[Any], int] | Literal[False]: ...
def merge_rows(
    into: dict[Any, Any],
    rows: list[Any],
    start: int,
    nkey: int,
    new: Callable[[], Any],
    kinds: dict[str, int],
    add_counts: Callable[..., None],
    use_alias: bool,
    lay: object,
    lowest: int,
    highest: int,
    digits: int,
    counts_len: int,
    lowest_at: object,
    highest_at: object,
) -> tuple[int, list[Any] | None, int | None]: ...
