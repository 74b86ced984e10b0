"""Types of loadgen.measure._hist_walk, the exporter's one-pass histogram walk (loadgen/measure/_hist_walk.c).
`counts`, `ends`, `median`: anything with the buffer protocol over 8-byte integers (numpy int64 arrays here)."""

from collections.abc import Sequence

def walk(
    counts: object, lo: int, hi: int, ends: object, median: object, ranks: Sequence[int]
) -> tuple[list[int], int, int, list[int]]: ...
