"""A variant found on Kubernetes: the label selector that names its Service, and what it resolved to at run start.

A scenario variant gives either ``base_url`` or ``selector``. The selector is resolved when a run starts (in-cluster
service account, else the kubeconfig) by ``loadgen.k8s.resolve``; the report keeps both the selector and the Service
and URL it became (``variants[].resolved_from``), so a run against "whatever int8 was at the time" says what that was.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator

__all__ = ["K8sSelector", "ResolvedFrom"]

# Kubernetes label selector syntax, loosely: key[=|==|!=]value, key, !key, key in (a,b), comma separated.
_SELECTOR = re.compile(r"^[A-Za-z0-9._/!=, ()-]+$")


class K8sSelector(BaseModel):
    """Where on Kubernetes a variant's server is: a Service chosen by labels."""

    model_config = ConfigDict(extra="forbid")

    selector: str = Field(
        min_length=1,
        description="Label selector of the variant's Service, e.g. `loadgen.io/variant=int8` or "
        "`llm-d.ai/model=llama-3-8b,llm-d.ai/role=decode`. Exactly one Service must match.",
    )
    namespace: str | None = Field(
        default=None,
        min_length=1,
        description="Namespace to look in. Null: the pod's own namespace in-cluster, else the kubeconfig context's.",
    )
    port: StrictInt | str | None = Field(
        default=None,
        description="Service port number or name. Null: the Service's only port (or the one named `http`).",
    )
    scheme: str = Field(default="http", pattern="^https?$", description="`http` or `https`.")

    @field_validator("selector")
    @classmethod
    def _check_selector(cls, value: str) -> str:
        if not _SELECTOR.fullmatch(value.strip()):
            raise ValueError(f"expected a Kubernetes label selector such as 'loadgen.io/variant=int8', got {value!r}")
        return value.strip()


class ResolvedFrom(BaseModel):
    """Written by loadgen when it resolves a selector; not for scenario authors (a run overwrites it)."""

    model_config = ConfigDict(extra="forbid")

    selector: str = Field(description="The label selector as written.")
    namespace: str = Field(description="Namespace the Service was found in.")
    service: str = Field(description="Name of the Service the selector matched.")
    port: int = Field(description="Service port the URL uses.")
    base_url: str = Field(description="The URL the run used (the Service's cluster DNS name and port).")
