"""Judging `stop_when:` (config/stop_when.py): is the run's answer already known?

Pure (no Locust). Each process that sends requests keeps a `StopCounts` (every finished request of each variant,
warm-up included) and ships what accumulated with its report; the master (or a local process) merges them into a
`StopJudge` and asks it, about twice a second, whether a rule is met. Times are wall-clock seconds: workers on
other hosts share no monotonic clock.

What each rule means, exactly:
- `slo_breached`: over the requests of the measured window so far, the failures alone (censored above every value
  in ttft — those that failed before a first token — and in e2e, and every failure in the success rate) breach a
  whole-variant SLO. Open loop: the window's planned arrivals N are known, and the rule stops only when the failures
  exceed the share of N the SLO allows (the rest of the run cannot repair it). Closed loop: the total is not known in
  advance, so "beyond doubt" is statistical, and the test is asked twice a second for the whole run: a sequential
  one, whose error rate holds however often it is looked at (measure/confidence_sequence.py: Robbins' beta-binomial
  mixture confidence sequence). Over at least `min_requests` requests, the lower end of the sequence is above the
  allowed share. 1 − `confidence` is split evenly over the (variant, SLO) pairs judged, so the chance that the rule
  ever stops a run in which every variant's failure share is within every SLO's allowance is at most 1 − `confidence`
  (a fixed-sample bound asked at every look, as this rule once used, stopped such runs dozens of times as often).
- `error_rate`: failed ÷ ended over the requests that ended in the last `window` seconds (as reported so far: up to
  a report interval late), with at least `min_requests` of them.
- `consecutive_failures`: one process counted N failures of the variant since its last success.
- `unreachable_for`: no process has had any response from the variant (a success or an HTTP error of any kind)
  since its first failed connection at least T seconds ago.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loadgen.config.slo import SLO
from loadgen.config.stop_when import StopWhen
from loadgen.measure import confidence_sequence as cs
from loadgen.measure.fates import FATES, fate_of
from loadgen.measure.records import ErrorKind, RequestRecord

__all__ = ["StopCounts", "StopJudge", "StopReason", "allowed_failure_share", "certainly_breached", "sequential_test"]

# Verdicts of a stop (`run.stopped_early.verdict`). Both exit 1 (report/verdict.py): the target breached, whether an
# SLO or by being unreachable; the load generator is fine (3 is for its own health only: loadgen/exit_codes.py).
SLO_BREACHED = "slo_breached"
TARGET_UNREACHABLE = "target_unreachable"


@dataclass(slots=True)
class _Variant:
    """One variant's counts in one process (the wire delta), or merged on the master."""

    ended: int = 0
    failed: int = 0
    window_requests: int = 0  # requests (and open-loop arrivals not sent) of the measured window
    window_failed: int = 0
    window_before_first_token: int = 0  # failed with no token: censored in ttft as well as in e2e
    bins: dict[int, list[int]] = field(default_factory=dict)  # wall second → [ended, failed]

    def to_wire(self) -> dict[str, Any]:
        return {
            "ended": self.ended,
            "failed": self.failed,
            "window": [self.window_requests, self.window_failed, self.window_before_first_token],
            "bins": [[s, *v] for s, v in sorted(self.bins.items())],
        }

    def merge_wire(self, w: dict[str, Any]) -> None:
        self.ended += int(w["ended"])
        self.failed += int(w["failed"])
        n, f, b = w["window"]
        self.window_requests += int(n)
        self.window_failed += int(f)
        self.window_before_first_token += int(b)
        for s, e, fl in w["bins"]:
            row = self.bins.setdefault(int(s), [0, 0])
            row[0] += int(e)
            row[1] += int(fl)


class StopCounts:
    """A sending process's side: what ended since the last report, plus its absolute failure streak and contact
    times per variant (shipped whole every time, so a lost report loses nothing of them)."""

    def __init__(self) -> None:
        self._delta: dict[str, _Variant] = {}
        self._streak: dict[str, int] = {}
        self._contact: dict[str, float] = {}  # last response of any kind (wall)
        self._refused_since: dict[str, float] = {}  # first failed connection after the last response (wall)
        self._refused_last: dict[str, float] = {}  # the latest failed connection (wall)

    def add(self, rec: RequestRecord, done_wall: float) -> None:
        """A finished request, as its fate's row counts it for early stop (measure/fates.py): one the stop cut or the
        client gave up neither succeeded nor failed."""
        fate_row = FATES[fate_of(rec)]
        if fate_row.early_stop == "none":
            return
        v = self._delta.setdefault(rec.variant, _Variant())
        failed = rec.error is not None
        v.ended += 1
        v.failed += failed
        row = v.bins.setdefault(int(done_wall), [0, 0])
        row[0] += 1
        row[1] += failed
        if fate_row.in_window:
            v.window_requests += 1
            v.window_failed += failed
            v.window_before_first_token += failed and rec.streamed and not rec.chunk_times
        self._streak[rec.variant] = self._streak.get(rec.variant, 0) + 1 if failed else 0
        if rec.error == ErrorKind.CONNECT:
            self._refused_since.setdefault(rec.variant, done_wall)
            self._refused_last[rec.variant] = done_wall
        else:
            self._contact[rec.variant] = max(done_wall, self._contact.get(rec.variant, 0.0))
            self._refused_since.pop(rec.variant, None)

    def add_not_sent(self, variant: str) -> None:
        """An open-loop arrival of the window that was never sent: a failed request of the window, censored in every
        latency (as the report counts it)."""
        v = self._delta.setdefault(variant, _Variant())
        v.window_requests += 1
        v.window_failed += 1
        v.window_before_first_token += 1

    def pop_wire(self) -> dict[str, Any]:
        delta, self._delta = self._delta, {}
        names = set(delta) | set(self._streak)
        return {
            name: {
                **(delta[name].to_wire() if name in delta else _Variant().to_wire()),
                "streak": self._streak.get(name, 0),
                "contact": self._contact.get(name),
                "refused_since": self._refused_since.get(name),
                "refused_last": self._refused_last.get(name),
            }
            for name in sorted(names)
        }


@dataclass(frozen=True, slots=True)
class StopReason:
    rule: str  # slo_breached | error_rate | consecutive_failures | unreachable_for
    variant: str
    verdict: str  # slo_breached | target_unreachable: both exit 1
    reason: str  # in words, for the report
    figures: dict[str, Any]


def sequential_test(confidence: float, judged: int) -> dict[str, Any]:
    """What `slo_breached` tests in closed loop, as the report states it (`run.stopped_early.figures.test`): the
    method, and the most it can stop a run that meets its SLOs, under continuous monitoring."""
    alpha = 1.0 - confidence
    return {
        "method": cs.METHOD,
        "reference": cs.REFERENCE,
        "valid_under_continuous_monitoring": True,
        "false_stop_at_most": round(alpha, 12),
        "pairs_judged": judged,  # (variant, SLO): 1 − confidence split evenly over them (Bonferroni)
        "alpha_each": round(alpha / judged, 15),
    }


def allowed_failure_share(slo: SLO) -> tuple[float, str] | None:
    """(the largest share of requests that may fail with the SLO still met, which failures count: "all" or
    "before_first_token"), or None when failures alone cannot decide it (itl, tpot, queue delay…)."""
    if slo.metric == "success_rate":
        assert slo.min_percent is not None
        return round(1.0 - slo.min_percent / 100.0, 12), "all"
    if slo.metric not in ("ttft", "e2e", "ttft_from_schedule", "e2e_from_schedule"):
        return None
    which = "before_first_token" if slo.metric.startswith("ttft") else "all"
    if slo.stat in ("max", "mean"):  # one censored sample makes them unknown: above any bound
        return 0.0, which
    assert slo.stat is not None
    return round(1.0 - float(slo.stat.removeprefix("p")) / 100.0, 12), which


def certainly_breached(slo: SLO, failed: int, total: int) -> bool:
    """Whether `failed` censored requests among `total` breach `slo` whatever the other requests measure, by the
    report's own rules: success rate compared in integers (`build._evaluate_slos`), a percentile's rank as
    `LatencyHistogram.summary_ms` takes it (falling among the censored: None, a breach), mean and max censored by
    a single failure."""
    if failed <= 0 or total <= 0:
        return False
    if slo.metric == "success_rate":
        assert slo.min_percent is not None
        return (total - failed) * 100_000_000 < round(slo.min_percent * 1_000_000) * total
    if slo.stat in ("max", "mean"):
        return True
    assert slo.stat is not None
    rank = max(int(float(slo.stat.removeprefix("p")) * total / 100 + 0.5), 1)
    return rank > total - failed


class StopJudge:
    """The master's side: every process's counts merged, and the rules judged on them."""

    def __init__(self, rules: StopWhen, slos: list[SLO], variants: list[str], planned: int | None = None) -> None:
        """`planned`: open loop, the arrivals each variant gets in the measured window (every variant gets all);
        None in closed loop."""
        self.rules = rules
        self.slos = [s for s in slos if s.mix is None and s.cls is None]
        self.planned = planned
        self.variants = {name: _Variant() for name in variants}
        self._streak: dict[tuple[str, str], int] = {}
        self._contact: dict[tuple[str, str], float | None] = {}
        self._refused: dict[tuple[str, str], tuple[float | None, float | None]] = {}
        self.started_wall: float | None = None
        # Closed loop: the (variant, SLO) pairs `slo_breached` judges, over which 1 − confidence is split.
        self.judged = max(1, sum(self._judges(slo, name) for name in variants for slo in self.slos))

    def _judges(self, slo: SLO, variant: str) -> bool:
        return (slo.variant is None or slo.variant == variant) and allowed_failure_share(slo) is not None

    def merge(self, process: str, wire: dict[str, Any]) -> None:
        for name, w in wire.items():
            self.variants.setdefault(name, _Variant()).merge_wire(w)
            key = (process, name)
            self._streak[key] = int(w["streak"])
            self._contact[key] = w["contact"]
            self._refused[key] = (w["refused_since"], w["refused_last"])

    def check(self, now: float) -> StopReason | None:
        """The first rule met, by variant in order; None while the answer is still open."""
        r = self.rules
        for name, v in self.variants.items():
            found = (
                (self._unreachable(name, now) if r.unreachable_for is not None else None)
                or (self._in_a_row(name) if r.consecutive_failures is not None else None)
                or (self._error_rate(name, v, now) if r.error_rate is not None else None)
                or (self._slo(name, v) if r.slo_breached is not None else None)
            )
            if found is not None:
                return found
        return None

    def _unreachable(self, name: str, now: float) -> StopReason | None:
        assert self.rules.unreachable_for is not None
        contacts = [c for (p, n), c in self._contact.items() if n == name and c is not None]
        contact = max(contacts, default=None)
        # Each process's first refusal after the latest response any process had. A process knows only its own
        # responses: when another's came after its first refusal, its latest refusal stands in (later than the true
        # first one after that response: the rule then stops later, never sooner).
        refused = []
        for (_, n), (first, last) in self._refused.items():
            if n != name or last is None:
                continue
            if first is not None and (contact is None or first > contact):
                refused.append(first)
            elif contact is None or last > contact:
                refused.append(last)
        if not refused:
            return None
        since = min(refused)
        lasted = now - since
        if lasted < self.rules.unreachable_for:
            return None
        seen = "no response since the run began" if contact is None else f"its last response {now - contact:.1f} s ago"
        return StopReason(
            "unreachable_for",
            name,
            TARGET_UNREACHABLE,
            f"variant {name!r} was unreachable: every request failed to connect for {lasted:.1f} s "
            f"(stop after {self.rules.unreachable_for:g} s; {seen})",
            {"unreachable_s": round(lasted, 3), "bound_s": self.rules.unreachable_for},
        )

    def _in_a_row(self, name: str) -> StopReason | None:
        n = self.rules.consecutive_failures
        assert n is not None
        streak = max((s for (p, v), s in self._streak.items() if v == name), default=0)
        if streak < n:
            return None
        return StopReason(
            "consecutive_failures",
            name,
            SLO_BREACHED,
            f"variant {name!r}: {streak} requests failed in a row (stop at {n})",
            {"in_a_row": streak, "bound": n},
        )

    def _error_rate(self, name: str, v: _Variant, now: float) -> StopReason | None:
        rule = self.rules.error_rate
        assert rule is not None
        since = now - rule.window
        for s in [s for s in v.bins if s + 1 <= since]:  # whole seconds that left the window
            del v.bins[s]
        ended = sum(row[0] for row in v.bins.values())
        failed = sum(row[1] for row in v.bins.values())
        if ended < rule.min_requests or failed * 100 <= rule.above_percent * ended:
            return None
        return StopReason(
            "error_rate",
            name,
            SLO_BREACHED,
            f"variant {name!r}: {failed} of the {ended} requests that ended in the last {rule.window:g} s failed "
            f"({100 * failed / ended:.1f} %; stop above {rule.above_percent:g} %)",
            {"failed": failed, "ended": ended, "window_s": rule.window, "bound_percent": rule.above_percent},
        )

    def _slo(self, name: str, v: _Variant) -> StopReason | None:
        rule = self.rules.slo_breached
        assert rule is not None
        for slo in self.slos:
            allowed = allowed_failure_share(slo) if self._judges(slo, name) else None
            if allowed is None:
                continue
            share, which = allowed
            failed = v.window_failed if which == "all" else v.window_before_first_token
            n = v.window_requests
            figures: dict[str, Any] = {"slo": slo.describe(), "failed": failed, "requests": n, "allowed_share": share}
            if self.planned is not None:
                # Certain: even if every other planned arrival of the window succeeds, the failures are too many.
                if not certainly_breached(slo, failed, self.planned):
                    continue
                figures |= {"planned": self.planned, "test": {"method": "certain", "false_stop_at_most": 0.0}}
                how = f"{failed} failures already exceed the {share:.4g} share of the window's {self.planned} arrivals"
            else:
                test = sequential_test(rule.confidence, self.judged)
                if n < rule.min_requests or not cs.breached(failed, n, share, test["alpha_each"]):
                    continue
                low = cs.lower_bound(failed, n, test["alpha_each"])
                evidence = cs.log_evidence(failed, n, share)
                figures |= {
                    "failed_share_lower_bound": round(low, 6),
                    "confidence": rule.confidence,
                    "log_evidence": round(evidence, 3) if evidence < float("inf") else None,  # nats; None: certain
                    "test": test,
                }
                how = (
                    f"{failed} of {n} requests failed; the failed share is above {low:.4g}, and the SLO allows "
                    f"{share:.4g} ({100 * rule.confidence:g} % confidence however often it is judged)"
                )
            return StopReason(
                "slo_breached", name, SLO_BREACHED, f"variant {name!r}: {slo.describe()} breached: {how}", figures
            )
        return None
