"""Types of loadgen.measure._hist_merge, the master's merge of a wire histogram (loadgen/measure/_hist_merge.c).
A target's `counts`: anything with the writable buffer protocol over 8-byte integers (a ctypes int64 array), or None
while the histogram holds no window."""

from collections.abc import Sequence

def merge_v2(
    blob: bytes | str,
    lowest: int,
    highest: int,
    digits: int,
    counts_len: int,
    targets: Sequence[tuple[object | None, int]],
) -> tuple[int, int, int, int]: ...
