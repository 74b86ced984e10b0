"""`quality:`: compare each variant's replies with the baseline's for the same requests (report/quality.py).

The run then keeps a bounded sample of replies (measure/outputs.py): a request whose reply the sample would keep, or
that carries a reference answer, reads its text on the Python path rather than the C fast path (a little more client
CPU per chunk); the sample rises past the others once it holds ~500 per variant. The comparison means something only
when decoding is greedy and seeded in every variant (`extra_body: {temperature: 0, seed: ...}`): sampled replies
differ between two runs of the same deployment.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Quality"]


class Quality(BaseModel):
    """What the comparison of outputs with the baseline's measures."""

    model_config = ConfigDict(extra="forbid")

    first_k: int = Field(
        default=64,
        ge=1,
        le=1024,
        description="Agreement is over the first k tokens of each reply, position by position (tokens: the "
        "scenario's local tokenizer, else whitespace-separated words).",
    )
