"""Continuous-batching engine simulation: one asyncio task per variant runs a loop of steps.

Each step: admit waiting sequences (FCFS, or with the profile's ``scheduling_policy: priority`` the lowest
``priority`` value first and FCFS among equals, as vLLM's ``--scheduling-policy priority`` orders its waiting queue;
within the batch size and the per-step prefill budget), compute the
step duration from the profile's cost model, sleep until the step's end, then emit tokens to every sequence of the
step through its sink. The planning and emitting halves are plain methods (``plan_step`` / ``complete_step``) so
tests can drive thousands of steps without sleeping.

KV accounting: a sequence reserves ``prompt + max_tokens`` tokens when admitted and keeps them until it finishes or
is aborted. Every request generates exactly ``max_tokens`` tokens (benchmark mode, like vLLM's ``ignore_eos``), so
the reservation is exact and preemption can never be needed; a full cache shows up as queueing instead. For the
same reason priority scheduling only orders the queue: a running sequence is never preempted for a more urgent one
(vLLM's priority scheduler may preempt when its cache runs out).

LoRA adapters (the profile's ``lora_adapters``): a sequence may run on an adapter, which must hold one of the
``max_loras`` slots; loading it prices the admitting step, and a sequence whose adapter finds no slot waits while
those behind it are admitted (loadgen/sim/lora.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import random
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from loadgen.sim.lora import LoraSlots
from loadgen.sim.profiles import BLOCK_SIZE, SimProfile

_log = logging.getLogger(__name__)

# Engine timestamps are loop.time(), which is time.monotonic() for the default loop: the same clock the truth log
# and the load generator use.


class TokenSink(Protocol):
    """Receives a sequence's tokens at the end of each step that produced some."""

    def on_tokens(self, seq: SimSequence, n_tokens: int, finished: bool) -> None: ...


class RequestTooLargeError(ValueError):
    """The request can never fit in the KV cache (prompt + max_tokens > capacity)."""


@dataclass(slots=True, eq=False)
class SimSequence:
    rid: str
    prompt_tokens: int
    max_tokens: int
    sink: TokenSink
    #: Chained hashes of the prompt's whole 16-token blocks (empty unless the profile caches prefixes).
    block_hashes: tuple[int, ...] = ()
    #: The request's ``priority`` (vLLM's: lower is more urgent); orders the queue under priority scheduling only.
    priority: int = 0
    #: The LoRA adapter it runs on ("": the base model), and whether its admission loaded it (it paid the load).
    adapter: str = ""
    lora_loaded: bool = False
    generated: int = 0
    cached_tokens: int = 0
    #: When the scheduler admitted it (monotonic): its queue time ends and its prefill begins (vLLM's split).
    scheduled_at: float | None = None
    #: Number of engine steps that emitted tokens for this sequence.
    steps: int = 0
    running: bool = False
    aborted: bool = False

    @property
    def finished(self) -> bool:
        return self.generated >= self.max_tokens

    @property
    def reserved(self) -> int:
        return self.prompt_tokens + self.max_tokens


@dataclass(slots=True)
class StepPlan:
    """One step: who runs in it and how long it takes."""

    #: Sequences that were already decoding when the step started.
    decoding: list[SimSequence]
    #: Sequences admitted (prefilled) in this step; each emits its first token at the step's end.
    admitted: list[SimSequence]
    uncached_prompt_tokens: int
    ctx_tokens: int
    duration_s: float


@dataclass(slots=True)
class EngineStats:
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    requests_finished: int = 0
    requests_aborted: int = 0
    steps_total: int = 0
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    #: Per step: tokens emitted by each sequence that was already decoding (tests check spec-decode math).
    decode_tokens_hist: dict[int, int] = field(default_factory=dict)
    #: Speculative decoding, as vLLM counts it: draft tokens proposed (k − 1 per sequence and step) and accepted.
    spec_drafts: int = 0
    spec_draft_tokens: int = 0
    spec_accepted_tokens: int = 0


def block_hashes(words: Sequence[str]) -> tuple[int, ...]:
    """Chained hashes of the whole 16-word blocks of a prompt (a block's hash depends on all blocks before it)."""
    hashes: list[int] = []
    h = 0
    for start in range(0, len(words) - BLOCK_SIZE + 1, BLOCK_SIZE):
        h = hash((h, tuple(words[start : start + BLOCK_SIZE])))
        hashes.append(h)
    return tuple(hashes)


class Engine:
    """Simulated continuous-batching inference engine for one variant."""

    def __init__(self, profile: SimProfile, seed: int | str = 0) -> None:
        self.profile = profile
        self.stats = EngineStats()
        self._rng = random.Random(seed)
        # A heap of (priority, arrival number, sequence): FCFS when every key's priority is 0 (`fcfs` gives all 0).
        self._waiting: list[tuple[int, int, SimSequence]] = []
        self._arrivals = itertools.count()
        self._by_priority = profile.scheduling_policy == "priority"
        self._num_waiting = 0
        self._running: list[SimSequence] = []
        self._kv_reserved = 0
        # LRU of cached block hashes; bounded by the cache capacity in blocks. Cached blocks are accounted apart
        # from reservations (a simplification: real engines evict cached blocks as running sequences need room).
        self._prefix_lru: OrderedDict[int, None] = OrderedDict()
        self._lru_capacity = profile.kv_cache_tokens // BLOCK_SIZE
        self.loras = LoraSlots(profile.max_loras)
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    # ---- state read by /metrics ----
    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        return self._num_waiting

    @property
    def kv_usage(self) -> float:
        """Fraction of the KV cache holding live tokens (prompt + generated so far) of running sequences."""
        used = sum(s.prompt_tokens + s.generated for s in self._running)
        return used / self.profile.kv_cache_tokens

    @property
    def kv_reserved(self) -> int:
        return self._kv_reserved

    # ---- requests ----
    def submit(
        self,
        rid: str,
        prompt_words: Sequence[str],
        max_tokens: int,
        sink: TokenSink,
        priority: int = 0,
        adapter: str = "",
    ) -> SimSequence:
        """Queue a request; its tokens arrive through ``sink.on_tokens`` from the engine task. ``priority`` (lower
        first) matters only under the profile's priority scheduling, as vLLM's does. ``adapter``: the LoRA adapter
        it runs on ("": the base model)."""
        if max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        prompt_tokens = len(prompt_words)
        if prompt_tokens + max_tokens > self.profile.kv_cache_tokens:
            raise RequestTooLargeError(
                f"This model's maximum context length is {self.profile.kv_cache_tokens} tokens. However, you "
                f"requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, "
                f"{max_tokens} in the completion)."
            )
        hashes = block_hashes(prompt_words) if self.profile.prefix_caching else ()
        seq = SimSequence(rid, prompt_tokens, max_tokens, sink, hashes, priority, adapter)
        heapq.heappush(self._waiting, (priority if self._by_priority else 0, next(self._arrivals), seq))
        self._num_waiting += 1
        if self._wake is not None:
            self._wake.set()
        return seq

    def abort(self, seq: SimSequence) -> None:
        """Drop a sequence (client went away); a running one frees its batch slot and KV reservation now."""
        if seq.aborted or seq.finished:
            return
        seq.aborted = True
        self.stats.requests_aborted += 1
        if seq.running:
            seq.running = False
            self._running.remove(seq)
            self._kv_reserved -= seq.reserved
            if self._wake is not None:
                self._wake.set()  # a waiting request may fit now
        else:
            # Waiting: removed lazily when it reaches the queue head (removing from the middle is O(n)).
            self._num_waiting -= 1

    # ---- the step loop ----
    def plan_step(self) -> StepPlan | None:
        """Admit what fits and price the step; ``None`` when there is nothing to do."""
        profile = self.profile
        admitted: list[SimSequence] = []
        uncached = loads = 0
        waiting = self._waiting
        no_slot: list[tuple[int, int, SimSequence]] = []  # waiting for a LoRA slot: back in the queue after
        while waiting and len(self._running) + len(admitted) < profile.max_num_seqs:
            seq = waiting[0][2]
            if seq.aborted:
                heapq.heappop(waiting)
                continue
            if self._kv_reserved + seq.reserved > profile.kv_cache_tokens:
                break  # the head blocks the queue, as in vLLM's scheduler
            cached = self._cached_prefix(seq) if profile.prefix_caching else 0
            if admitted and uncached + seq.prompt_tokens - cached > profile.max_prefill_tokens_per_step:
                break  # prefill budget of this step spent; the rest start next step
            if seq.adapter:
                load = self.loras.acquire(seq.adapter, (s.adapter for s in (*self._running, *admitted)))
                if load is None:
                    no_slot.append(heapq.heappop(waiting))
                    continue
                seq.lora_loaded = load
                loads += load
            heapq.heappop(waiting)
            self._num_waiting -= 1
            self._kv_reserved += seq.reserved
            seq.running = True
            seq.cached_tokens = cached
            seq.scheduled_at = time.monotonic()
            if profile.prefix_caching:
                self._insert_prefix(seq)
            uncached += seq.prompt_tokens - cached
            self.stats.prompt_tokens_total += seq.prompt_tokens
            admitted.append(seq)
        for item in no_slot:
            heapq.heappush(waiting, item)
        decoding = list(self._running)
        if not decoding and not admitted:
            return None
        self._running.extend(admitted)
        ctx = sum(s.prompt_tokens + s.generated for s in self._running)
        # Newly admitted sequences take part in the step's forward pass too (their first token comes out of it),
        # so a lone request's TTFT is prefill + one decode step.
        ms = profile.decode_step_ms(len(self._running), ctx) + profile.prefill_ms(uncached)
        if profile.lora_adapters:
            adapters = len({s.adapter for s in self._running} - {""})
            ms += profile.lora_load_ms * loads + profile.lora_ms_per_adapter * adapters
        return StepPlan(decoding, admitted, uncached, ctx, ms / 1000.0)

    def complete_step(self, plan: StepPlan) -> None:
        """Emit the step's tokens: one per admitted sequence, 1 + accepted drafts per decoding sequence."""
        self.stats.steps_total += 1
        k = self.profile.spec_k
        acceptance = self.profile.spec_acceptance
        rand = self._rng.random
        hist = self.stats.decode_tokens_hist
        for seq in plan.decoding:
            if seq.aborted:
                continue
            n = 1
            while n < k and rand() < acceptance:
                n += 1
            hist[n] = hist.get(n, 0) + 1
            if k > 1:
                self.stats.spec_drafts += 1
                self.stats.spec_draft_tokens += k - 1
                self.stats.spec_accepted_tokens += n - 1
            self._emit(seq, min(n, seq.max_tokens - seq.generated))
        for seq in plan.admitted:
            if not seq.aborted:
                self._emit(seq, 1)

    def _emit(self, seq: SimSequence, n: int) -> None:
        seq.generated += n
        seq.steps += 1
        self.stats.generation_tokens_total += n
        done = seq.finished
        if done:
            seq.running = False
            self._running.remove(seq)
            self._kv_reserved -= seq.reserved
            self.stats.requests_finished += 1
        try:
            seq.sink.on_tokens(seq, n, done)
        except Exception:
            # One broken connection must not stop the engine task that serves every other stream.
            _log.exception("token sink of request %s failed; aborting it", seq.rid)
            self.abort(seq)

    def _cached_prefix(self, seq: SimSequence) -> int:
        hits = 0
        for h in seq.block_hashes:
            if h not in self._prefix_lru:
                break
            hits += 1
        # At least one prompt token is always computed: its logits produce the first output token.
        return min(hits * BLOCK_SIZE, max(seq.prompt_tokens - 1, 0))

    def _insert_prefix(self, seq: SimSequence) -> None:
        # Blocks count as cached from admission on, so a request admitted later in the same step already hits.
        self.stats.prefix_cache_queries += seq.prompt_tokens
        self.stats.prefix_cache_hits += seq.cached_tokens
        lru = self._prefix_lru
        for h in seq.block_hashes:
            lru[h] = None
            lru.move_to_end(h)
        while len(lru) > self._lru_capacity:
            lru.popitem(last=False)

    async def run(self) -> None:
        """The step loop; runs until cancelled. Idle costs no CPU: it waits on an event that ``submit`` sets."""
        loop = asyncio.get_running_loop()
        self._wake = wake = asyncio.Event()
        next_end: float | None = None
        while True:
            plan = self.plan_step()
            if plan is None:
                wake.clear()
                await wake.wait()
                next_end = None
                continue
            now = loop.time()
            # Step ends are scheduled back to back on absolute time so sleep overshoot does not accumulate; after
            # idling, or when the loop was starved for longer than a step, restart the schedule from now.
            start = now if next_end is None or now - next_end > plan.duration_s else next_end
            next_end = start + plan.duration_s
            delay = next_end - now
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                await asyncio.sleep(0)  # let connections run even when steps are free
            self.complete_step(plan)

    def start(self) -> asyncio.Task[None]:
        """Start the step loop on the running event loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run(), name=f"sim-engine-{self.profile.name}")
        return self._task

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
