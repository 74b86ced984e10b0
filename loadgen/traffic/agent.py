"""A coding agent's task (`traffic.mixes[].agent`, config/agent.py): its steps, as the model's replies grow them.

`AgentSession(sampler, agent, first)` is the task `first` opens (a spec with `turn == 1`; its `turns` the task's
steps). After each reply, `after(text, tokens, tool_call)` says what the agent does before its next step: how long
its tools run and it pauses (`Pause.wait_s`), and which sub-agents it starts (`Pause.children`, each an
`AgentSession` of its own); `next_step(joined)` then returns the next step's spec, given the final replies of the
sub-agents it waited on. Pure state: no I/O, no sleeping (the Locust plugin's agent runner sends, waits and joins).

What a step appends to the context, after the reply to the last one:
- the reply: the assistant's text, and its tool call when it made one (`tool_calls`, as the chat API carries it;
  every dialect turns it into its own shape);
- the results of the step's drawn tool calls (each `tool_result_tokens` long, seeded words of the mix's kind of
  text): as the `role: tool` message answering the model's call when it made one, else as a user message (a model
  that does not call tools still gets the same context, token for token);
- the sub-agents' final replies, when the step spawned some, as one more such message.
Past `compaction.threshold_tokens` the history is replaced by a summary of `summary_tokens` (the system prompt stays):
the prompt shrinks and its cached prefix is the system prompt alone.

`prompt_tokens` (the target) counts what is sent: the system prompt, every message's text, the reply's tokens by the
server's count (a tool call's arguments included, as servers bill them), the appended results; exact on a server
that bills the messages' tokens and nothing else (the simulator), short by the chat template's markers per message
elsewhere, as multi-turn sessions are (traffic/sessions.py). `shared_prefix_tokens` is the previous step's prompt
(the server has seen it word for word), or the system prompt after a compaction.

Draws come from (seed, stream, index, sub-agent path, step) alone (`RequestSampler.agent_draws`), so every variant
gets the same task: steps, calls, result lengths, waits, sub-agents and compactions where the replies' lengths
agree (a compaction depends on the context's length, which counts the variant's own replies).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from loadgen.traffic.draws import below
from loadgen.traffic.request_spec import RequestSpec

if TYPE_CHECKING:
    from loadgen.config.agent import Agent

__all__ = ["AgentSession", "AgentTask", "Pause", "TextSource"]

_TWO_64 = float(1 << 64)


def _between(draw: int, lo: float, hi: float) -> float:
    return lo + (hi - lo) * (draw / _TWO_64)


def _count(draw: int, bounds: tuple[int, int]) -> int:
    lo, hi = bounds
    return lo + below(draw, hi - lo + 1)


@dataclass(slots=True)
class Pause:
    """What the agent does between a reply and its next step: its tools run for `tool_s`, then it pauses `think_s`;
    meanwhile it starts `children` (sub-agents) and waits for all of them before the next step.

    A replayed trace (traffic/trace_agent.py) says more: `joins[i]` is the parent's step before which child i is
    joined (past the last step: before the task ends; None: every child before the next step), and `join_first`
    waits `wait_s` after the children joined before the next step ended rather than beside them (a recorded gap is
    idle time once all the next call waits on is done)."""

    tool_s: float
    think_s: float
    children: list[AgentTask]
    joins: list[int] | None = None
    join_first: bool = False

    @property
    def wait_s(self) -> float:
        return self.tool_s + self.think_s


class TextSource(Protocol):
    """What an agent task draws its text and numbers from: the scenario's `TextSource` (traffic/sampler.py, which
    builds the tasks; a protocol here so that this module does not import it back)."""

    def agent_draws(self, index: int, branch: str, step: int, salt: str = "") -> tuple[int, ...]: ...

    def system_tokens(self, mix: str) -> int: ...

    def output_range(self, mix: str) -> tuple[int, int]: ...

    def joiner(self, mix: str) -> str: ...

    def filler(self, mix: str, draw: int, n_words: int) -> str: ...

    def blocks_text(self, blocks: list[tuple[object, int]]) -> str: ...


class AgentTask(Protocol):
    """What the agent runner (locust_plugin/agent_runner.py) drives: `AgentSession`, or a replayed trace's
    session (traffic/trace_agent.py)."""

    first: RequestSpec
    compactions: int

    @property
    def over(self) -> bool: ...

    @property
    def due_s(self) -> float | None:
        """When the next step (the one `first` or `next_step` returned last) is due, seconds after the task's first
        step was sent: a replay on its recorded clock (`timing: offsets`). None: no clock, `Pause.wait_s` times it."""
        ...

    def after(self, text: str, tokens: int, tool_call: dict[str, str] | None = None) -> Pause: ...

    def next_step(self, joined: list[tuple[str, int]] | None = None) -> RequestSpec | None: ...


class AgentSession:
    """One agent's task (the top-level agent's, or a sub-agent's: `first.branch` its path)."""

    __slots__ = (
        "first",
        "agent",
        "depth",
        "compactions",
        "spawned",
        "_sampler",
        "_messages",
        "_last",
        "_reply_tokens",
        "_results",
        "_results_tokens",
        "_system_tokens",
        "_sep",
    )

    def __init__(self, sampler: TextSource, agent: Agent, first: RequestSpec, depth: int = 0) -> None:
        if first.turn != 1 or first.turns < 1:
            raise ValueError(f"request {first.index} of mix {first.mix!r} opens no agent task (turn {first.turn})")
        self.first = first
        self.agent = agent
        self.depth = depth  # 0: the task's top-level agent; a sub-agent one more than its parent
        self.compactions = 0
        self.spawned = 0  # sub-agents started so far (their paths number on from it)
        self._sampler = sampler
        self._system_tokens = sampler.system_tokens(first.mix) if first.system_prompt else 0
        self._sep = sampler.joiner(first.mix)
        self._messages: list[dict[str, Any]] = (
            [{"role": "system", "content": first.system_prompt}] if first.system_prompt else []
        )
        self._messages.append({"role": "user", "content": first.prompt})
        self._last = first
        self._reply_tokens = 0  # the last reply's, as it entered the context
        self._results: list[str] = []  # the pending tool results, appended with the next step
        self._results_tokens = 0

    @property
    def step(self) -> int:
        """The last step handed out (1 right after the task opened)."""
        return self._last.turn

    @property
    def over(self) -> bool:
        """Whether the last step handed out is the task's last."""
        return self._last.turn >= self.first.turns

    @property
    def due_s(self) -> float | None:
        """No recorded clock: the pauses time the steps."""
        return None

    @property
    def last(self) -> RequestSpec:
        return self._last

    def after(self, text: str, tokens: int, tool_call: dict[str, str] | None = None) -> Pause:
        """The reply `text` (`tokens` long by the server's count; `tool_call` {id, name, arguments} when it called
        one) to the last step came: the history takes it, and the step's tool calls and sub-agents are drawn."""
        first, last, agent = self.first, self._last, self.agent
        called = tool_call is not None and bool(tool_call.get("id"))
        if tool_call is not None and called:
            fn = {"name": tool_call["name"], "arguments": tool_call["arguments"]}
            call = {"id": tool_call["id"], "type": "function", "function": fn}
            self._messages.append({"role": "assistant", "content": text or None, "tool_calls": [call]})
        else:
            self._messages.append({"role": "assistant", "content": text})
        # A reply the stream kept nothing of adds nothing to the context, so no tokens either: the target counts
        # what is sent.
        self._reply_tokens = tokens if text or called else 0
        if self.over:
            return Pause(0.0, 0.0, [])
        d_calls, d_tool, d_think, d_spawn, d_count, d_start = self._sampler.agent_draws(
            first.index, first.branch, last.turn
        )
        self._results, self._results_tokens = [], 0
        for j in range(_count(d_calls, agent.tool_calls)):
            d_len, d_text, *_ = self._sampler.agent_draws(first.index, first.branch, last.turn, f"r{j}")
            n = _count(d_len, agent.tool_result_tokens)
            self._results.append(self._sampler.filler(first.mix, d_text, n))
            self._results_tokens += n
        subs = agent.subagents
        children: list[AgentTask] = []
        if self.depth < subs.depth and subs.share > 0 and d_spawn / _TWO_64 < subs.share:
            children = [self._child(text, self._reply_tokens) for _ in range(_count(d_count, subs.count))]
        return Pause(_between(d_tool, *agent.tool_latency), _between(d_think, *agent.think_time), children)

    def _child(self, parent_text: str, parent_tokens: int) -> AgentSession:
        """The next sub-agent: its own context, opened by the parent's actual reply and an instruction of its own."""
        first, subs = self.first, self.agent.subagents
        self.spawned += 1
        path = f"{first.branch}.{self.spawned}" if first.branch else str(self.spawned)
        d_steps, d_task, d_text, d_out, *_ = self._sampler.agent_draws(first.index, path, 0)
        n_task = _count(d_task, subs.task_tokens)
        task = self._sampler.filler(first.mix, d_text, n_task)
        prompt = self._sep.join([parent_text, task]) if parent_text else task
        spec = RequestSpec(
            first.index,
            first.mix,
            first.bucket,
            first.system_prompt,
            prompt,
            self._system_tokens + (parent_tokens if parent_text else 0) + n_task,
            self._output_tokens(d_out),
            shared_prefix_tokens=self._system_tokens,
            turn=1,
            turns=_count(d_steps, subs.steps),
            priority_class=first.priority_class,
            branch=path,
        )
        return AgentSession(self._sampler, self.agent, spec, self.depth + 1)

    def _output_tokens(self, draw: int) -> int:
        """A later step's (or a sub-agent's) max_tokens: the agent's range, else the mix's."""
        bounds = self.agent.output_tokens or self._sampler.output_range(self.first.mix)
        return _count(draw, bounds)

    def next_step(self, joined: list[tuple[str, int]] | None = None) -> RequestSpec | None:
        """The next step's spec, after the tools (and the sub-agents, whose final replies `joined` holds: (text,
        tokens) each) ended; None once the task is over."""
        first, last, agent = self.first, self._last, self.agent
        if last.turn >= first.turns:
            return None
        step = last.turn + 1
        pieces, added = list(self._results), self._results_tokens
        for text, tokens in joined or ():
            if text:
                pieces.append(text)
                added += tokens
        results = self._sep.join(pieces)
        answering = self._messages[-1].get("tool_calls")
        if answering:
            self._messages.append({"role": "tool", "tool_call_id": answering[0]["id"], "content": results})
        else:
            self._messages.append({"role": "user", "content": results})
        prompt_tokens = last.prompt_tokens + self._reply_tokens + added
        shared = last.prompt_tokens
        compaction = agent.compaction
        system = self._messages[0] if first.system_prompt else None
        if compaction is not None and prompt_tokens > compaction.threshold_tokens:
            # A summary replaces the history (the system prompt stays), then this step's results: the agent goes on
            # from there, and a prefix cache has the system prompt alone to reuse.
            self.compactions += 1
            d_text = self._sampler.agent_draws(first.index, first.branch, step, "c")[0]
            summary = self._sampler.filler(first.mix, d_text, compaction.summary_tokens)
            content = self._sep.join([summary, results]) if results else summary
            self._messages = [*([system] if system else []), {"role": "user", "content": content}]
            prompt_tokens = self._system_tokens + compaction.summary_tokens + added
            shared = self._system_tokens
        d_out = self._sampler.agent_draws(first.index, first.branch, step, "o")[0]
        spec = RequestSpec(
            first.index,
            first.mix,
            first.bucket,
            first.system_prompt,
            # For servers that take one prompt: the conversation after the system prompt, a message a line.
            "\n".join(m["content"] or "" for m in self._messages[1 if system else 0 :]),
            prompt_tokens,
            self._output_tokens(d_out),
            tuple(self._messages),
            shared_prefix_tokens=shared,
            turn=step,
            turns=first.turns,
            priority_class=first.priority_class,
            branch=first.branch,
        )
        self._last = spec
        self._results, self._results_tokens = [], 0
        return spec
