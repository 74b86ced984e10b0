"""Uniform draws read straight from a hash of a request's identity, so every worker and every replay draws the same.

A request's draws come from a BLAKE2b digest of (seed, stream, index) read as 64-bit integers (`DRAWS`: six of them
in one digest); these map such a draw onto what is drawn: an index by weight (`pick`), a number below n (`below`),
distinct indices without replacement (`draw_distinct`). `stable_int` is the same hash for the draws made once per
sampler (system prompts, documents, a stream's start in a dataset). Seeding a `random.Random` per request cost more
than everything else the sampler does per request.
"""

from __future__ import annotations

import hashlib
import struct
from bisect import bisect_right

__all__ = ["DRAWS", "below", "draw_distinct", "pick", "stable_int"]

# Six independent 64-bit draws per request, read from one digest.
DRAWS = struct.Struct(">6Q")
_TWO_53 = float(1 << 53)


def stable_int(*parts: object) -> int:
    """A 128-bit integer from `parts`' text: the same in every process (Python's hash() is salted per process;
    workers and replays must agree, so this hashes the text instead)."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=16).digest()
    return int.from_bytes(digest, "big")


def pick(draw: int, cum_weights: list[float]) -> int:
    """Index drawn with probability proportional to weight, given cumulative weights."""
    # 53 bits keep the fraction exactly below 1; the min() guards the rounding of the product.
    return min(bisect_right(cum_weights, (draw >> 11) / _TWO_53 * cum_weights[-1]), len(cum_weights) - 1)


def below(draw: int, n: int) -> int:
    """Map a uniform 64-bit draw to [0, n) by multiply-shift (bias below n / 2**64)."""
    return (draw * n) >> 64


def draw_distinct(draws: list[int], n: int, k: int, weights: list[float], cum: list[float]) -> list[int]:
    """``k`` distinct indices below ``n``, drawn one after another without replacement by weight.

    Each draw is a point in the weights still left (the total minus those drawn), mapped back onto the full
    cumulative line by stepping over the intervals already drawn: exact, with no rejection loop.
    """
    chosen: list[int] = []
    left = cum[-1]
    for draw in draws[:k]:
        u = (draw >> 11) / _TWO_53 * left
        for c in sorted(chosen):
            if cum[c] - weights[c] <= u:
                u += weights[c]
        j = min(bisect_right(cum, u), n - 1)
        while j in chosen:  # only on a rounding edge: take the next free one
            j = (j + 1) % n
        chosen.append(j)
        left -= weights[j]
    return chosen
