"""Open-loop arrival schedules: pure, seeded generators of absolute send times (seconds from the run's start).

Three kinds, as vLLM's ``bench serve --request-rate / --burstiness`` and inference-perf's load timers offer them:

- ``poisson``: exponential gaps of mean 1/rate (a memoryless stream of independent users);
- ``gamma``: gamma gaps of shape ``burstiness`` and mean 1/rate, so the rate is kept while the spread changes: the
  coefficient of variation of the gaps is 1/sqrt(burstiness); burstiness < 1 is burstier than Poisson, > 1 more
  regular, and 1 is Poisson;
- ``constant``: arrival k (1-based) at exactly k/rate.

Every schedule starts at 0 and its first arrival comes one gap later (k = 1 for ``constant``), so over a run of T
seconds ``constant`` sends exactly floor(R·T) requests and the others R·T on average.

A global rate R over W workers (Locust worker processes): every kind draws ONE global schedule from the seed
alone, so the arrivals (times and request indices) are the same whatever W, and each worker sends its share:

- ``poisson``: arrival k goes to a worker drawn uniformly from a second seeded stream (every worker walks the same
  draws, so they agree without talking). Random thinning of a Poisson process of R gives W independent Poisson
  processes of R/W (the colouring theorem): each worker runs exactly a Poisson process of its share, and the union
  is the one-worker schedule.
- ``gamma`` and ``constant``: worker w sends arrivals w, w + W, w + 2W, … Round robin keeps each share as regular
  as the whole (random thinning would make a constant schedule's shares bursty); the union is again exactly the
  global schedule, so the burstiness (or the regularity) the scenario asked for is what the target sees, not W
  superposed copies of it (W superposed gamma streams would look nearly Poisson from the server).

Each worker walks the whole global schedule to find its share: one draw (two for ``poisson``) per global arrival,
a fraction of a microsecond, W times the draws of its own share; the dispatcher draws the next time ahead of its
send time, off the request path. ``schedule_arrivals`` yields (global index, time) pairs: the index names the
request of the open-loop stream, so arrival k is the same request at the same offset for any W (paired replay).

``Handoff`` is the part of sending a schedule that needs no clock: it gives each due arrival to a free sender
(a Locust user), queues it when every sender is busy (``late``: the next free sender takes it, lagging) or drops
it (``drop``), and hands back what was never sent when the run stops.

A trace (``kind: trace``, ``ArrivalSchedule.offsets``): the trace's own send times, split round robin like
``constant`` (row k to worker k mod W), so its bursts are the target's; loadgen/traffic/scenario_schedule.py reads
them from the file.

Stages of rates (``ArrivalSchedule.profile``, see ``rate_profile``): the same kinds, drawn at rate 1 and stretched
in time by the rate of the moment.

Pure: the standard library and ``loadgen.registry`` only.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import random
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import count, islice
from typing import TYPE_CHECKING, Generic, Literal, TypeVar

from loadgen.registry import Registry, UnknownNameError
from loadgen.traffic.rate_profile import RateProfile

if TYPE_CHECKING:
    from loadgen.config.load import Arrival as ArrivalConfig

__all__ = [
    "ArrivalKind",
    "ArrivalSchedule",
    "Handoff",
    "arrival_kinds",
    "constant",
    "gamma",
    "poisson",
    "requested_rate",
    "schedule_arrivals",
    "schedule_for",
    "schedule_times",
    "times_until",
]

# A send time this far past the horizon still counts as inside it: k/rate for a decimal rate such as 0.1 lands an
# ulp or so off the exact value (3 / 0.1 = 30.000000000000004), which would drop the last constant arrival.
_HORIZON_SLACK_S = 1e-9


def _rng(seed: int, *parts: object) -> random.Random:
    # hash() is salted per process; workers must agree on the draws, so derive sub-seeds from a digest of the text.
    text = "\x1f".join(map(str, ("loadgen.arrivals", seed, *parts)))
    return random.Random(int.from_bytes(hashlib.blake2b(text.encode(), digest_size=16).digest(), "big"))


def _check_rate(rate: float) -> None:
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"rate must be a finite number of requests per second above 0, got {rate!r}")


def _check_burstiness(burstiness: float) -> None:
    if (
        isinstance(burstiness, bool)
        or not isinstance(burstiness, int | float)
        or not (math.isfinite(burstiness) and burstiness > 0)
    ):
        raise ValueError(
            f"burstiness must be a finite number above 0 (1 = Poisson, < 1 burstier, > 1 more regular), "
            f"got {burstiness!r}"
        )


# --- the schedules, one process each ------------------------------------------------------------------------


def poisson(rate: float, seed: int = 0) -> Iterator[float]:
    """Send times of a Poisson process of ``rate`` per second: exponential gaps of mean 1/rate."""
    _check_rate(rate)
    return _accumulate_gaps(_rng(seed, "poisson").expovariate, rate)


def gamma(rate: float, burstiness: float, seed: int = 0) -> Iterator[float]:
    """Send times with gamma gaps of shape ``burstiness`` and mean 1/rate (gap CV = 1/sqrt(burstiness))."""
    _check_rate(rate)
    _check_burstiness(burstiness)
    draw = _rng(seed, "gamma").gammavariate
    scale = 1.0 / (rate * burstiness)
    return _accumulate_gaps(lambda _: draw(burstiness, scale), rate)


def constant(rate: float, seed: int = 0) -> Iterator[float]:
    """Send times k/rate for k = 1, 2, … (``seed`` is accepted for a uniform signature and unused)."""
    _check_rate(rate)
    del seed
    # Each time from its index, not by adding gaps, so no rounding drift builds up over a long run.
    return (k / rate for k in count(1))


def _trace_times(rate: float, burstiness: float, seed: int) -> Iterator[float]:
    raise ValueError("a trace's times come from its file: ArrivalSchedule(kind='trace', offsets=...)")


def _accumulate_gaps(gap: Callable[[float], float], rate: float) -> Iterator[float]:
    t = 0.0
    while True:
        t += gap(rate)
        yield t


# --- the registry of kinds ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ArrivalKind:
    """One kind of schedule: how to draw its times and how a global rate splits over workers.

    ``times(rate, burstiness, seed)`` yields the global schedule's absolute send times. ``split`` says how a
    worker takes its share of them: ``"thinned"``, each arrival to a worker drawn at random (seeded; a Poisson
    process stays Poisson in every share), ``"round_robin"``, every W-th arrival.
    """

    name: str
    description: str
    times: Callable[[float, float, int], Iterator[float]]
    split: Literal["thinned", "round_robin"]
    uses_burstiness: bool


def arrival_kinds() -> Registry[ArrivalKind]:
    """A fresh registry of the schedule kinds (fresh, so a caller may register more without affecting others)."""
    registry: Registry[ArrivalKind] = Registry("arrival schedule")
    kinds = (
        ArrivalKind(
            "poisson",
            "Exponential gaps of mean 1/rate: independent users (vLLM's default --burstiness 1).",
            lambda rate, _burstiness, seed: poisson(rate, seed),
            "thinned",
            False,
        ),
        ArrivalKind(
            "gamma",
            "Gamma gaps of shape `burstiness`, mean 1/rate: burstier than Poisson below 1, more regular above.",
            gamma,
            "round_robin",
            True,
        ),
        ArrivalKind(
            "constant",
            "One request every 1/rate seconds.",
            lambda rate, _burstiness, seed: constant(rate, seed),
            "round_robin",
            False,
        ),
        ArrivalKind(
            "trace",
            "The times of a trace's rows (traffic.trace), scaled and windowed; its rate is theirs.",
            _trace_times,
            "round_robin",
            False,
        ),
    )
    for kind in kinds:
        registry.register(kind.name, kind)
    return registry


@dataclass(frozen=True, slots=True)
class ArrivalSchedule:
    """An open-loop schedule as a scenario states it: ``kind``, global ``rate`` (requests/s over all workers) and,
    for ``gamma``, ``burstiness``. Invalid values raise ``ValueError`` saying what is expected."""

    kind: str
    rate: float
    burstiness: float = 1.0
    # Rates that change over the run (stages); `rate` is then their mean, and the schedule ends with the last stage.
    profile: RateProfile | None = None
    # kind "trace": the send times themselves (sorted), and `rate` their count over the trace window's span.
    offsets: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        try:
            kind = arrival_kinds().get(self.kind)
        except UnknownNameError as exc:
            raise ValueError(str(exc)) from None
        _check_rate(self.rate)
        _check_burstiness(self.burstiness)
        if (self.kind == "trace") != (self.offsets is not None):
            raise ValueError("a trace schedule, and only one, gives its send times (offsets)")
        if not kind.uses_burstiness and self.burstiness != 1:
            raise ValueError(
                f"burstiness applies to 'gamma' only; {self.kind!r} has none (got {self.burstiness!r}; "
                "'poisson' is gamma with burstiness 1)"
            )

    @property
    def gap_cv(self) -> float:
        """Coefficient of variation of the gaps between arrivals, as the global schedule draws them."""
        return 0.0 if self.kind == "constant" else 1.0 / math.sqrt(self.burstiness)


def schedule_for(arrival: ArrivalConfig) -> ArrivalSchedule:
    """The schedule of a scenario's `load.arrival` (one rate, or its stages)."""
    stages = arrival.stages
    profile = None if stages is None else RateProfile([(st.duration, st.rate, st.ramp) for st in stages])
    return ArrivalSchedule(arrival.kind, arrival.mean_rate(), arrival.burstiness or 1.0, profile)


def _check_worker(worker: int, workers: int) -> None:
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a whole number >= 1, got {workers!r}")
    if isinstance(worker, bool) or not isinstance(worker, int) or not 0 <= worker < workers:
        raise ValueError(f"worker must be a whole number in [0, {workers}), got {worker!r}")


def schedule_arrivals(
    schedule: ArrivalSchedule, seed: int, worker: int = 0, workers: int = 1
) -> Iterator[tuple[int, float]]:
    """The endless arrivals of worker ``worker`` (0-based) of ``workers``, as (global index, send time) pairs in
    time order: its share of ``schedule``'s one global schedule (see the module docstring for how each kind
    splits). Over all workers the pairs are exactly those of ``workers=1``."""
    _check_worker(worker, workers)
    kind = arrival_kinds().get(schedule.kind)
    times: Iterator[tuple[int, float]]
    if schedule.offsets is not None:
        times = enumerate(schedule.offsets)
    elif schedule.profile is None:
        times = enumerate(kind.times(schedule.rate, schedule.burstiness, seed))
    else:  # drawn at rate 1, stretched by the stages' rates (time rescaling)
        times = enumerate(schedule.profile.rescale(kind.times(1.0, schedule.burstiness, seed)))
    if workers == 1:
        return times
    if kind.split == "round_robin":
        return islice(times, worker, None, workers)
    return _thinned(times, _rng(seed, "thinning", workers).random, worker, workers)


def _thinned(
    times: Iterator[tuple[int, float]], draw: Callable[[], float], worker: int, workers: int
) -> Iterator[tuple[int, float]]:
    for pair in times:
        if int(draw() * workers) == worker:
            yield pair


def schedule_times(schedule: ArrivalSchedule, seed: int, worker: int = 0, workers: int = 1) -> Iterator[float]:
    """The send times of ``schedule_arrivals`` alone."""
    return (t for _, t in schedule_arrivals(schedule, seed, worker, workers))


def times_until(
    schedule: ArrivalSchedule, horizon: float, seed: int = 0, worker: int = 0, workers: int = 1
) -> list[float]:
    """Worker ``worker``'s send times in (0, ``horizon``] seconds, in order."""
    if isinstance(horizon, bool) or not isinstance(horizon, int | float) or not math.isfinite(horizon):
        raise ValueError(f"horizon must be a finite number of seconds, got {horizon!r}")
    out: list[float] = []
    limit = horizon + _HORIZON_SLACK_S
    for t in schedule_times(schedule, seed, worker, workers):
        if t > limit:
            break
        out.append(t)
    return out


def requested_rate(schedule: ArrivalSchedule, workers: int = 1) -> float:
    """The rate one worker of ``workers`` is asked to send (requests/s); with ``workers=1``, the global rate.

    For ``poisson`` this is the rate of the worker's own (thinned) Poisson process; for the others, its share of the
    global schedule, on average (a worker's count over T seconds is within one of floor(R·T)/W for ``constant``).
    """
    _check_worker(0, workers)
    return schedule.rate / workers


# --- handing arrivals to senders ----------------------------------------------------------------------------

_S = TypeVar("_S")
_A = TypeVar("_A")
Outcome = Literal["handed", "queued", "dropped", "backlog_full"]
# The `late` backlog's bound per variant and worker: past it the server is far behind (at 1,000 req/s, 10 s of
# arrivals), and an arrival is refused as `backlog_full` (not sent, counted) rather than held in memory for ever.
MAX_BACKLOG = 10_000


class Handoff(Generic[_S, _A]):
    """Due arrivals and free senders of one variant, matched first come, first served.

    A free sender calls ``take(sender)``: it gets the oldest queued arrival, or None and waits (idle) until
    ``arrive()`` hands it one. ``arrive(arrival)`` gives the arrival to the most recently idle sender
    (``"handed"``, with that sender: its kept-alive connection is the least likely to have been closed by the
    server's idle timeout, and at low rates the other senders stay idle instead of every one going cold in turn);
    with none free, ``overflow="late"`` queues it for the next free sender (``"queued"``: sent late, its lag is the
    queue delay) up to ``max_backlog`` (then ``"backlog_full"``, refused) and ``overflow="drop"`` refuses it
    (``"dropped"``); the caller counts what was refused.
    A sender handed an arrival is no longer idle at once, so two arrivals due together never go to one sender.
    ``close()`` returns the queued arrivals never sent (the run stopped) and empties the queue.
    """

    __slots__ = ("overflow", "max_backlog", "_idle", "_backlog")

    def __init__(self, overflow: str = "late", max_backlog: int = MAX_BACKLOG) -> None:
        if overflow not in ("late", "drop"):
            raise ValueError(f"overflow must be 'late' or 'drop', got {overflow!r}")
        self.overflow = overflow
        self.max_backlog = max_backlog
        self._idle: deque[_S] = deque()
        self._backlog: deque[_A] = deque()

    @property
    def idle(self) -> int:
        """Senders waiting for an arrival."""
        return len(self._idle)

    @property
    def queued(self) -> int:
        """Arrivals due and waiting for a sender (``late`` only)."""
        return len(self._backlog)

    def arrive(self, arrival: _A) -> tuple[Outcome, _S | None]:
        if self._idle:
            return "handed", self._idle.pop()
        if self.overflow == "drop":
            return "dropped", None
        if len(self._backlog) >= self.max_backlog:
            return "backlog_full", None
        self._backlog.append(arrival)
        return "queued", None

    def take(self, sender: _S) -> _A | None:
        if self._backlog:
            return self._backlog.popleft()
        self._idle.append(sender)
        return None

    def take_queued(self) -> _A | None:
        """The oldest queued arrival, or None (the caller does not wait)."""
        return self._backlog.popleft() if self._backlog else None

    def trim(self, keep: int) -> list[_A]:
        """Keep the `keep` oldest queued arrivals; return the rest (newest last), no longer queued."""
        if len(self._backlog) <= keep:
            return []
        kept = [self._backlog.popleft() for _ in range(max(keep, 0))]
        rest = list(self._backlog)
        self._backlog.clear()
        self._backlog.extend(kept)
        return rest

    def release_idle(self) -> list[_S]:
        """Every waiting sender, no longer waiting (the schedule ended: nothing will be handed to them)."""
        idle = list(self._idle)
        self._idle.clear()
        return idle

    def leave(self, sender: _S) -> None:
        """``sender`` stops waiting (its user is stopping); nothing is handed to it any more."""
        with contextlib.suppress(ValueError):  # not waiting: already handed one
            self._idle.remove(sender)

    def close(self) -> list[_A]:
        unsent = list(self._backlog)
        self._backlog.clear()
        return unsent
