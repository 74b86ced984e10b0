"""Coding-agent sessions (`traffic.mixes[].agent`): a mix whose requests are agent tasks, not single prompts.

A task is a loop of steps. Step 1 sends the mix's own request (its system prompt, then the task: repository
snippets and the instruction). Every later step sends the whole context so far — every earlier message, the model's
actual replies and the tool calls they made, and the results of those calls — plus nothing else: the results of the
step's drawn tool calls are what grows it. Between a reply and the next step the tools run (`tool_latency`, drawn
per step) and the agent harness pauses (`think_time`). A step may spawn sub-agents (`subagents`): each is a task of
its own with its own context (opened by the parent's actual reply), run concurrently on its own connection; the
parent goes on when all have ended, their final replies appended to its context as tool results. When the context
passes `compaction.threshold_tokens` the agent compacts it: a summary of `summary_tokens` replaces the history, so
the next prompt is short and its prefix no longer cached.

Every draw comes from (seed, stream, index) and the step, so every variant gets the same tasks: the same steps, tool
calls, result lengths, waits and sub-agents; only the replies (hence the context's text) are each variant's own.

The defaults and where they come from are in docs/agents.md ("Where the defaults come from").
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from loadgen.config.errors import SubpathIssues
from loadgen.config.types import Duration, TokenRange

__all__ = ["AGENT_DOC", "Agent", "Compaction", "SubAgents"]

AGENT_DOC = (
    "Send this mix as coding-agent tasks: each request opens a task of `steps` model calls whose context grows with "
    "the replies, their tool calls and the tools' results, with tool latency between steps, sub-agents spawned and "
    "joined, and compaction past a threshold; the report judges sessions as well as requests. The built-in `agent` "
    "mix has it on by default ({} takes the defaults). Null: single requests (or `sessions`)."
)


class SubAgents(BaseModel):
    """Sub-agents a step spawns: each a task of its own, run concurrently, joined before the parent's next step."""

    model_config = ConfigDict(extra="forbid")

    share: float = Field(
        default=0.1,
        ge=0,
        le=1,
        allow_inf_nan=False,
        description="Share of a task's steps (not its last) that spawn sub-agents, drawn per step. 0: none.",
    )
    count: TokenRange = Field(default=(1, 3), description="[min, max] sub-agents a spawning step starts at once.")
    steps: TokenRange = Field(default=(3, 12), description="[min, max] steps of each sub-agent's task.")
    task_tokens: TokenRange = Field(
        default=(100, 400),
        description="[min, max] tokens of a sub-agent's instruction, sent after the parent's actual reply that "
        "spawned it (its opening user message).",
    )
    depth: int = Field(default=1, ge=1, le=3, description="How deep sub-agents nest (1: sub-agents spawn none).")


class Compaction(BaseModel):
    """Context compaction: past a threshold, a summary replaces the history."""

    model_config = ConfigDict(extra="forbid")

    threshold_tokens: int = Field(
        default=100_000,
        ge=1,
        description="Compact before the step whose prompt would pass this many tokens (the context as sent).",
    )
    summary_tokens: int = Field(
        default=3_000, ge=1, description="Tokens of the summary that replaces the history (after the system prompt)."
    )

    @model_validator(mode="after")
    def _check(self) -> Compaction:
        if self.summary_tokens >= self.threshold_tokens:
            raise SubpathIssues(
                [(("summary_tokens",), f"must be below threshold_tokens ({self.threshold_tokens}) to shorten anything")]
            )
        return self


class Agent(BaseModel):
    """A coding agent's task loop (see the module's docstring)."""

    model_config = ConfigDict(extra="forbid")

    steps: TokenRange = Field(
        default=(10, 50),
        description="[min, max] model calls of a task (its top-level agent), drawn uniformly per task.",
    )
    tool_calls: TokenRange = Field(
        default=(1, 3),
        description="[min, max] tool calls per step (parallel calls: their results come back together), drawn "
        "per step; the task's last step makes none (it answers).",
    )
    tool_result_tokens: TokenRange = Field(
        default=(100, 2_000),
        description="[min, max] tokens of each tool call's result (a file read, a search, a test run), drawn per "
        "call: what grows the context.",
    )
    tool_latency: tuple[Duration, Duration] = Field(
        default=(0.2, 4.0),
        description="[min, max] seconds the step's tools run (parallel calls: the slowest), drawn uniformly per "
        "step, e.g. [0.2s, 4s].",
    )
    think_time: tuple[Duration, Duration] = Field(
        default=(0.0, 0.0),
        description="[min, max] extra pause of the agent harness between a step's tools and its next call "
        "(a person approving, a rate limiter), drawn per step.",
    )
    output_tokens: TokenRange | None = Field(
        default=None,
        description="[min, max] max_tokens of each step after the first (the reply: reasoning and tool calls). "
        "Null: the mix's own output range.",
    )
    subagents: SubAgents = Field(default_factory=SubAgents, description="Sub-agents spawned by steps.")
    compaction: Compaction | None = Field(
        default_factory=Compaction, description="Context compaction; null: the context grows without bound."
    )

    @model_validator(mode="after")
    def _check(self) -> Agent:
        issues: list[tuple[tuple[str | int, ...], str]] = []
        for name in ("tool_latency", "think_time"):
            lo, hi = getattr(self, name)
            if hi < lo:
                issues.append(((name,), f"expected [min, max] with min <= max, got [{lo:g}, {hi:g}]"))
        if issues:
            raise SubpathIssues(issues)
        return self
