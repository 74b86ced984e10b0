"""What a variant costs and where its power and GPU memory are read (`variants[].cost`, `.power`, `.gpu_memory`).

- `cost`: the deployment's price per hour, given whole (`usd_per_hour`) or per GPU (`usd_per_gpu_hour` × `gpus`):
  the report turns it into $ per 1M output tokens and per 1M good tokens over the measured window.
- `power`: a PromQL query of the cluster Prometheus (`metrics.prometheus`) giving the variant's draw in watts, e.g.
  `sum(DCGM_FI_DEV_POWER_USAGE{pod=~"vllm-int8-.*"})`; integrated over the window into joules. A server's own energy
  counter works the same once Prometheus scrapes it (`rate(..._joules_total[1m])` is watts); none of the servers
  loadgen scrapes itself (vLLM, SGLang, TGI, llama.cpp) exports one.
- `gpu_memory`: a PromQL query of the variant's GPU memory in use, e.g. `sum(DCGM_FI_DEV_FB_USED{pod=~"vllm-.*"})`
  (DCGM reports MiB): its max and mean over the window.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["MEMORY_UNITS", "GpuMemoryQuery", "PowerQuery", "VariantCost"]

# How many bytes a unit of a GPU-memory query's values is (DCGM's FB_USED is MiB).
MEMORY_UNITS: dict[str, int] = {"bytes": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}


class VariantCost(BaseModel):
    """The deployment's price: `{usd_per_hour: X}`, or `{usd_per_gpu_hour: X, gpus: N}`; exactly one form."""

    model_config = ConfigDict(extra="forbid")

    usd_per_hour: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="What the whole deployment of the variant costs per hour, in US dollars (all its replicas).",
    )
    usd_per_gpu_hour: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="Price of one GPU per hour, in US dollars; with `gpus`, instead of `usd_per_hour`.",
    )
    gpus: int | None = Field(
        default=None,
        gt=0,
        strict=True,
        description="How many GPUs the variant holds (all replicas); with `usd_per_gpu_hour`.",
    )

    @model_validator(mode="after")
    def _one_form(self) -> VariantCost:
        per_gpu = self.usd_per_gpu_hour is not None or self.gpus is not None
        if self.usd_per_hour is not None and per_gpu:
            raise ValueError("give usd_per_hour, or usd_per_gpu_hour with gpus, not both")
        if self.usd_per_hour is None and not per_gpu:
            raise ValueError("give usd_per_hour, or usd_per_gpu_hour with gpus")
        if per_gpu and (self.usd_per_gpu_hour is None or self.gpus is None):
            raise ValueError("usd_per_gpu_hour and gpus go together")
        return self

    def hourly_usd(self) -> float:
        """The deployment's price per hour."""
        if self.usd_per_hour is not None:
            return self.usd_per_hour
        assert self.usd_per_gpu_hour is not None and self.gpus is not None
        return self.usd_per_gpu_hour * self.gpus


def _query(value: str) -> str:
    if not value.strip():
        raise ValueError("expected a PromQL expression")
    return value


class PowerQuery(BaseModel):
    """The variant's power draw in watts, read from the cluster Prometheus (`metrics.prometheus`)."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(
        description="PromQL giving the variant's draw in watts as one series (sum its GPUs), e.g. "
        '`sum(DCGM_FI_DEV_POWER_USAGE{pod=~"vllm-int8-.*"})`; evaluated over the measured window at '
        "`metrics.prometheus.step` and integrated (trapezoids) into joules.",
    )

    _nonempty = field_validator("query")(_query)


class GpuMemoryQuery(BaseModel):
    """The variant's GPU memory in use, read from the cluster Prometheus (`metrics.prometheus`)."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(
        description="PromQL giving the variant's GPU memory in use as one series (sum its GPUs), e.g. "
        '`sum(DCGM_FI_DEV_FB_USED{pod=~"vllm-int8-.*"})`; its max and mean over the measured window.',
    )
    unit: Literal["bytes", "KiB", "MiB", "GiB"] = Field(
        default="MiB", description="Unit of the query's values (DCGM's FB_USED is MiB); the report gives GiB."
    )

    _nonempty = field_validator("query")(_query)
