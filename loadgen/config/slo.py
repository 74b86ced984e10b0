"""The scenario's service-level objectives: a statistic of a latency metric at or under a bound, or a share of
requests that must succeed, for all traffic or narrowed to a variant, a mix, a priority class or a LoRA adapter.

Kept apart from scenario.py (which re-exports `SLO`) so that no module passes 500 lines.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from loadgen.config.errors import SubpathIssues
from loadgen.config.types import PositiveFloat
from loadgen.metric_names import SLOMetricName, StatName

__all__ = ["SLO", "default_slos"]


class SLO(BaseModel):
    """A service-level objective: a statistic of a latency metric that must stay at or under a bound, or the share
    of requests that must succeed."""

    # `class` is a Python keyword: the field is `cls` in code, `class` in the scenario.
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    metric: SLOMetricName = Field(
        description="ttft: time to first token; itl: inter-token latency (per token); icl: inter-chunk latency; "
        "tpot: time per output token (per request); e2e: whole request; queue_delay: send lag behind the open-loop "
        "schedule (connect start − scheduled); ttft_from_schedule: first token − scheduled; e2e_from_schedule: done − "
        "scheduled (these three open loop only: they need load.arrival; in open loop, ttft and e2e SLOs are judged "
        "from the schedule unless load.latency_from is send); "
        "success_rate: share of the requests completed in the measured window that succeeded (with `min_percent`); "
        "session_duration: an agent task's whole time, first step sent to last step ended (mixes with `agent`; a "
        "failed or cut session is censored above every completed one)."
    )
    stat: StatName | None = Field(
        default=None, description="Statistic of a latency metric's distribution that is checked (not for success_rate)."
    )
    max_ms: PositiveFloat | None = Field(
        default=None, description="Bound of a latency metric in milliseconds: met when the statistic is <= this."
    )
    min_percent: Annotated[float, Field(gt=0, le=100, allow_inf_nan=False, strict=True)] | None = Field(
        default=None,
        description="Bound of success_rate in percent: met when at least this share of requests succeeded.",
    )
    variant: str | None = Field(default=None, description="Variant this SLO applies to; null: every variant.")
    mix: str | None = Field(default=None, description="Mix this SLO applies to; null: all traffic together.")
    cls: str | None = Field(
        default=None,
        alias="class",
        description="Priority class (a name in `traffic.classes`) this SLO applies to; null: all classes together. "
        "Not with `mix`: results are kept per (variant, mix) and per (variant, class), not per all three.",
    )
    adapter: str | None = Field(
        default=None,
        description="LoRA adapter (a name in a variant's `adapters`) this SLO applies to, judged on each variant "
        "listing it; null: all adapters together. Not with `mix` or `class`: results are kept per (variant, "
        "adapter) apart.",
    )

    @model_validator(mode="after")
    def _check_bound(self) -> SLO:
        issues: list[tuple[tuple[str | int, ...], str]] = []
        if self.metric == "success_rate":
            if self.min_percent is None:
                issues.append((("min_percent",), "success_rate needs min_percent, e.g. 99"))
            for name in ("stat", "max_ms"):
                if getattr(self, name) is not None:
                    issues.append(((name,), "does not apply to success_rate (it takes min_percent)"))
        else:
            if self.stat is None:
                issues.append((("stat",), f"{self.metric} needs a stat: one of p50, p90, p95, p99, p99.9, mean, max"))
            if self.max_ms is None:
                issues.append((("max_ms",), f"{self.metric} needs max_ms, the bound in milliseconds"))
            if self.min_percent is not None:
                issues.append((("min_percent",), "only applies to success_rate; latency metrics take max_ms"))
        if self.cls is not None and self.mix is not None:
            issues.append(
                (
                    ("class",),
                    "an SLO narrows to a mix or to a class, not both: results are kept per (variant, mix) and per "
                    "(variant, class)",
                )
            )
        if self.metric == "session_duration" and (self.cls is not None or self.adapter is not None):
            name = "class" if self.cls is not None else "adapter"
            issues.append(((name,), "sessions are kept per (variant, mix): a session_duration SLO narrows to a mix"))
        if self.adapter is not None and (self.mix is not None or self.cls is not None):
            message = "an SLO narrows to a mix, a class or an adapter, one of them: results are kept per each apart"
            issues.append((("adapter",), message))
        if issues:
            raise SubpathIssues(issues)
        return self

    def describe(self) -> str:
        if self.metric == "success_rate":
            return f"success rate ≥ {self.min_percent:g} %"
        return f"{self.metric} {self.stat} ≤ {self.max_ms:g} ms"


def default_slos() -> list[SLO]:
    return [
        SLO(metric="ttft", stat="p99", max_ms=3000.0),
        SLO(metric="e2e", stat="p99", max_ms=10000.0),
        SLO(metric="success_rate", min_percent=99.0),
    ]
