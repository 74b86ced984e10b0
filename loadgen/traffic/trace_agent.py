"""An agentic trace (`traffic.agent_trace`, read by traffic/agent_traces.py) replayed as agent tasks.

Each recorded root session is one task (request ``i`` of a stream opens the session the trace table gives it: the
open-loop stream 0 walks the sessions in order, other streams start apart, as `traffic.trace`'s rows do); its calls
are the task's steps, and `TraceAgentSession` has `AgentSession`'s interface (traffic/agent.py), so the agent runner
(locust_plugin/agent_runner.py) sends it, waits and joins as it does a synthetic agent's.

How a recorded session maps onto the run:
- **Prompts.** Call k's prompt is exactly its recorded ``input_tokens`` (words; with a tokenizer, its tokens): the
  blocks of its hash ids in order (each id the same text wherever it appears, the Mooncake replay's rule:
  traffic/trace_table.py), the last one cut to what the length leaves, then a block of the session's own for the
  tokens past its ids. Ids are scoped by the trace's ``hash_scope``, so two conversations' equal ids are different
  text. A call whose first k ids are an earlier call's shares exactly that prefix with it.
- **Replies.** ``max_tokens`` is the recorded ``output_tokens`` (at least 1; the variant's ``exact_output`` makes the
  server write them all). The reply's text goes no further in a top-level agent: the next call is its recorded
  length, whose blocks already stand for the reply and the tool results.
- **Timing** (``timing``). offsets: call k is due at its recorded ``offset_s`` (the reader's, idle stretches cut to
  ``max_gap``) less the root's first call's, times ``time_scale``, from when the task's first step was sent
  (``due_s``; a sub-agent's calls too, on the root's clock); the runner sends it then, or when the calls it waits on
  are done if that is later, and the pause holds no wait of its own. gaps: after call k the agent waits the
  recorded ``gap_before_s`` of call k+1 (capped by ``max_gap`` when read; times ``time_scale``), once the sub-agents
  joined before call k+1 have ended: the gap is idle time after all the call waits on (``Pause.join_first``), as the
  reader measured it; ``due_s`` is None.
- **Sub-agents.** A child recorded after call k (``after_call``) starts when call k's reply came, on a connection of
  its own, and is joined exactly before its recorded ``join_before`` call (a child the recorded parent did not wait
  for runs on past the parent's next calls; one joined at the parent's end holds the task open until it ends). A
  child recorded at its parent's start (``after_call == -1``) starts after the parent's first call instead: the
  runner sends a task's first step before anything else. A child that made no model call of its own is left out.
- **A child's prompt** holds its parent's actual reply (the text the runner hands to ``after()``), placed after the
  leading blocks it shares with the parent's call that spawned it (the system prompt a sub-agent shares) and before
  its own blocks, in every call of the child (it is the child's task, part of its context throughout). The reply's
  tokens take the place of as many of the child's own tokens, so the prompt stays its recorded length; when the
  reply is longer than what the shared blocks leave, the prompt is the shared blocks plus the whole reply, longer
  than recorded (the target counts it, so the records say so).
- **Ids.** A step's ``index`` is the task's request index, its ``branch`` the sub-agent's path ("1", "1.2"), its
  ``turn`` the call's place (1-based) and ``turns`` the agent's calls: pair keys and session tallies as for the
  synthetic agent. ``shared_prefix_tokens`` predicts what the previous call of the same agent (a sub-agent's first:
  its parent's spawning call) sent of this prompt's prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from loadgen.traffic.agent import AgentTask, Pause, TextSource
from loadgen.traffic.agent_graph import TraceSession, _fail
from loadgen.traffic.agent_traces import read_agent_trace
from loadgen.traffic.dataset_table import length_class
from loadgen.traffic.request_spec import RequestSpec

if TYPE_CHECKING:
    from loadgen.config.trace import AgentTraceReplay

__all__ = ["AgentTraceTable", "Clock", "TraceAgentSession", "agent_trace_of"]

_CACHE: dict[tuple[str, float | None], list[TraceSession]] = {}

# A prompt as pieces: (key, tokens) blocks, or the parent's reply (its key `_REPLY`, with its text).
_REPLY = "reply"


def agent_trace_of(replay: AgentTraceReplay) -> list[TraceSession]:
    """The root sessions of ``replay``'s file that make at least one call (read once per process); raises
    ``SubpathIssues`` naming the file, line and entry of a malformed one."""
    key = (str(Path(replay.path).absolute()), replay.max_gap)
    sessions = _CACHE.get(key)
    if sessions is None:
        read = read_agent_trace(replay.path, max_gap_s=replay.max_gap)
        sessions = [s for s in read if s.calls]
        if not sessions:
            raise _fail(replay.path, None, "", "the trace holds no session with a model call: nothing to replay")
        _CACHE[key] = sessions
    return sessions


class AgentTraceTable:
    """A trace's root sessions as the sampler's table (one mix, the scenario's only one)."""

    __slots__ = ("name", "sessions", "block_tokens", "clock", "overhead")

    def __init__(
        self, name: str, sessions: list[TraceSession], block_tokens: int | None, clock: Clock | None = None
    ) -> None:
        self.name = name
        self.sessions = sessions
        self.block_tokens = block_tokens  # None: each call's own
        self.clock = clock or Clock()
        self.overhead: int | None = None

    def __len__(self) -> int:
        return len(self.sessions)

    def first_spec(self, sampler: TextSource, index: int, row: int) -> RequestSpec:
        """Request ``index``: the first call of session ``row``, opening its task."""
        session = self.sessions[row]
        plan = _Plan(session, self.block_tokens)
        text, tokens, shared = plan.prompt(sampler, 0)
        return plan.spec(RequestSpec(index, self.name, "", "", "", 0, 0, branch=""), 0, text, tokens, shared)


@dataclass(frozen=True, slots=True)
class Clock:
    """How a replay times its calls (`traffic.agent_trace.timing`, `time_scale`)."""

    offsets: bool = True  # timing: offsets (False: gaps)
    scale: float = 1.0

    @classmethod
    def of(cls, replay: AgentTraceReplay) -> Clock:
        return cls(replay.timing == "offsets", replay.time_scale)


@dataclass(frozen=True, slots=True)
class _Plan:
    """How one session's prompts are made: its blocks, and (a sub-agent) its parent's reply after the first
    ``split`` of them."""

    session: TraceSession
    block_tokens: int | None
    reply: tuple[str, int] | None = None
    split: int = 0
    clock: Clock = Clock()
    origin_s: float | None = None  # the root's first call's offset (None: this is the root)

    def due_s(self, k: int) -> float | None:
        """Offsets: call ``k``'s due time, seconds after the root's first call was sent; gaps: None."""
        if not self.clock.offsets:
            return None
        calls = self.session.calls
        origin = calls[0].offset_s if self.origin_s is None else self.origin_s
        return (calls[k].offset_s - origin) * self.clock.scale

    def pieces(self, k: int) -> list[tuple[object, int]]:
        """Call ``k``'s prompt as (key, tokens) pieces in order, summing to its length (more: a long reply)."""
        call = self.session.calls[k]
        size = self.block_tokens or call.block_tokens
        scope = self.session.hash_scope
        blocks: list[tuple[object, int]] = [((scope, h), size) for h in call.hash_ids] if size else []
        left = call.input_tokens
        out: list[tuple[object, int]] = []
        reply = self.reply
        for i, (key, n) in enumerate(blocks):
            if reply is not None and i == self.split:
                out.append((_REPLY, reply[1]))
                left -= reply[1]
                reply = None
            if left <= 0:
                break
            out.append((key, min(n, left)))
            left -= n
        if reply is not None:  # the blocks ran out first
            out.append((_REPLY, reply[1]))
            left -= reply[1]
        if left > 0:
            out.append((("own", scope, self.session.id), left))
        return out

    def prompt(self, sampler: TextSource, k: int) -> tuple[str, int, int]:
        """Call ``k``'s (prompt text, tokens, shared prefix tokens with the call before it)."""
        pieces = self.pieces(k)
        texts: list[str] = []
        run: list[tuple[object, int]] = []
        for key, n in pieces:
            if key == _REPLY:
                texts.append(sampler.blocks_text(run))
                run = []
                texts.append(self.reply[0] if self.reply else "")
            else:
                run.append((key, n))
        texts.append(sampler.blocks_text(run))
        if k:
            shared = _common(self.pieces(k - 1), pieces)
        else:  # a sub-agent's first call shares with its parent's the blocks before the reply; a root's, nothing
            keys = [key for key, _ in pieces]
            shared = sum(n for _, n in pieces[: keys.index(_REPLY)]) if _REPLY in keys else 0
        return " ".join(t for t in texts if t), sum(n for _, n in pieces), shared

    def spec(self, first: RequestSpec, k: int, text: str, tokens: int, shared: int) -> RequestSpec:
        call = self.session.calls[k]
        return RequestSpec(
            first.index,
            first.mix,
            first.bucket or length_class(call.input_tokens),
            "",
            text,
            tokens,
            max(call.output_tokens, 1),
            shared_prefix_tokens=shared,
            turn=k + 1,
            turns=len(self.session.calls),
            priority_class=first.priority_class,
            branch=first.branch,
        )


def _common(a: list[tuple[object, int]], b: list[tuple[object, int]]) -> int:
    """Tokens of the prefix two piece lists share (a piece cut shorter in one is still a prefix of the other)."""
    shared = 0
    for (ka, na), (kb, nb) in zip(a, b, strict=False):
        if ka != kb:
            break
        shared += min(na, nb)
        if na != nb:
            break
    return shared


def _leading(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


class TraceAgentSession:
    """One recorded agent's calls as a task's steps (the root's, or a sub-agent's: ``first.branch`` its path)."""

    __slots__ = ("first", "compactions", "spawned", "_sampler", "_plan", "_last")

    def __init__(
        self,
        sampler: TextSource,
        session: TraceSession,
        first: RequestSpec,
        block_tokens: int | None = None,
        clock: Clock | None = None,
    ) -> None:
        if first.turn != 1 or first.turns != len(session.calls):
            raise ValueError(f"request {first.index} of mix {first.mix!r} does not open trace session {session.id!r}")
        self.first = first
        self.compactions = 0  # a recorded session compacts in its lengths, not here
        self.spawned = 0
        self._sampler = sampler
        self._plan = _Plan(session, block_tokens, clock=clock or Clock())
        self._last = first

    @classmethod
    def _child(cls, sampler: TextSource, plan: _Plan, opening: RequestSpec) -> TraceAgentSession:
        """A sub-agent's session, its first step made by ``plan`` (which holds the parent's reply)."""
        spec = plan.spec(opening, 0, *plan.prompt(sampler, 0))
        child = cls(sampler, plan.session, spec, plan.block_tokens)
        child._plan = plan
        return child

    @property
    def session(self) -> TraceSession:
        return self._plan.session

    @property
    def step(self) -> int:
        return self._last.turn

    @property
    def over(self) -> bool:
        return self._last.turn >= self.first.turns

    @property
    def last(self) -> RequestSpec:
        return self._last

    @property
    def due_s(self) -> float | None:
        """Offsets: when the step ``last`` (the next to send) is due, seconds after the task's first step was sent;
        gaps: None."""
        return self._plan.due_s(self._last.turn - 1)

    def after(self, text: str, tokens: int, tool_call: dict[str, str] | None = None) -> Pause:
        """The reply to the last step came: the recorded gap before the next call (gaps; offsets: none, the next
        step's ``due_s`` times it), and the sub-agents recorded after this one (each joined before its recorded call:
        ``Pause.joins``)."""
        session, k = self._plan.session, self._last.turn - 1
        reply = (text, tokens) if text else None
        children: list[AgentTask] = []
        joins: list[int] = []
        for child in session.children:
            if child.after_call != k and not (k == 0 and child.after_call < 0):
                continue
            if not child.session.calls:
                continue  # no model call of its own: nothing to send
            self.spawned += 1
            path = f"{self.first.branch}.{self.spawned}" if self.first.branch else str(self.spawned)
            spawning = session.calls[max(child.after_call, 0)]
            split = _leading(child.session.calls[0].hash_ids, spawning.hash_ids)
            root = self._plan.session.calls[0].offset_s if self._plan.origin_s is None else self._plan.origin_s
            plan = _Plan(child.session, self._plan.block_tokens, reply, split, self._plan.clock, root)
            opening = RequestSpec(
                self.first.index,
                self.first.mix,
                self.first.bucket,
                "",
                "",
                0,
                0,
                priority_class=self.first.priority_class,
                branch=path,
            )
            children.append(TraceAgentSession._child(self._sampler, plan, opening))
            joins.append(child.join_before + 1)  # the parent's step (1-based) that waits for it
        clock = self._plan.clock
        gap = 0.0 if self.over or clock.offsets else session.calls[k + 1].gap_before_s * clock.scale
        return Pause(gap, 0.0, children, joins, join_first=True)

    def next_step(self, joined: list[tuple[str, int]] | None = None) -> RequestSpec | None:
        """The next call's spec (its recorded length: the joined sub-agents' replies are in its blocks, not spliced
        in); None once the session is over."""
        if self.over:
            return None
        k = self._last.turn  # the next call's 0-based place
        text, tokens, shared = self._plan.prompt(self._sampler, k)
        self._last = self._plan.spec(self.first, k, text, tokens, shared)
        return self._last
