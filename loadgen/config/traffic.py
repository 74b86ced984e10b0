"""The traffic part of a scenario: mixes of prompt-length buckets (with shared prefixes, sessions), dataset replay.

The load (users, arrivals, stages) lives in config/load.py, re-exported here and by config.scenario.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    WithJsonSchema,
    model_validator,
)

from loadgen.config.agent import AGENT_DOC, Agent
from loadgen.config.builtin_mixes import BUILTIN_MIX_NAMES, TextKind
from loadgen.config.cancel import Cancel
from loadgen.config.classes import Classes
from loadgen.config.errors import SubpathIssues, describe_value
from loadgen.config.images import IMAGES_DOC, Images
from loadgen.config.load import ARRIVAL_KIND_NAMES, Arrival, Load, Overflow
from loadgen.config.tools import TOOLS_DOC, Tools
from loadgen.config.trace import AgentTraceReplay, TraceReplay
from loadgen.config.types import NAME_PATTERN, Duration, MixName, PositiveFloat, TokenRange
from loadgen.registry import UnknownNameError

__all__ = [
    "ARRIVAL_KIND_NAMES",
    "Arrival",
    "Bucket",
    "DatasetReplay",
    "MIN_QUESTION_TOKENS",
    "Documents",
    "Load",
    "MixDef",
    "MixRef",
    "Overflow",
    "Sessions",
    "Traffic",
]


class Bucket(BaseModel):
    """A band of prompt lengths within a mix, drawn with probability proportional to its weight."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_PATTERN, description="Bucket name used in reports, e.g. `short`.")
    prompt_tokens: TokenRange = Field(
        description="[min, max] prompt length in tokens, system prompt included; drawn uniformly."
    )
    weight: PositiveFloat = Field(default=1.0, description="Relative frequency of this bucket within the mix.")


# A RAG request's question (after its documents) keeps at least this many tokens: a request too short for all
# of its documents plus this takes as many documents as fit, possibly none (the sampler uses the same figure).
MIN_QUESTION_TOKENS = 16


class Documents(BaseModel):
    """A shared pool of retrieved documents: each request of the mix carries `per_request` of them, drawn by
    Zipf popularity, between the system prompt and the question (so they form a real, reusable prefix)."""

    model_config = ConfigDict(extra="forbid")

    pool: StrictInt = Field(default=200, ge=1, description="Documents in the pool (seeded: the same every run).")
    per_request: StrictInt = Field(
        default=4,
        ge=1,
        description="Distinct documents per request. A request too short for them all (after the system prompt "
        "and a 16-token question) takes as many as fit, possibly none.",
    )
    tokens: StrictInt = Field(default=250, ge=1, description="Length of every document, in tokens.")
    zipf: float = Field(
        default=1.0,
        ge=0,
        allow_inf_nan=False,
        description="Popularity skew: document of rank r is drawn with weight 1/r**zipf (0: uniform; 1: the "
        "most popular is drawn twice as often as the second). Higher: more prefix reuse.",
    )

    @model_validator(mode="after")
    def _check(self) -> Documents:
        if self.per_request > self.pool:
            raise SubpathIssues([(("per_request",), f"exceeds the pool ({self.pool}): documents are distinct")])
        return self


class MixDef(BaseModel):
    """A traffic mix: prompt-length buckets, an output-length range, optional shared system prompts and an
    optional pool of shared documents (RAG)."""

    model_config = ConfigDict(extra="forbid")

    buckets: list[Bucket] = Field(min_length=1, description="Prompt-length buckets (at least one).")
    output_tokens: TokenRange = Field(
        description="[min, max] tokens to generate (`max_tokens`), drawn uniformly per request."
    )
    system_prompt_tokens: StrictInt = Field(
        default=0,
        ge=0,
        description="Length of a system prompt shared by every request of this mix: the reusable prefix that "
        "prefix caching feeds on. Counts toward each request's prompt length. 0: no system prompt.",
    )
    system_prompts: StrictInt = Field(
        default=1,
        ge=1,
        description="Distinct system prompts (each `system_prompt_tokens` long, seeded); each request draws one "
        "uniformly. 1: one prompt shared by all.",
    )
    documents: Documents | None = Field(
        default=None,
        description="RAG: each request is system prompt + documents from this shared pool + a question that "
        "fills the rest of its length. Null: no documents.",
    )
    text: TextKind = Field(
        default="prose",
        description="What the question is made of: `prose` (common words) or `code` (indented source lines of "
        "identifiers, keywords and operators; the built-in code mix). The system prompt and documents stay prose. "
        "Either way one word or code piece is about one token, and exactly one with a `tokenizer`.",
    )
    unique_prefixes: StrictBool = Field(
        default=False,
        description="Open each request with its unique tag (before the system prompt and documents), so no two "
        "requests share a cacheable prefix: the baseline a prefix cache is measured against, with the same "
        "lengths and the same shared text otherwise.",
    )
    images: Images | None = Field(default=None, description=IMAGES_DOC)
    description: str = Field(default="", description="Free text shown in reports.")

    @model_validator(mode="after")
    def _check(self) -> MixDef:
        issues: list[tuple[tuple[str | int, ...], str]] = []
        seen: set[str] = set()
        for i, bucket in enumerate(self.buckets):
            if bucket.name in seen:
                issues.append((("buckets", i, "name"), f"bucket {bucket.name!r} is defined twice"))
            seen.add(bucket.name)
        shortest = min(bucket.prompt_tokens[0] for bucket in self.buckets)
        # The prompt proper needs at least one word (its unique tag) after the shared system prompt.
        if self.system_prompt_tokens >= shortest:
            issues.append(
                (
                    ("system_prompt_tokens",),
                    f"must be smaller than the shortest bucket's minimum prompt length ({shortest}), "
                    "since the system prompt counts toward the prompt length",
                )
            )
        longest = max(bucket.prompt_tokens[1] for bucket in self.buckets)
        if (
            self.documents is not None
            and self.system_prompt_tokens + MIN_QUESTION_TOKENS + self.documents.tokens > longest
        ):
            issues.append(
                (
                    ("documents", "tokens"),
                    f"no request could carry a document: the longest bucket's maximum ({longest}) is below the "
                    f"system prompt + a {MIN_QUESTION_TOKENS}-token question + one document",
                )
            )
        if issues:
            raise SubpathIssues(issues)
        return self


def _turn_count(value: Any) -> Any:
    # One whole number is a fixed count: the same as [n, n] (TokenRange then checks the range).
    if isinstance(value, int) and not isinstance(value, bool):
        return [value, value]
    if isinstance(value, list | tuple):
        return value
    raise ValueError(f"expected a whole number of turns, or [min, max], got {describe_value(value)}")


TurnCount = Annotated[
    TokenRange,
    BeforeValidator(_turn_count),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 1},
                {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 2, "maxItems": 2},
            ]
        }
    ),
]


class Sessions(BaseModel):
    """Multi-turn sessions: a user holds a conversation. Turn 1 is the mix's own request; each later turn sends the
    whole history so far (with the model's actual replies) plus a new user message, to the same variant."""

    model_config = ConfigDict(extra="forbid")

    turns: TurnCount = Field(
        description="Turns per session: a whole number, or [min, max] drawn uniformly per session (seeded, so "
        "every variant gets the same sessions)."
    )
    think_time: Duration = Field(
        default=0.0,
        ge=0,
        description="Pause between a turn's reply and the next turn (the user reading and typing), e.g. `2s`. "
        "Between sessions the user waits `load.think_time` (closed loop) or for its next arrival (open loop).",
    )
    follow_up_tokens: TokenRange = Field(
        default=(20, 100),
        description="[min, max] length of each follow-up user message in tokens, drawn uniformly per turn.",
    )

    @model_validator(mode="after")
    def _check(self) -> Sessions:
        if self.turns[1] < 2:
            raise SubpathIssues([(("turns",), "a session of one turn is a plain request: give at least 2 turns")])
        return self


class MixRef(BaseModel):
    """A mix used by this scenario, and its share of requests."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="A built-in mix (`chat`, `rag`, `code`) or a key of `traffic.custom_mixes`.")
    weight: PositiveFloat = Field(default=1.0, description="Relative share of requests drawn from this mix.")
    sessions: Sessions | None = Field(
        default=None,
        description="Send this mix as multi-turn sessions (any built-in or custom mix): each request it draws "
        "opens a conversation of `turns` turns whose history grows with the model's replies; the report gives "
        "TTFT by turn. The weight then counts sessions. Null: single requests.",
    )
    tools: Tools | None = Field(default=None, description=TOOLS_DOC)
    agent: Agent | None = Field(default=None, description=AGENT_DOC)

    @model_validator(mode="after")
    def _agent(self) -> MixRef:
        if self.agent is not None and self.sessions is not None:
            raise SubpathIssues([(("agent",), "an agent's task is its session: give `agent` or `sessions`, not both")])
        if self.name == "agent" and "agent" not in self.model_fields_set and self.sessions is None:
            self.agent = Agent()  # the built-in agent mix is sent as agent tasks unless told otherwise
        return self


class DatasetReplay(BaseModel):
    """Requests replayed from a user's dataset file: read, checked and filtered when the scenario loads."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(
        min_length=1,
        description="A ShareGPT JSON / JSONL file or a JSONL of `{prompt | messages, output_tokens}` rows (the "
        "shape is recognised per row). A path on the machines running loadgen (relative: to the working "
        "directory), read when the scenario is: a malformed row is an error naming file, line and field.",
    )
    name: MixName = Field(
        default="dataset",
        description="The mix name its requests carry in records, reports and `traffic.mixes` / SLOs.",
    )
    min_prompt_tokens: StrictInt | None = Field(
        default=None, ge=0, description="Leave out rows whose prompt (all messages) has fewer words than this."
    )
    max_prompt_tokens: StrictInt | None = Field(
        default=None, ge=0, description="Leave out rows whose prompt (all messages) has more words than this."
    )
    max_output_tokens: StrictInt | None = Field(
        default=None, ge=1, description="Leave out rows asking for more output tokens than this."
    )
    default_output_tokens: StrictInt | None = Field(
        default=None,
        ge=1,
        description="`max_tokens` for rows that give no output length (required when some row gives none).",
    )
    sample: StrictInt | None = Field(
        default=None,
        ge=1,
        description="Replay this many rows, drawn with the scenario's seed. Null: every row that passes the "
        "filters, in a seeded order.",
    )
    replace: StrictBool = Field(
        default=False, description="Draw `sample` with replacement (so it may exceed the rows there are)."
    )

    @model_validator(mode="after")
    def _check(self) -> DatasetReplay:
        # The file itself is read before load (loadgen.preflight, then traffic/replay.py): the model checks values.
        issues: list[tuple[tuple[str | int, ...], str]] = []
        low, high = self.min_prompt_tokens, self.max_prompt_tokens
        if low is not None and high is not None and low > high:
            issues.append((("min_prompt_tokens",), f"is above max_prompt_tokens ({high}): no row could pass"))
        if self.replace and self.sample is None:
            issues.append((("replace",), "applies with sample only: set sample, or leave replace out"))
        if issues:
            raise SubpathIssues(issues)
        return self


class Traffic(BaseModel):
    """What requests look like: which mixes, in what proportions."""

    model_config = ConfigDict(extra="forbid")

    mixes: list[MixRef] = Field(
        default_factory=lambda: [MixRef(name="chat", weight=1.0)],
        min_length=1,
        description="Mixes to draw requests from, each with a weight. Default: only `chat`.",
    )
    custom_mixes: dict[MixName, MixDef] = Field(
        default_factory=dict,
        description="Mixes defined here, by name; a name may not shadow a built-in one.",
    )
    dataset: DatasetReplay | None = Field(
        default=None,
        description="Replay a dataset file as the mix `dataset.name`: the only mix when `mixes` is not given, "
        "else list it in `mixes` with its weight. Null: no dataset.",
    )
    trace: TraceReplay | None = Field(
        default=None,
        description="Replay a production trace (Mooncake, Azure, BurstGPT) as the mix `trace.name`: its rows' "
        "lengths, sent at their timestamps (`load.arrival` defaults to `{kind: trace}`; another kind sends the "
        "rows in order on its own schedule). The scenario's only mix. Null: no trace.",
    )
    agent_trace: AgentTraceReplay | None = Field(
        default=None,
        description="Replay an agentic trace (Weka, OpenTelemetry GenAI spans) as agent tasks of the mix "
        "`agent_trace.name`: each recorded session a task, its calls its steps (their lengths and shared blocks), "
        "its recorded gaps waited (capped by `max_gap`), its sub-agents spawned and joined. The scenario's only mix. "
        "Null: none.",
    )
    classes: Classes = Field(
        default_factory=list,
        description="Priority classes (e.g. interactive / batch): each request belongs to one, drawn by share "
        "apart from its other draws (so prompts and lengths stay the same), and carries the class's headers and "
        "priority field; the report gives results per class and SLOs may name one. Empty: one implicit class, "
        "`default`, and nothing more on the wire.",
    )
    cancel: Cancel | None = Field(
        default=None,
        description="A share of requests the client gives up mid-reply, as users closing the tab, e.g. {share: 0.1, "
        "after_tokens: [5, 50]} or {share: 0.1, after: [0.2s, 2s]}: the same requests, at the same point, for every "
        "variant; counted `cancelled`, apart from errors and successes, and censored in E2E and TPOT (their end is "
        "unknown). Null: every request runs to its end.",
    )

    @model_validator(mode="after")
    def _check(self) -> Traffic:
        issues: list[tuple[tuple[str | int, ...], str]] = []
        for name in self.custom_mixes:
            if name in BUILTIN_MIX_NAMES:
                issues.append((("custom_mixes", name), f"{name!r} is a built-in mix; give the custom mix another name"))
        known = sorted({*BUILTIN_MIX_NAMES, *self.custom_mixes})
        if self.dataset is not None:
            name = self.dataset.name
            if name in known:
                issues.append((("dataset", "name"), f"{name!r} is already a mix; give the dataset another name"))
            known = sorted({*known, name})
            if "mixes" not in self.model_fields_set:
                self.mixes = [MixRef(name=name)]  # instead of the default chat mix
            elif all(ref.name != name for ref in self.mixes):
                issues.append((("dataset",), f"is not replayed: add {{name: {name}}} to traffic.mixes"))
        if self.trace is not None:
            issues += self._trace_issues(known)
            known = sorted({*known, self.trace.name})
        if self.agent_trace is not None:
            issues += self._agent_trace_issues(known)
            known = sorted({*known, self.agent_trace.name})
        seen: set[str] = set()
        for i, ref in enumerate(self.mixes):
            if ref.name not in known:
                issues.append((("mixes", i, "name"), str(UnknownNameError("mix", ref.name, known))))
            elif ref.name in seen:
                issues.append((("mixes", i, "name"), f"mix {ref.name!r} is listed twice; merge the weights"))
            if ref.sessions is not None and self.dataset is not None and ref.name == self.dataset.name:
                issues.append((("mixes", i, "sessions"), "a dataset replays its own conversations: no sessions"))
            if ref.sessions is not None and self.trace is not None and ref.name == self.trace.name:
                issues.append((("mixes", i, "sessions"), "a trace's rows are single requests: no sessions"))
            replayed = {r.name for r in (self.dataset, self.trace, self.agent_trace) if r is not None}
            if ref.sessions is not None and self.agent_trace is not None and ref.name == self.agent_trace.name:
                issues.append((("mixes", i, "sessions"), "an agent trace's sessions are its own: no sessions"))
            if ref.agent is not None and ref.name in replayed:
                issues.append((("mixes", i, "agent"), "a dataset's or trace's rows are their own requests: no agent"))
            seen.add(ref.name)
        if issues:
            raise SubpathIssues(issues)
        return self

    def _trace_issues(self, known: list[str]) -> list[tuple[tuple[str | int, ...], str]]:
        """A trace is the scenario's only mix: its rows are sent in order (row k at arrival k)."""
        assert self.trace is not None
        name = self.trace.name
        if name in known:
            return [(("trace", "name"), f"{name!r} is already a mix; give the trace another name")]
        if self.dataset is not None:
            return [(("trace",), "replay a trace or a dataset, not both: the trace's rows are the whole traffic")]
        if "mixes" not in self.model_fields_set:
            self.mixes = [MixRef(name=name)]  # instead of the default chat mix
        elif [ref.name for ref in self.mixes] != [name]:
            listed = ", ".join(ref.name for ref in self.mixes)
            return [(("mixes",), f"a trace is the whole traffic: list only {{name: {name}}} (got {listed})")]
        return []

    def _agent_trace_issues(self, known: list[str]) -> list[tuple[tuple[str | int, ...], str]]:
        """An agent trace is the scenario's only mix: its sessions are the tasks, in order."""
        assert self.agent_trace is not None
        name = self.agent_trace.name
        if name in known:
            return [(("agent_trace", "name"), f"{name!r} is already a mix; give the agent trace another name")]
        if self.dataset is not None or self.trace is not None:
            other = "dataset" if self.dataset is not None else "trace"
            return [
                (("agent_trace",), f"replay an agent trace or a {other}, not both: its sessions are the whole traffic")
            ]
        if "mixes" not in self.model_fields_set:
            self.mixes = [MixRef(name=name)]  # instead of the default chat mix
        elif [ref.name for ref in self.mixes] != [name]:
            listed = ", ".join(ref.name for ref in self.mixes)
            return [(("mixes",), f"an agent trace is the whole traffic: list only {{name: {name}}} (got {listed})")]
        return []
