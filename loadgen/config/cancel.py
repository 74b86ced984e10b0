"""Requests the client abandons mid-reply (`traffic.cancel`), as users who close the tab: a share of requests,
each given up after a drawn number of streamed tokens or a drawn time.

Which requests, and where each is given up, are drawn from the request's identity (stream, index, session turn)
and the scenario's seed, never from a shared random stream: every variant gives up the same requests at the same
point, so the variants stay paired request for request, whatever the workers or the order of completion
(`CancelPlan.draw`).
"""

from __future__ import annotations

import hashlib
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from loadgen.config.errors import SubpathIssues
from loadgen.config.types import Duration, TokenRange

__all__ = ["Cancel", "CancelPlan"]


class Cancel(BaseModel):
    """A share of requests the client gives up on: after a drawn count of streamed tokens, or a drawn time."""

    model_config = ConfigDict(extra="forbid")

    share: float = Field(
        gt=0, le=1, allow_inf_nan=False, description="Share of requests abandoned (0 < share <= 1), e.g. 0.1."
    )
    after_tokens: TokenRange | None = Field(
        default=None,
        description="[min, max]: each abandoned request is given up once this many output tokens (drawn uniformly, "
        "per request) have streamed in; streamed variants only. Give this or `after`.",
    )
    after: tuple[Duration, Duration] | None = Field(
        default=None,
        description="[min, max] seconds (or e.g. [0.2s, 2s]): each abandoned request is given up this long "
        "(drawn uniformly, per request) after it started (a new connection's connect included), whatever it "
        "received by then; streamed or whole replies. Give this or `after_tokens`.",
    )

    @model_validator(mode="after")
    def _check(self) -> Cancel:
        if (self.after_tokens is None) == (self.after is None):
            raise SubpathIssues([(("after_tokens",), "give exactly one of after_tokens or after")])
        if self.after is not None:
            lo, hi = self.after
            if not 0 < lo <= hi:
                raise SubpathIssues([(("after",), f"expected [min, max] with 0 < min <= max, got [{lo:g}, {hi:g}]")])
        return self


def _unit(seed: int, key: str, what: str) -> float:
    """A uniform draw in [0, 1) from the request's identity: the same on every worker, run and variant."""
    digest = hashlib.blake2b(f"{seed}/cancel/{what}/{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


class CancelPlan:
    """The scenario's `traffic.cancel` and seed: whether a request is given up, and where."""

    __slots__ = ("_cancel", "_seed")

    def __init__(self, cancel: Cancel, seed: int) -> None:
        self._cancel = cancel
        self._seed = seed

    def draw(self, stream: int, index: int, turn: int) -> tuple[str, Any] | None:
        """("tokens", n) or ("seconds", s) for a request to give up, None for one to let finish."""
        key = f"{stream}-{index}-{turn}"
        c = self._cancel
        if _unit(self._seed, key, "share") >= c.share:
            return None
        u = _unit(self._seed, key, "point")
        if c.after_tokens is not None:
            lo, hi = c.after_tokens
            return "tokens", lo + min(int(u * (hi - lo + 1)), hi - lo)
        assert c.after is not None
        lo_s, hi_s = c.after
        return "seconds", lo_s + u * (hi_s - lo_s)
