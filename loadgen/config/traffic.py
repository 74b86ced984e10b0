"""The traffic and load parts of a scenario: mixes of prompt-length buckets, and closed-loop users.

Kept apart from config.py (which imports and re-exports every name here) so that no module passes 500 lines.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_validator

from loadgen.config.builtin_mixes import BUILTIN_MIX_NAMES
from loadgen.config.errors import SubpathIssues
from loadgen.config.types import NAME_PATTERN, Duration, MixName, PositiveFloat, TokenRange
from loadgen.registry import UnknownNameError

__all__ = ["Bucket", "Load", "MixDef", "MixRef", "Traffic"]


class Bucket(BaseModel):
    """A band of prompt lengths within a mix, drawn with probability proportional to its weight."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_PATTERN, description="Bucket name used in reports, e.g. `short`.")
    prompt_tokens: TokenRange = Field(
        description="[min, max] prompt length in tokens, system prompt included; drawn uniformly."
    )
    weight: PositiveFloat = Field(default=1.0, description="Relative frequency of this bucket within the mix.")


class MixDef(BaseModel):
    """A traffic mix: prompt-length buckets, an output-length range and an optional shared system prompt."""

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
        if issues:
            raise SubpathIssues(issues)
        return self


class MixRef(BaseModel):
    """A mix used by this scenario, and its share of requests."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="A built-in mix (`chat`, `rag`, `code`) or a key of `traffic.custom_mixes`.")
    weight: PositiveFloat = Field(default=1.0, description="Relative share of requests drawn from this mix.")


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

    @model_validator(mode="after")
    def _check(self) -> Traffic:
        issues: list[tuple[tuple[str | int, ...], str]] = []
        for name in self.custom_mixes:
            if name in BUILTIN_MIX_NAMES:
                issues.append((("custom_mixes", name), f"{name!r} is a built-in mix; give the custom mix another name"))
        known = sorted({*BUILTIN_MIX_NAMES, *self.custom_mixes})
        seen: set[str] = set()
        for i, ref in enumerate(self.mixes):
            if ref.name not in known:
                issues.append((("mixes", i, "name"), str(UnknownNameError("mix", ref.name, known))))
            elif ref.name in seen:
                issues.append((("mixes", i, "name"), f"mix {ref.name!r} is listed twice; merge the weights"))
            seen.add(ref.name)
        if issues:
            raise SubpathIssues(issues)
        return self


class Load(BaseModel):
    """How hard and how long: closed-loop users."""

    model_config = ConfigDict(extra="forbid")

    users: StrictInt = Field(default=16, ge=1, description="Concurrent simulated users (in-flight requests).")
    spawn_rate: PositiveFloat = Field(default=16.0, description="Users started per second until `users` run.")
    duration: Duration = Field(
        default=60.0, gt=0, description="Length of the run, warm-up included (seconds, or e.g. `5m`)."
    )
    warmup: Duration = Field(
        default=0.0,
        ge=0,
        description="Leading part of the run excluded from results, while caches fill and users spawn; "
        "shorter than `duration`.",
    )
    think_time: Duration = Field(
        default=0.0, ge=0, description="Pause between a user's requests (seconds, or e.g. `500ms`)."
    )

    @model_validator(mode="after")
    def _check(self) -> Load:
        if self.warmup >= self.duration:
            raise SubpathIssues(
                [
                    (
                        ("warmup",),
                        f"warm-up ({self.warmup:g}s) must be shorter than the duration ({self.duration:g}s), "
                        "or nothing is measured",
                    )
                ]
            )
        return self
