"""Priority classes (`traffic.classes`): shares of the traffic sent as e.g. interactive / batch or paid / free, each
with its own request headers and, where the server has one, its own `priority` body field.

Every request belongs to one class, drawn by share from a seeded draw of its own (traffic/sampler.py), so adding
classes changes no prompt or length and every variant gets the same class for the same request. Without
`traffic.classes` all traffic is one implicit class (`DEFAULT_CLASS`): nothing more goes on the wire, and the
report has no per-class section (its numbers would be the variant's).

The priority field is vLLM's and SGLang's `priority` (an integer in the OpenAI request body). vLLM honours it only
with `--scheduling-policy priority` (lower values first) and rejects a non-zero one (400) otherwise; SGLang honours
it with `--enable-priority-scheduling`, higher values first unless `--schedule-low-priority-values-first`, and
ignores it otherwise. The dialects that carry it are the openai-* ones (`Dialect.priority_in_body`); hosts that
reject unknown fields (api.openai.com, Azure OpenAI) get the headers only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Protocol
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt, field_validator

from loadgen.config.credentials import is_credential_header
from loadgen.config.errors import SubpathIssues
from loadgen.config.output_length import STRICT_HOSTS
from loadgen.config.slo import SLO
from loadgen.config.types import NAME_PATTERN, PositiveFloat
from loadgen.protocol.dialects import get_dialect

__all__ = [
    "DEFAULT_CLASS",
    "Classes",
    "PriorityClass",
    "class_issues",
    "header_issues",
    "is_credential_header",
    "sends_priority",
]

# The one class of a scenario without `traffic.classes` (its name for SLOs and docs; records carry "" for it).
DEFAULT_CLASS = "default"

# RFC 9110 header field-name token characters.
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
# Headers loadgen writes itself on every request: a second copy from the scenario would make the request ambiguous.
_OWN_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection", "x-request-id"})
# A variant's headers replace these defaults of its request head; a class's would be a second copy of them.
_HEAD_DEFAULTS = frozenset({"content-type", "accept", "user-agent"})
_INT64 = 2**63


def header_issues(
    headers: Mapping[str, str], own: frozenset[str] = _OWN_HEADERS
) -> list[tuple[tuple[str | int, ...], str]]:
    """What is wrong with a scenario's extra headers (a variant's or a class's), each issue at its header's key;
    ``own``: the (lower-case) names loadgen writes itself."""
    issues: list[tuple[tuple[str | int, ...], str]] = []
    for key, value in headers.items():
        if is_credential_header(key):
            # A literal value would be copied into every report, raw shard and the chart's ConfigMap.
            issues.append(
                (
                    (key,),
                    f"{key} looks like a credential, and a scenario's values are copied into reports and manifests: "
                    "give the NAME of an environment variable holding it instead, in the variant's "
                    f"headers_from_env (e.g. {{{key}: MY_{_env_hint(key)}}})"
                    + (", or api_key_env for a bearer key" if key.lower() == "authorization" else ""),
                )
            )
        elif not _HEADER_NAME.fullmatch(key):
            issues.append(((key,), f"{key!r} is not a valid HTTP header name"))
        elif key.lower() in own:
            issues.append(((key,), f"loadgen writes {key} itself on every request"))
        elif "\r" in value or "\n" in value:
            issues.append(((key,), "header values may not contain line breaks"))
        elif not value.isascii():
            # Not echoed (a header may hold something private); the head is written as ASCII bytes.
            issues.append(((key,), "header values must be ASCII text"))
    return issues


def _env_hint(name: str) -> str:
    return re.sub(r"[^A-Z0-9]+", "_", name.upper()).strip("_") or "SECRET"


class PriorityClass(BaseModel):
    """A class of requests (e.g. interactive / batch, paid / free): its share of the traffic, and what marks its
    requests on the wire."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        pattern=NAME_PATTERN, description="Class name used in records, reports and SLOs, e.g. `interactive`."
    )
    share: PositiveFloat = Field(
        default=1.0, description="Relative share of requests in this class (weights: they need not sum to 1)."
    )
    priority: StrictInt | None = Field(
        default=None,
        ge=-_INT64,
        le=_INT64 - 1,
        description="`priority` sent in the request body of the openai-* dialects (vLLM, SGLang): vLLM schedules "
        "lower values first and only with `--scheduling-policy priority` (a non-zero value is a 400 otherwise); "
        "SGLang needs `--enable-priority-scheduling` and schedules higher values first unless "
        "`--schedule-low-priority-values-first`. Other dialects, and hosts that reject unknown fields "
        "(api.openai.com, Azure), send the headers only. Null: no priority field.",
    )
    headers: dict[str, str] = Field(
        default_factory=dict,
        description="HTTP headers sent with this class's requests (besides the variant's), e.g. "
        "`{X-Priority: high}` for a gateway that routes or queues by header. Not for credentials.",
    )

    @field_validator("headers")
    @classmethod
    def _check_headers(cls, value: dict[str, str]) -> dict[str, str]:
        issues = header_issues(value, _OWN_HEADERS | _HEAD_DEFAULTS)
        if issues:
            raise SubpathIssues(issues)
        return value


def _distinct(classes: list[PriorityClass]) -> list[PriorityClass]:
    issues: list[tuple[tuple[str | int, ...], str]] = []
    seen: set[str] = set()
    for i, c in enumerate(classes):
        if c.name in seen:
            issues.append(((i, "name"), f"class {c.name!r} is defined twice"))
        seen.add(c.name)
    if issues:
        raise SubpathIssues(issues)
    return classes


Classes = Annotated[list[PriorityClass], AfterValidator(_distinct)]


def sends_priority(dialect: str, base_url: str) -> bool:
    """Whether requests of a variant of ``dialect`` at ``base_url`` carry their class's ``priority`` field."""
    host = urlsplit(base_url).hostname or ""
    strict = any(host == h or (h.startswith(".") and host.endswith(h)) for h in STRICT_HOSTS)
    return get_dialect(dialect).priority_in_body and not strict


class _VariantLike(Protocol):
    name: str
    headers: dict[str, str]
    headers_from_env: dict[str, str]
    extra_body: dict[str, Any]


def class_issues(
    classes: list[PriorityClass], slos: list[SLO], variants: Sequence[_VariantLike]
) -> list[tuple[tuple[str | int, ...], str]]:
    """What a scenario's classes contradict elsewhere in it (paths from the scenario's root): a header a variant
    sets too (it would go twice), a variant's own `extra_body.priority` beside class priorities, an SLO naming a
    class there is not."""
    issues: list[tuple[tuple[str | int, ...], str]] = []
    names = [c.name for c in classes]
    for i, slo in enumerate(slos):
        if slo.cls is not None and slo.cls not in names:
            known = f"traffic.classes: {sorted(names)}" if names else "traffic.classes is not set"
            issues.append((("slos", i, "class"), f"class {slo.cls!r} is not in {known}"))
    with_priority = [c.name for c in classes if c.priority is not None]
    for j, variant in enumerate(variants):
        issues += _variant_clashes(j, variant, classes, with_priority)
    return issues


def _variant_clashes(
    j: int, variant: _VariantLike, classes: list[PriorityClass], with_priority: list[str]
) -> list[tuple[tuple[str | int, ...], str]]:
    issues: list[tuple[tuple[str | int, ...], str]] = []
    own = {k.lower() for k in (*variant.headers, *variant.headers_from_env)}
    for i, c in enumerate(classes):
        for key in c.headers:
            if key.lower() in own:
                message = f"variant {variant.name!r} sets {key} too (variants[{j}].headers): set it in one place"
                if key.lower() not in {k.lower() for k in variant.headers}:
                    message = message.replace(".headers)", ".headers_from_env)")
                issues.append((("traffic", "classes", i, "headers", key), message))
    extra: Mapping[str, Any] = variant.extra_body
    if with_priority and "priority" in extra:
        message = f"the classes {with_priority} set their own priority: leave it out of the variant's extra_body"
        issues.append((("variants", j, "extra_body", "priority"), message))
    return issues
