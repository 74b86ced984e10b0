"""Agent sessions as a unit of the verdict: one task (traffic/agent.py), its steps and sub-agents together.

A worker's agent runner keeps a `SessionTally` while the task runs (its steps' records, the time it waited on its
tools and on its sub-agents) and hands it to the recorder when the task ends, however it ended; the recorder
(after the steps' own records, so their fates and goodput are stamped) adds it to the `SessionStats` of its
(variant, mix).

How a session ended is read from its steps' fates, through the fate table (measure/fates.py, its `session` column):
- opened before the window ended its warm-up (its first step `in_warmup`): left out, as its requests are;
- a step failed (an error, a timeout) or an arrival never sent: `failed`;
- a step cut by the stop or given up by the client, or the stop between two steps (the agent was running its tools
  or waiting on sub-agents): `cut`;
- else `completed`.
A completed session's duration (first step sent to last step ended) is measured; a failed or cut one is censored:
above every measured value, so a variant whose slow sessions were cut by the stop cannot report a better session
p95 than one that finished them (inference-perf leaves its truncated sessions out of the duration percentiles,
which is exactly that bias). A session is good when it completed and every one of its steps met every per-request
SLO (`goodput:`); sessions per hour count those completed inside the window.

`SessionTimelines` keeps a few whole sessions per variant, step by step, for the HTML report's timeline chart: hash
sampled by task key like the paired sample, so every variant keeps the same tasks.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from loadgen.measure.fates import FATES, fate_of
from loadgen.measure.hash_sample import BITS, HashSample, Rows, RowSample, key_hash
from loadgen.measure.hist_merge import merge_encoded_into
from loadgen.measure.histogram import LatencyHistogram
from loadgen.measure.pairs import CENSORED, split_id
from loadgen.measure.records import RequestRecord
from loadgen.measure.wire_fields import add_counts

__all__ = [
    "SESSION_FATES",
    "STEP_FIELDS",
    "SessionFate",
    "SessionPairs",
    "SessionStats",
    "SessionTally",
    "SessionTimelines",
    "session_fate",
]


class SessionFate(StrEnum):
    COMPLETED = "completed"
    FAILED = "failed"
    CUT = "cut"
    NOT_SENT = "not_sent"
    IN_WARMUP = "in_warmup"


# How each session fate enters the session figures: (duration use, in the window's count, meaning).
SESSION_FATES: dict[SessionFate, tuple[str, bool, str]] = {
    SessionFate.COMPLETED: ("measured", True, "every step ended as the target meant it to"),
    SessionFate.FAILED: ("censored", True, "a step failed or timed out: the task did not finish"),
    SessionFate.CUT: ("censored", True, "the stop (or the client) ended a step or the wait between two"),
    SessionFate.NOT_SENT: ("censored", True, "open loop: the task's opening arrival was never sent"),
    SessionFate.IN_WARMUP: ("left out", False, "opened before the warm-up ended"),
}


@dataclass(slots=True)
class SessionTally:
    """One task as it runs on a worker: its step records in the order sent (sub-agents' too), and the time its
    top-level agent spent waiting on its tools and on sub-agents beyond them."""

    key: str  # the task's pair key, `{stream}-{index}`: the same task on every variant
    variant: str
    mix: str
    records: list[RequestRecord] = field(default_factory=list)
    # A replay on its recorded clock (`timing: offsets`): each step's sent − due, when its prerequisites were done by
    # its due time (locust_plugin/agent_runner.py); seconds.
    slips: list[float] = field(default_factory=list)
    tool_s: float = 0.0
    subagent_s: float = 0.0
    subagents: int = 0
    compactions: int = 0
    stopped: bool = False  # the stop came between two steps (or while sub-agents ran)
    ended: float | None = None  # when its last step ended (monotonic), None when it did not end
    tool_waits: dict[str, float] = field(default_factory=dict)  # a step's request id -> its tools' wait after it (s)

    @property
    def started(self) -> float | None:
        return self.records[0].sent if self.records else None


def session_fate(tally: SessionTally) -> SessionFate:
    """How the task ended, from its steps' fates (the fate table's `session` column) and the stop."""
    if not tally.records:
        return SessionFate.CUT
    uses = [FATES[fate_of(r)].session for r in tally.records]
    if uses[0] == "leaves it out":
        return SessionFate.IN_WARMUP
    if "fails it" in uses:
        return SessionFate.FAILED
    if "cuts it" in uses or tally.stopped or tally.ended is None:
        return SessionFate.CUT
    return SessionFate.COMPLETED


# Sessions kept per variant at most (hash-sampled by task key, so every variant keeps the same tasks).
SESSION_PAIR_CAP = 20_000


class SessionPairs(RowSample):
    """Per variant, hash-sampled tasks of the window by key (`{stream}-{index}`: the same task on every variant) with
    their durations, completed ones measured and the others censored: what the paired comparison of sessions
    resamples (report/session_compare.py)."""

    __slots__ = ()

    def __init__(self, cap: int = SESSION_PAIR_CAP) -> None:
        super().__init__(cap, 1)

    def add(self, tally: SessionTally, fate: SessionFate) -> None:
        if not SESSION_FATES[fate][1] or fate is SessionFate.NOT_SENT:
            return
        h = key_hash(tally.key)
        rows = self.admit(tally.variant, h)
        if rows is None:
            return
        rows.keys.append(h)
        if fate is SessionFate.COMPLETED:
            assert tally.ended is not None and tally.started is not None
            rows.columns[0].append(max(int((tally.ended - tally.started) * 1e6 + 0.5), 0))
        else:
            rows.columns[0].append(CENSORED)  # as a failed request's value in the request pairs

    def samples(self, variant: str) -> tuple[array[int], array[int]]:
        """The variant's kept task keys and their durations (µs; -2: censored), row for row."""
        rows = self.variants.get(variant) or Rows(1)
        return rows.keys, rows.columns[0]


# Sessions kept whole per variant at most, for the timeline chart (hash-sampled by task key: the same tasks on every
# variant; between cap / 2 and cap once more ran), and steps kept per session (a long replayed task's later ones go).
TIMELINE_CAP = 12
TIMELINE_STEP_CAP = 400
# A kept step: its agent's path ("" the top-level agent, "1.2" a sub-agent's), its step number within that agent,
# when it was sent and when it ended (offsets from its session's first step sent), its TTFT, and the wait on its
# tools after it; on the wire in µs (-1: none), in the report in ms (null: none).
STEP_FIELDS: tuple[str, ...] = ("branch", "step", "sent_ms", "ttft_ms", "done_ms", "tool_ms")
_NONE = -1


def _branch(rec: RequestRecord) -> str:
    """The sub-agent path in a step's id (`…-{index}-b{path}[-t{turn}]`, measure/pairs.py `split_id`); "" for the
    top-level agent's steps."""
    split = split_id(rec)
    return "" if split is None else split[1]


def _offset_us(seconds: float | None) -> int:
    return _NONE if seconds is None else max(int(seconds * 1e6 + 0.5), 0)


def _step_row(rec: RequestRecord, start: float, tool_s: float | None) -> list[Any]:
    return [
        _branch(rec),
        rec.turn,
        _offset_us(rec.sent - start),
        _offset_us(rec.ttft),
        _offset_us(None if rec.done is None else rec.done - start),
        _offset_us(tool_s),
    ]


class SessionTimelines(HashSample):
    """Per variant, a few sessions of the window step by step (`STEP_FIELDS`), kept by the hash of their task key:
    what the HTML report's per-session timeline draws. Mergeable like the other samples (`to_wire` / `merge_wire`;
    a worker ships the sessions above its level, then `clear_rows`). A kept session: [key, mix, fate, steps left out,
    steps]."""

    __slots__ = ("variants",)

    def __init__(self, cap: int = TIMELINE_CAP) -> None:
        super().__init__(cap)
        self.variants: dict[str, dict[int, list[Any]]] = {}

    def add(self, tally: SessionTally, fate: SessionFate) -> None:
        start = tally.started
        if not SESSION_FATES[fate][1] or start is None:
            return
        h = key_hash(tally.key)
        if not self._admit(tally.variant, h):
            return
        kept = tally.records[:TIMELINE_STEP_CAP]
        steps = [_step_row(r, start, tally.tool_waits.get(r.request_id)) for r in kept]
        left_out = len(tally.records) - len(kept)
        self.variants.setdefault(tally.variant, {})[h] = [tally.key, tally.mix, fate.value, left_out, steps]

    def _keep_from(self, level: int) -> None:
        top = 1 << (BITS - level)
        for v, kept in self.variants.items():
            self.variants[v] = {h: row for h, row in kept.items() if h < top}

    def is_empty(self) -> bool:
        return not any(self.variants.values())

    def to_wire(self) -> dict[str, Any]:
        rows = [[v, h, *row] for v, kept in self.variants.items() for h, row in kept.items()]
        return {"level": self.level, "rows": rows}

    def merge_wire(self, wire: dict[str, Any]) -> None:
        self._rise_to(int(wire.get("level", 0)))
        by_variant: dict[str, list[list[Any]]] = {}
        for v, *row in wire.get("rows", ()):
            by_variant.setdefault(v, []).append(row)
        for v, rows in by_variant.items():
            hashes = [int(r[0]) for r in rows]
            survive = self._admit_wire(v, hashes)
            kept = self.variants.setdefault(v, {})
            for i in range(len(rows)) if survive is None else survive:
                h, key, mix, fate, left_out, steps = rows[i]
                kept[int(h)] = [key, mix, fate, int(left_out), [list(s) for s in steps]]
        self._settle()

    def merge(self, other: SessionTimelines) -> None:
        self.merge_wire(other.to_wire())

    def clear_rows(self) -> None:
        """A worker after shipping a delta: the sessions go, the level and the counts stay."""
        self.variants = {}

    def sessions(self, variant: str) -> list[dict[str, Any]]:
        """The variant's kept sessions by task key (stream, then index), steps in ms as the report states them."""

        def ms(us: int) -> float | None:
            return None if us == _NONE else round(us / 1e3, 3)

        out = []
        for key, mix, fate, left_out, steps in (self.variants.get(variant) or {}).values():
            rows = [[b, n, *(ms(int(x)) for x in xs)] for b, n, *xs in steps]
            out.append({"key": key, "mix": mix, "fate": fate, "steps": rows, "steps_left_out": left_out})
        return sorted(out, key=lambda s: _task_order(s["key"]))


def _task_order(key: str) -> tuple[Any, ...]:
    parts = key.split("-")
    return (0, *(int(p) for p in parts)) if all(p.isdigit() for p in parts) else (1, key)


_SUMS = (
    "steps",
    "subagents",
    "compactions",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "cache_reported_tokens",
    "completed_in_window",
    "good",
    "goodput_judged",
)
_SECONDS = ("model_s", "tool_s", "subagent_s", "duration_s")


@dataclass(slots=True)
class SessionStats:
    """The sessions of one (variant, mix): counts by fate, the duration histogram (completed sessions; the others
    censored), and sums over the completed sessions (steps, tokens, the split of their time) for their means."""

    fates: dict[str, int] = field(default_factory=dict)
    duration: LatencyHistogram = field(default_factory=lambda: LatencyHistogram(highest_s=86_400.0))
    slip: LatencyHistogram = field(default_factory=LatencyHistogram)  # schedule slips of the window's sessions' steps
    censored: int = 0
    # Over completed sessions:
    completed: int = 0
    steps: int = 0
    subagents: int = 0
    compactions: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cache_reported_tokens: int = 0  # input tokens of the steps whose usage said how many were cached
    model_s: float = 0.0
    tool_s: float = 0.0
    subagent_s: float = 0.0
    duration_s: float = 0.0
    # Of the window's sessions:
    completed_in_window: int = 0
    good: int = 0
    goodput_judged: int = 0  # completed sessions whose steps were all judged against `goodput:`

    def add(self, tally: SessionTally, window_end: float, judged: bool) -> SessionFate:
        """A task that ended (`judged`: the scenario has per-request SLOs, stamped on its steps' records)."""
        fate = session_fate(tally)
        self.fates[fate.value] = self.fates.get(fate.value, 0) + 1
        if SESSION_FATES[fate][1]:  # every step sent in the window's sessions, however they ended
            for slip in tally.slips:
                self.slip.record(slip)
        use, _, _ = SESSION_FATES[fate]
        if use == "censored":
            self.censored += 1
        if fate is not SessionFate.COMPLETED:
            return fate
        assert tally.ended is not None and tally.started is not None
        duration = tally.ended - tally.started
        self.duration.record(max(duration, 0.0))
        self.completed += 1
        self.duration_s += duration
        self.steps += len(tally.records)
        self.subagents += tally.subagents
        self.compactions += tally.compactions
        for r in tally.records:
            self.input_tokens += r.prompt_tokens or 0
            self.output_tokens += r.output_token_count
            if r.cached_prompt_tokens is not None and r.prompt_tokens is not None:
                self.cached_tokens += r.cached_prompt_tokens
                self.cache_reported_tokens += r.prompt_tokens
        self.model_s += max(duration - tally.tool_s - tally.subagent_s, 0.0)
        self.tool_s += tally.tool_s
        self.subagent_s += tally.subagent_s
        if tally.ended <= window_end:
            self.completed_in_window += 1
        if judged:
            self.goodput_judged += 1
        if all(r.goodput_misses == () for r in tally.records) or not judged:
            self.good += 1
        return fate

    def add_not_sent(self) -> None:
        """Open loop: an arrival that would have opened a task, never sent."""
        self.fates[SessionFate.NOT_SENT.value] = self.fates.get(SessionFate.NOT_SENT.value, 0) + 1
        self.censored += 1

    def merge(self, other: SessionStats) -> None:
        add_counts(self.fates, other.fates)
        self.duration.merge(other.duration)
        self.slip.merge(other.slip)
        self.censored += other.censored
        self.completed += other.completed
        for name in (*_SUMS, *_SECONDS):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def to_wire(self) -> dict[str, Any]:
        return {
            "fates": dict(self.fates),
            "duration": self.duration.wire() if self.duration.count else b"",
            "slip": self.slip.wire() if self.slip.count else b"",
            "censored": self.censored,
            "completed": self.completed,
            **{name: getattr(self, name) for name in (*_SUMS, *_SECONDS)},
        }

    def merge_wire(self, w: dict[str, Any]) -> None:
        add_counts(self.fates, w.get("fates", {}))
        if w.get("duration"):
            merge_encoded_into(w["duration"], [self.duration])
        if w.get("slip"):
            merge_encoded_into(w["slip"], [self.slip])
        self.censored += int(w.get("censored", 0))
        self.completed += int(w.get("completed", 0))
        for name in _SUMS:
            setattr(self, name, getattr(self, name) + int(w.get(name, 0)))
        for name in _SECONDS:
            setattr(self, name, getattr(self, name) + float(w.get(name, 0.0)))

    @property
    def in_window(self) -> int:
        """The window's sessions: every fate but those opened in the warm-up."""
        return sum(n for f, n in self.fates.items() if SESSION_FATES[SessionFate(f)][1])
