"""Fault injection: per-variant knobs that make the simulator misbehave the way real inference targets do.

The load generator has to tell a 429 from a reset from a truncated stream; these knobs produce each failure on
demand, and the server logs every injected fault to the truth log so a test can compare the client's
classification with what actually happened.

Draws come from a per-variant RNG seeded from the run's seed and kept apart from the engine's speculative-decoding
RNG, so turning faults on does not change token timings, and the k-th completion request of a variant always gets
the same decisions for the same seed and knobs. Each request consumes a fixed number of draws (whatever fires), so
changing one knob does not reshuffle the others.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, fields

# Fault names as they appear in the truth log (``"fault"``) and in ``loadgen_sim_faults_total{fault=...}``.
HTTP_500 = "http_500"
HTTP_429 = "http_429"
HTTP_503 = "http_503"
JSON_ERROR_ON_STREAM = "json_error_on_stream"
RESET = "reset"
CUT = "cut"
ERROR_EVENT = "error_event"
MALFORMED = "malformed"
STALL = "stall"
SLOW_HEADERS = "slow_headers"
FAULT_NAMES: tuple[str, ...] = (
    HTTP_500, HTTP_429, HTTP_503, JSON_ERROR_ON_STREAM, RESET, CUT, ERROR_EVENT, MALFORMED, STALL, SLOW_HEADERS,
)  # fmt: skip

#: Knobs that are durations in seconds; every other knob is a probability per request.
SECONDS_KNOBS = frozenset({"stall_s", "slow_headers_s"})

# Knobs answered instead of the normal response: at most one fires per request, so their rates must sum to <= 1
# and each is then exactly the fraction of requests that get it.
_REPLY_GROUP = (("error_rate", HTTP_500), ("rate_429", HTTP_429), ("rate_503", HTTP_503))
_REPLY_STREAM_ONLY = ("json_error_on_stream_rate", JSON_ERROR_ON_STREAM)
# Knobs that end a stream early: likewise exclusive, since a stream can only end once.
_END_GROUP = (("reset_rate", RESET), ("cut_rate", CUT), ("error_event_rate", ERROR_EVENT))


class UnknownFaultKnobError(ValueError):
    """A knob name that ``FaultSpec`` does not have; the message lists the known ones."""

    def __init__(self, knob: str) -> None:
        super().__init__(f"unknown fault knob {knob!r}; known knobs: {', '.join(fault_knobs())}")
        self.knob = knob


@dataclass(frozen=True, slots=True)
class FaultSpec:
    """Fault knobs of one variant; all off by default. ``*_rate`` are probabilities per completion request."""

    #: Reply HTTP 500 with a JSON error body in the route's shape (OpenAI, TGI or Ollama).
    error_rate: float = 0.0
    #: Reply HTTP 429 with ``Retry-After: 1``.
    rate_429: float = 0.0
    #: Reply HTTP 503.
    rate_503: float = 0.0
    #: Streaming requests only: reply HTTP 400 with a JSON ``{"error": ...}`` body instead of SSE (llama.cpp style).
    json_error_on_stream_rate: float = 0.0
    #: After a random number (>= 1) of token chunks, reset the connection (TCP RST). Non-streamed requests are
    #: reset without any response bytes.
    reset_rate: float = 0.0
    #: Streaming only: after some token chunks, end the chunked body cleanly but with no end of stream (no
    #: ``[DONE]`` / finish_reason, no TGI ``generated_text``, no Ollama ``done: true`` line).
    cut_rate: float = 0.0
    #: Streaming only: after some token chunks, send the route's mid-stream error (OpenAI ``data: {"error": {...}}``
    #: then ``data: [DONE]``; TGI ``data:{"error", "error_type"}``; Ollama an ``{"error"}`` line).
    error_event_rate: float = 0.0
    #: Streaming only: insert one truncated JSON event before a token chunk; the stream then continues normally.
    malformed_rate: float = 0.0
    #: Streaming only: after the first token chunk, send nothing for ``stall_s`` seconds (tokens keep coming from
    #: the engine and go out together when the stall ends).
    stall_rate: float = 0.0
    stall_s: float = 0.0
    #: Delay the head of every completion response by this many seconds (the engine starts immediately).
    slow_headers_s: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ValueError(f"fault knob {f.name} must be a finite number, got {value!r}")
            if f.name in SECONDS_KNOBS:
                if value < 0:
                    raise ValueError(f"fault knob {f.name} is in seconds and must be >= 0, got {value}")
            elif not 0.0 <= value <= 1.0:
                raise ValueError(f"fault knob {f.name} is a probability and must be within [0, 1], got {value}")
        for group in ((*_REPLY_GROUP, _REPLY_STREAM_ONLY), _END_GROUP):
            total = sum(getattr(self, knob) for knob, _ in group)
            if total > 1.0 + 1e-9:
                names = " + ".join(knob for knob, _ in group)
                raise ValueError(f"{names} = {total:g}: at most one of these fires per request, so they must sum <= 1")
        if self.stall_rate > 0 and self.stall_s <= 0:
            raise ValueError("fault knob stall_rate needs stall_s > 0 (the length of the stall in seconds)")

    @classmethod
    def from_dict(cls, knobs: Mapping[str, float]) -> FaultSpec:
        """Build from ``{knob: value}``; an unknown knob raises ``UnknownFaultKnobError``."""
        known = set(fault_knobs())
        for knob in knobs:
            if knob not in known:
                raise UnknownFaultKnobError(knob)
        return cls(**{k: float(v) for k, v in knobs.items()})

    @property
    def enabled(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))

    def draw(self, rng: random.Random, max_tokens: int, stream: bool) -> FaultPlan | None:
        """Decide the faults of one completion request; ``None`` when none applies."""
        # Always six draws, in this order, whatever fires: the k-th request's decisions depend on the seed, k and
        # the knobs only.
        u_reply, u_end, u_malformed, u_stall, u_end_at, u_malformed_at = (rng.random() for _ in range(6))
        reply = _pick(u_reply, (*_REPLY_GROUP, _REPLY_STREAM_ONLY), self)
        if reply == JSON_ERROR_ON_STREAM and not stream:
            reply = None
        end = _pick(u_end, _END_GROUP, self)
        if end is not None and end != RESET and not stream:
            end = None
        malformed = stream and u_malformed < self.malformed_rate
        stall = stream and u_stall < self.stall_rate
        if reply is None and end is None and not malformed and not stall and self.slow_headers_s <= 0:
            return None
        return FaultPlan(
            reply=reply,
            end=end,
            # In [1, max_tokens - 1] so the stream is cut before its natural end (a 1-token request still gets
            # its one chunk first).
            end_at=1 + int(u_end_at * max(max_tokens - 1, 1)),
            # In [1, max_tokens]: the bad event goes before a real chunk, so the stream always continues after it.
            malformed_at=1 + int(u_malformed_at * max_tokens) if malformed else 0,
            stall_s=self.stall_s if stall else 0.0,
            slow_headers_s=self.slow_headers_s,
        )


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """The faults drawn for one request."""

    #: A fault answered instead of the normal response (``HTTP_500`` ...), or ``None``.
    reply: str | None = None
    #: How the stream ends early (``RESET`` / ``CUT`` / ``ERROR_EVENT``), or ``None``.
    end: str | None = None
    #: ``end`` fires on the first chunk that brings the generated token count to at least this.
    end_at: int = 1
    #: The malformed event goes before the first chunk reaching this token count; 0 = no malformed event.
    malformed_at: int = 0
    #: Stall after the first token chunk for this long; 0 = no stall.
    stall_s: float = 0.0
    slow_headers_s: float = 0.0


def _pick(u: float, group: tuple[tuple[str, str], ...], spec: FaultSpec) -> str | None:
    acc = 0.0
    for knob, fault in group:
        rate = getattr(spec, knob)
        acc += rate
        if rate > 0 and u < acc:
            return fault
    return None


def fault_knobs() -> list[str]:
    """Names of every ``FaultSpec`` knob, in declaration order."""
    return [f.name for f in fields(FaultSpec)]


def parse_fault_arg(text: str) -> tuple[str, str, float]:
    """Parse the CLI form ``VARIANT:KNOB=VALUE`` into ``(variant, knob, value)``.

    Only the syntax and the knob name are checked here; ranges are checked when the variant's ``FaultSpec`` is
    built from all its knobs (``stall_rate`` needs ``stall_s``, group sums).
    """
    variant, sep, rest = text.partition(":")
    knob, eq, raw = rest.partition("=")
    if not sep or not eq or not variant or not knob:
        raise ValueError(f"fault {text!r}: expected VARIANT:KNOB=VALUE, e.g. baseline:rate_429=0.2")
    if knob not in fault_knobs():
        raise UnknownFaultKnobError(knob)
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"fault {text!r}: value {raw!r} is not a number") from None
    return variant, knob, value


class FaultInjector:
    """A variant's fault knobs, its RNG and the counts behind ``loadgen_sim_faults_total``."""

    def __init__(self, spec: FaultSpec, seed: int | str = 0) -> None:
        self.spec = spec
        self._rng = random.Random(seed)
        self.counts: dict[str, int] = dict.fromkeys(FAULT_NAMES, 0)

    def draw(self, max_tokens: int, stream: bool) -> FaultPlan | None:
        # Fault-free variants skip the RNG entirely: the hot path of a normal run stays as it was.
        return self.spec.draw(self._rng, max_tokens, stream) if self.spec.enabled else None
