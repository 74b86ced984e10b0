"""`traffic.trace`: a production trace replayed with its timestamps (Mooncake JSONL, the Azure LLM inference CSV,
BurstGPT's CSV); `traffic.agent_trace`: an agentic trace (Weka, OpenTelemetry GenAI spans) replayed as agent tasks.
The model checks values only; the file is read before load (loadgen/preflight.py, then traffic/trace_file.py or
traffic/agent_traces.py), where a malformed row is an error naming file, line and field.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from loadgen.config.types import Duration, MixName, PositiveFloat

__all__ = ["TRACE_FORMATS", "AgentTiming", "AgentTraceReplay", "TraceFormat", "TraceReplay"]

TRACE_FORMATS = ("mooncake", "azure", "burstgpt")
TraceFormat = Literal["mooncake", "azure", "burstgpt"]
AgentTiming = Literal["offsets", "gaps"]


class TraceReplay(BaseModel):
    """A request trace replayed row by row: each row's lengths, sent at its timestamp (scaled, windowed)."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(
        min_length=1,
        description="The trace file on the machines running loadgen (relative: to the working directory). "
        "mooncake: JSONL rows `{timestamp (ms), input_length, output_length, hash_ids}`; azure: CSV with "
        "`TIMESTAMP, ContextTokens, GeneratedTokens`; burstgpt: CSV with `Timestamp (s), Request tokens, Response "
        "tokens` (rows with 0 response tokens, the trace's failures, are left out and counted).",
    )
    format: TraceFormat | None = Field(
        default=None,
        description="mooncake, azure or burstgpt. Null: recognised from the file (a JSONL row with "
        "`input_length`, or the CSV header's columns).",
    )
    name: MixName = Field(
        default="trace",
        description="The mix name its requests carry in records, reports and SLOs (the scenario's only mix).",
    )
    time_scale: PositiveFloat = Field(
        default=1.0,
        description="Multiplies the trace's time offsets: 0.5 replays it twice as fast, 2 half as fast.",
    )
    start: Duration = Field(
        default=0.0,
        ge=0,
        description="Where the replayed window opens, in trace time from its first row (before `time_scale`), "
        "e.g. `10m`. Its first row is sent at the run's start.",
    )
    duration: Duration | None = Field(
        default=None,
        gt=0,
        description="How much trace time the window holds (before `time_scale`). Null: to the trace's end.",
    )
    block_tokens: StrictInt = Field(
        default=512,
        ge=1,
        description="mooncake: tokens per `hash_ids` block (Mooncake's traces use 512). Requests sharing their "
        "first k block ids share a prompt prefix of exactly k blocks.",
    )


class AgentTraceReplay(BaseModel):
    """An agentic trace replayed as agent tasks: each recorded session's calls with their lengths, shared blocks,
    gaps and sub-agents (traffic/trace_agent.py)."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(
        min_length=1,
        description="The trace file, or a directory of .json/.jsonl ones, on the machines running loadgen "
        "(relative: to the working directory): Weka agent traces (the `cc-traces-weka-*` corpora) or OpenTelemetry "
        "GenAI spans, recognised from the content.",
    )
    name: MixName = Field(
        default="agent-trace",
        description="The mix name its tasks carry in records, reports and SLOs (the scenario's only mix).",
    )
    timing: AgentTiming = Field(
        default="offsets",
        description="When each call is sent. offsets (default): at its recorded offset from the session's start "
        "(a sub-agent's on its root's clock), or as soon as the calls it waits on are done if they end later: the "
        "recorded clock (AIPerf's preserve-original-timing); the report states the schedule slip. gaps: its recorded "
        "gap after the calls it waits on ended, however long the server took (the session stretches with it).",
    )
    max_gap: Duration | None = Field(
        default=60.0,
        ge=0,
        description="Caps recorded idle time, e.g. `60s` (trace time, before `time_scale`). offsets: a stretch "
        "with no call in flight longer than this is shortened to it, moving every later offset up by what was cut; "
        "gaps: each gap before a call (tool time, the user's think time). Null: the recorded times, however long.",
    )
    time_scale: PositiveFloat = Field(
        default=1.0,
        description="Multiplies the recorded offsets and gaps (after `max_gap`): 0.5 replays a session twice as "
        "fast, 2 half as fast.",
    )
    block_tokens: StrictInt | None = Field(
        default=None,
        ge=1,
        description="Tokens per hash id block. Null: the trace's own (Weka's `block_size`, OTel's "
        "`loadgen.prompt.block_tokens`).",
    )
