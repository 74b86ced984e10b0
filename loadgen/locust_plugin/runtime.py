"""Per-process loadgen state for a Locust run, carried on the Environment (no module globals).

Workers (and a single local process) record requests into an `Aggregate`; a master (or local process) owns a
`Collector` that merges what workers report and turns it into the report at the end. In open loop a worker also
runs an `ArrivalDispatcher` over its share of the schedule, and counts what became of each arrival.
"""

from __future__ import annotations

import math
import os
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent
import psutil
from gevent.event import Event
from locust.env import Environment

from loadgen.client.dial import Dialer
from loadgen.client.reactor import Reactor
from loadgen.config.scenario import Scenario
from loadgen.live.otlp import SpanExport
from loadgen.locust_plugin.crashes import CrashLog
from loadgen.locust_plugin.open_loop import Arrival, ArrivalDispatcher
from loadgen.locust_plugin.raw_records import RawRecordWriter
from loadgen.locust_plugin.request_stream import StreamAssigner
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.collector import Collector
from loadgen.measure.early_stop import StopCounts
from loadgen.measure.fates import fate_of
from loadgen.measure.goodput import goodput_misses
from loadgen.measure.health import HealthStats
from loadgen.measure.records import RequestRecord, TokenSource
from loadgen.measure.request_timeline import RequestTimelineSample, itl_bound_ms
from loadgen.measure.sessions import SessionTally
from loadgen.measure.token_counts import apply_token_ends
from loadgen.measure.wall_clock import WALL_CLOCK
from loadgen.traffic.scenario_schedule import schedule_of
from loadgen.traffic.tokenizer import SERVER_TOKENIZER, PromptTokenizer, load_tokenizer

__all__ = ["Collector", "RawRecordWriter", "Runtime", "runtime_of"]

# Loop-lag sampling period: 100 samples a second, so a p99 over a short run rests on more than a couple of samples
# (Node's monitorEventLoopDelay samples at the same 10 ms).
_LAG_PERIOD = 0.01
# Finished requests waiting to be recorded beyond which the recorder stops waiting for idle moments.
_RECORD_BACKLOG = 2048
_CPU_PERIOD = 1.0
# How often the drain at the stop looks whether anything is still in flight.
_DRAIN_POLL = 0.05


class Runtime:
    def __init__(self, environment: Environment, scenario: Scenario, raw_dir: str | None) -> None:
        self.env = environment
        self.scenario = scenario  # a sequential run's phase under way (locust_plugin/phases.py): its variant alone
        self.phases: Any = None  # a sequential run's PhasePlan (phases.py), else None
        self.aggregate = Aggregate()
        self.health = HealthStats()
        self.warmup_end = math.inf
        self.stopped_at: float | None = None
        self.assigner: StreamAssigner | None = None
        # What every connection of this process shares, for the process's life (every run): resolved names and
        # TLS contexts, and the reactor that reads every response (started with the first run: a master has none).
        self.dialer = Dialer()
        self.reactor: Reactor | None = None
        self.raw_dir = Path(raw_dir) if raw_dir else None
        self.raw: RawRecordWriter | None = None
        self.worker_tag = f"w{os.getpid()}"
        # Which run of this process's life this is (the web UI can Start → Stop → Start): in request ids and shard
        # names so that no id repeats, and in every report so that the master drops a late one from an earlier run.
        # A worker takes its master's number (loadgen_run), a local process counts its own.
        self.run = 0
        self.run_from_master: int | None = None
        # Open loop: this worker's place among the master's live workers, (w, W), from the run message (a local
        # process is (0, 1)); and the run's dispatcher.
        self.share_from_master: tuple[int, int] | None = None
        self.dispatcher: ArrivalDispatcher | None = None
        self.started = False
        self._monitors: list[gevent.Greenlet] = []
        self.collector: Collector | None = None
        # The cluster Prometheus's figures of an ended run, (run number, report section): read once, then kept.
        self.cluster_metrics_final: tuple[int, dict[str, Any]] | None = None
        # Each variant's power and GPU-memory figures once the run ended (run number, by variant): read once.
        self.cost_energy_final: tuple[int, dict[str, dict[str, Any]]] | None = None
        # Ship the aggregate every this many reports (the master raises it when many workers report; 1 = every time).
        self.hist_every = 1
        self._reports = 0
        # Raw-shard rows the shipped aggregates cover: a lost worker's later rows are the master's to recover.
        self._rows_shipped = 0
        # What crashed in this process (unhandled greenlet exceptions, swallowed listener exceptions): a failed run.
        self.crashes = CrashLog()
        self.stopping = False  # Locust's test_stopping fired: users are being stopped
        # The run was stopped from outside before its end (SIGTERM / Ctrl-C): its report says so (`run.interrupted`).
        self.interrupted = False
        self.quitting = False  # the quitting event is being handled (a second signal must not start it again)
        self.final_run: int | None = None  # a worker: the run whose final delta it has shipped (once per run)
        # `stop_when:`: every finished request counted for the master's judge (None without rules), and once a rule
        # stopped the run, why and when (the report's `run.stopped_early`; locust_plugin/early_stop.py).
        self.stop_counts: StopCounts | None = None
        self.stopped_early: dict[str, Any] | None = None
        self.stopped_early_now = False  # this process was told a rule stopped the run: no drain
        self.request_timeline = self._timeline_sample()  # sampled requests' course, for the report's lanes
        self.spans: SpanExport | None = None  # `tracing.otlp_endpoint`: sampled requests as spans (live/otlp.py)
        self.in_flight = 0  # requests being sent or streamed by this process's users
        self.tasks_running = 0  # agent tasks under way (locust_plugin/agent_runner.py): the drain lets them end
        self.tasks_running_by: dict[tuple[str, str], int] = {}  # the same by (variant, mix), for the live view
        self._pending: deque[tuple[RequestRecord | SessionTally, Callable[[RequestRecord], None]]] = deque()
        self._recorder: gevent.Greenlet | None = None
        self._work = Event()  # set: something was submitted since the recorder last found the queue empty
        # The scenario's tokenizer, to count the chunks of replies whose server streamed no counts (the streams
        # keep their text for it: request_stream.StreamAssigner). Loaded when the scenario was validated (once per
        # process), so this is a cache hit.
        self._goodput = scenario.goodput.bounds() if scenario.goodput is not None else {}
        self._agent_mixes = {ref.name for ref in scenario.traffic.mixes if ref.agent is not None}
        self._tokenizer: PromptTokenizer | None = None
        if scenario.tokenizer is not None and scenario.tokenizer != SERVER_TOKENIZER:
            self._tokenizer = load_tokenizer(scenario.tokenizer)

    def _timeline_sample(self) -> RequestTimelineSample:
        """A fresh sample of whole requests for the report's request timeline (measure/request_timeline.py)."""
        sc = self.scenario
        return RequestTimelineSample(sc.seed, bounds={v.name: itl_bound_ms(sc, v.name) for v in sc.variants})

    def worker_index(self) -> int:
        return max(int(getattr(self.env.runner, "worker_index", 0)), 0)

    def on_test_start(self) -> None:
        """A run starts from zero: nothing of an earlier run (counts, health, pending records, stream slots)."""
        self.stopping = False
        self.started = True
        self.run = self.run_from_master if self.run_from_master is not None else self.run + 1
        now = time.monotonic()
        self.warmup_end = now + self.scenario.load.warmup
        self.stopped_at = None
        self.aggregate = Aggregate(window_start=self.warmup_end)
        self.health = HealthStats()
        self._pending.clear()
        self._reports = 0
        self._rows_shipped = 0
        self.stop_counts = StopCounts() if self.scenario.stop_when is not None else None
        self.request_timeline = self._timeline_sample()
        self.worker_tag = f"r{self.run}-w{self.worker_index()}-{os.getpid()}"
        if self.reactor is None:
            self.reactor = Reactor()
        self.assigner = StreamAssigner(
            self.scenario, self.worker_index(), self.worker_tag, self.dialer, self.reactor, self.aggregate.outputs
        )
        if self.raw is not None:
            self.raw.close()
            self.raw = None
        if self.raw_dir is not None:
            self.raw = RawRecordWriter(
                self.raw_dir, self.worker_tag, f"worker-{self.worker_index()} (pid {os.getpid()})"
            )
        tracing = self.scenario.tracing
        if self.spans is None and tracing is not None and tracing.otlp_endpoint is not None:
            self.spans = SpanExport(self.scenario, tracing.otlp_endpoint, self.worker_tag)
        if not self._monitors:
            self._monitors = [gevent.spawn(self._watch_loop_lag), gevent.spawn(self._watch_cpu)]
        if self.dispatcher is not None:
            self.dispatcher.stop()
            self.dispatcher = None
        schedule = schedule_of(self.scenario)
        if schedule is not None:
            worker, workers = self.share_from_master or (0, 1)
            self.dispatcher = ArrivalDispatcher(
                schedule,
                self.scenario.seed,
                worker,
                workers,
                now,
                [v.name for v in self.scenario.variants],
                self.scenario.load.overflow_policy,
                self.count_unsent,
                self.record_slip,
                self.reactor,
            )
            # Started by `start_arrivals` once every sender exists (Locust's spawning_complete): arrivals due while
            # users were still spawning would find too few senders and queue or be dropped.

    def start_arrivals(self) -> None:
        """Open loop: every user is spawned, send the schedule from now (once per run). The schedule's offsets count
        from this moment; when the spawn outlasted the warm-up, the measured window starts here too (a window
        without arrivals would understate the rate achieved)."""
        d = self.dispatcher
        if d is None or d.started or self.stopping:
            return
        now = time.monotonic()
        d.start(now)
        if now > self.warmup_end:
            self.warmup_end = self.aggregate.window_start = now

    def record_slip(self, seconds: float) -> None:
        """How late the dispatcher handed out an arrival (this interval's health; its own timer's lateness). The
        measured window only, as for the loop lag: not the warm-up (the loop is busy opening connections)."""
        if time.monotonic() >= self.warmup_end:
            self.health.add_slip(seconds)

    def begin_stop(self) -> None:
        """Locust is stopping the users (test_stopping): the measured window ends now; no arrival is scheduled
        after it. What is in flight gets `load.drain` to finish (Locust's stop_timeout: a user stops after its
        current request), and the senders that come free in it send the arrivals already due."""
        now = time.monotonic()
        if self.stopped_at is None and self.started:
            self.stopped_at = now
            self.aggregate.window_end = now
        if self.dispatcher is not None:
            a = self.assigner
            self.dispatcher.end_schedule(
                None if a is None else {v.name: a.senders(v.name) for v in self.scenario.variants}
            )

    def task_started(self, variant: str, mix: str) -> None:
        self.tasks_running += 1
        key = (variant, mix)
        self.tasks_running_by[key] = self.tasks_running_by.get(key, 0) + 1

    def task_ended(self, variant: str, mix: str) -> None:
        self.tasks_running -= 1
        self.tasks_running_by[(variant, mix)] -= 1

    def drain_in_flight(self) -> None:
        """Wait (the loop runs on) until no request is in flight, no agent task is under way and no due arrival is
        queued, or `load.drain` has passed: then Locust kills the users, and what is still running is cut by the
        stop. A run `stop_when:` ended has no drain: its answer is known, and what is in flight is cut (and counted)
        at once."""
        deadline = time.monotonic() + (0.0 if self.stopped_early_now else self.scenario.load.drain)
        d = self.dispatcher
        # The arrivals the stop has just handed to waiting senders (`end_schedule`, from this greenlet) are switched
        # to as the loop's next callbacks: neither queued nor in flight yet. Yield once, so that they go out and are
        # in flight before the senders are judged idle (else they are written, then cut by the stop at once).
        gevent.sleep(0)
        while (self.in_flight or self.tasks_running or (d is not None and d.queued)) and time.monotonic() < deadline:
            gevent.sleep(_DRAIN_POLL)

    def stop_arrivals(self) -> None:
        """The drain is over: what is still waiting for a sender is counted unsent (open loop)."""
        if self.dispatcher is not None:
            self.dispatcher.stop()

    def count_unsent(self, variant: str, arrival: Arrival, outcome: str) -> None:
        """An arrival of `variant` that was not sent: `dropped` (overflow: drop, or the `late` backlog was full), or
        `unsent_at_stop`. Inside the window it is a failed request of class `not_sent` (`GroupStats.add_not_sent`):
        what the client could not send is part of the verdict, not a footnote."""
        if arrival.at < self.warmup_end:  # the window is the arrivals due in it (measure/fates.py)
            outcome = "in_warmup"
        mix = self.assigner.mix_of(arrival.index) if self.assigner is not None else ""
        group = self.aggregate.group(variant, mix)
        group.arrivals[outcome] = group.arrivals.get(outcome, 0) + 1
        group.add_not_sent(in_warmup=outcome == "in_warmup")
        if outcome != "in_warmup" and mix in self._agent_mixes:  # a task never started: a session of the verdict
            self.aggregate.session(variant, mix).add_not_sent()
        if outcome != "in_warmup" and self.stop_counts is not None:
            self.stop_counts.add_not_sent(variant)

    def on_test_stop(self) -> None:
        self.begin_stop()  # (when Locust stopped without test_stopping first)
        self.stop_arrivals()
        self.drain()
        for g in self._monitors:
            g.kill(block=False)
        self._monitors = []
        if self.raw is not None:
            self.raw.flush()
        if self.spans is not None:
            self.spans.flush()  # (the run's spans out before this process reports its end)

    def record(self, rec: RequestRecord) -> None:
        tok = self._tokenizer
        if tok is not None and rec.chunk_text_ends is not None and rec.token_source != TokenSource.SERVER:
            # Here, not as chunks arrive: tokenizing a reply takes ~0.1-1 ms, which the recorder spends at idle
            # priority; the whole reply at once is also what makes the count exact at chunk boundaries.
            apply_token_ends(rec, tok.token_ends(rec.output_text))
        if self._goodput:  # after the recount: TPOT and the ITL gaps depend on the per-chunk counts
            rec.goodput_misses = goodput_misses(rec, self._goodput)
        rec.fate = fate_of(rec, self.aggregate.window_end).value  # what every export names
        to_wall = WALL_CLOCK.offset()  # what this process's monotonic times are on the wall
        wall = time.monotonic() + to_wall
        self.aggregate.add(rec, wall)
        if self.stop_counts is not None and rec.done is not None:
            self.stop_counts.add(rec, rec.done + to_wall)
        self.request_timeline.add(rec, to_wall)
        if rec.scheduled is not None:
            counts = self.aggregate.group(rec.variant, rec.mix).arrivals
            key = "in_warmup" if rec.warmup else "sent"  # by schedule, as the window (measure/fates.py)
            counts[key] = counts.get(key, 0) + 1
            if key == "sent" and self.stopped_at is not None and rec.sent > self.stopped_at:
                # Of the sent, those that went out in the drain (due in the window, sent after it): not in the rate
                # achieved over the window.
                counts["sent_in_drain"] = counts.get("sent_in_drain", 0) + 1
        if self.raw is not None:
            self.raw.write(rec)
        if self.spans is not None:
            self.spans.add(rec, to_wall)

    def submit(self, rec: RequestRecord, after: Callable[[RequestRecord], None]) -> None:
        """Record `rec` (then call `after(rec)`) soon, when the event loop is otherwise idle.

        Recording a finished stream takes a while (its ITL/ICL histograms: the "aggregate.add" rows of `python -m
        bench.hotpath`; the raw shard, Locust's stats); when many streams end together, doing it on the spot would
        delay every other stream's next chunk timestamp by the sum. The recorder runs at idle priority, and catches
        up without waiting once the backlog is long.
        """
        self._pending.append((rec, after))
        self._wake_recorder()

    def _wake_recorder(self) -> None:
        # One recorder for the process's life, asleep while nothing is pending: a greenlet spawned afresh each time
        # the queue emptied (nearly every request in open loop) cost more CPU per request (a new greenlet's frame
        # stack is an mmap, its end a munmap): bench/results/sittings-issue34-recorder.json, bench/README.md.
        if self._recorder is None or self._recorder.dead:
            self._recorder = gevent.spawn(self._record_pending)
        else:
            self._work.set()

    def drain(self) -> None:
        """Record everything submitted so far (before a report is built)."""
        pending = self._pending
        while pending:
            rec, after = pending.popleft()
            self._record_item(rec, after)

    def _record_pending(self) -> None:
        pending, work = self._pending, self._work
        while True:
            while pending:
                if len(pending) < _RECORD_BACKLOG:
                    gevent.idle()
                    if not pending:
                        break
                rec, after = pending.popleft()
                self._record_item(rec, after)
            work.clear()
            if not pending:
                work.wait()

    def _record_item(self, item: RequestRecord | SessionTally, after: Callable[[RequestRecord], None]) -> None:
        if isinstance(item, SessionTally):
            self.aggregate.add_session(item, bool(self._goodput))
            return
        self.record(item)
        after(item)

    def submit_session(self, tally: SessionTally) -> None:
        """Record an agent task that ended, however it ended: after its steps' records (submitted before it, so their
        fates and goodput are stamped when the session reads them)."""
        self._pending.append((tally, _no_after))
        self._wake_recorder()

    def report_since_last(self, final: bool = False) -> dict[str, Any]:
        """What a worker ships to the master: health every time, and the aggregate's delta since it last shipped one
        (which it resets) every `hist_every`-th report (staggered by worker index so the master's merging spreads
        evenly over the intervals) and in the final one.

        The aggregate goes whole or not at all: a histogram travels with the counters of the same requests (the
        censored samples its percentiles rank above it, the requests and errors beside it), so that the master —
        its live tab, its exporter, its report — never combines a histogram and a counter from different moments.
        `raw.rows` says which shard rows the shipped aggregates cover, so a lost worker's later ones are recovered.
        """
        self.drain()
        self.collect_reads()
        health, self.health = self.health, HealthStats()
        if self.raw is not None:
            self.raw.flush()
        self._reports += 1
        every = self.hist_every
        ship = final or every <= 1 or (self._reports + self.worker_index()) % every == 0
        out: dict[str, Any] = {
            "run": self.run,
            "health": health.to_wire(),
            "window": [self.warmup_end if self.started else None, self.stopped_at],
            # Should this worker be lost, the requests it had in flight are named by count (run.lost_in_flight).
            "in_flight": self.in_flight,
            # Agent tasks under way, by (variant, mix): the master's live view sums the workers' latest.
            "tasks_running": [[v, m, n] for (v, m), n in self.tasks_running_by.items()],
        }
        if ship:
            out["agg"] = self.aggregate.pop_delta()
            if self.raw is not None:
                self._rows_shipped = self.raw.rows
        if self.stop_counts is not None and self.collector is None:  # a worker: the master judges
            out["stop"] = self.stop_counts.pop_wire()
        timeline = self.request_timeline.pop_wire()
        if timeline:
            out["request_timeline"] = timeline
        if self.raw is not None:
            # (A shard that could not be written says so: the rows lost, and why.)
            out["raw"] = self.raw.status() | {"rows": self._rows_shipped}
        crashes = self.crashes.pop()
        if crashes:
            out["crashes"] = crashes
        return out

    def collect_reads(self) -> None:
        """Move the reactor's read-delay counters into this interval's health."""
        r = self.reactor
        if r is None:
            return
        self.health.add_reads(*r.pop_read_stats())
        self.health.reads_in_c += r.pop_reads_in_c()

    def _watch_loop_lag(self) -> None:
        # How late the loop wakes from a short sleep = how late every timestamp taken on this loop can be.
        while True:
            t = time.monotonic()
            gevent.sleep(_LAG_PERIOD)
            now = time.monotonic()
            if not self.stopping and now >= self.warmup_end:
                # The measured window only, as for the requests: not the warmup (users spawning, connections
                # opening), nor the stop (Locust's stop() blocks the loop while it inspects its caller's stack;
                # no request is timed across it).
                self.health.add_lag(now - t - _LAG_PERIOD)

    def _watch_cpu(self) -> None:
        proc = psutil.Process()
        proc.cpu_percent(None)
        while True:
            gevent.sleep(_CPU_PERIOD)
            self.health.add_cpu(proc.cpu_percent(None))


def runtime_of(environment: Environment) -> Runtime:
    rt = getattr(environment, "loadgen", None)
    if rt is None:
        raise RuntimeError("loadgen is not initialised: run the locustfile with --scenario FILE")
    assert isinstance(rt, Runtime)
    return rt


def _no_after(_: RequestRecord) -> None:
    """A session has no Locust event of its own: its steps fired theirs."""
