"""`variants[].routing`: what a router in front of a variant's replicas reads on each request — the session a
request belongs to, a token the router handed back for that session, and the request's latency targets.

Per variant, since the router is part of the deployment under test: one variant behind an llm-d gateway, another
behind a Dynamo frontend, a third a bare server with no router at all. (A YAML anchor shares one block.)

- `session_header`: every turn of a multi-turn session (`traffic.mixes[].sessions`) carries the session's id in this
  request header. The id is `lg-{seed}-{stream}-{index}` (traffic/sessions.py `session_id`): stable for the seed, the
  same for the same session on every variant (the pair key of its turns), unique across users and workers. A
  request of a mix without sessions carries none: a router binds each id it sees to a replica for a while
  (Dynamo's `--router-session-affinity-ttl-secs`, llm-d's `evictionTtlSeconds`, 600 s by default), and a
  single-turn request would fill its table with sessions that never come back, and (llm-d's `session_id_header`
  places an unbound session on the replica with the fewest sessions) take the request's placement from the
  router's load- and cache-aware scorers.
- `token_header` (a response header) / `replay_header` (the request header it goes back in, the same name unless
  given): the router's token for a session is captured from each turn's response and sent on the session's next
  turns, the latest one seen (a router may move a session); the first turn goes without one. Never on another
  session's requests, never on a single-turn request.
- `slo_headers`: every request to the variant carries its TTFT and TPOT targets in milliseconds (`x-slo-ttft-ms`,
  `x-slo-tpot-ms` unless renamed), the values given or else the scenario's `goodput` bounds, for SLO-aware routers.

- `parent_header`: an agent task's sub-agent (traffic/agent.py) is a session of its own, its id the task's with
  its path (`lg-{seed}-{stream}-{index}-b1.2`); its requests carry its parent's id in this header, as Dynamo reads
  `X-Dynamo-Parent-Session-ID` to rebuild the tree.

Presets, taken from the routers' own documentation and code (docs/traffic.md cites them): `dynamo`
(`session_header: X-Dynamo-Session-ID`, `parent_header: X-Dynamo-Parent-Session-ID`), `llm-d` (`token_header:
x-session-token`: llm-d's session-affinity scorer and filter, default `encoded_endpoint_header` algorithm) and
`llm-d-session-id` (`session_header: x-session-token`: their `session_id_header` algorithm). A field given beside a
preset wins.

Names are HTTP tokens and must not collide with a credential header (`Authorization`, `Proxy-Authorization`,
`x-api-key`, `api-key`, `Cookie`, or any header of the variant's `headers_from_env`), with a header loadgen writes
itself, with the variant's or a priority class's headers, or with each other. A name holding "token" is no
credential here (llm-d's own header is `x-session-token`): the values are the router's, never a secret of the
scenario's, and none of them is recorded.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from loadgen.config.errors import SubpathIssues
from loadgen.config.types import PositiveFloat
from loadgen.protocol.dialects import DIALECT_NAMES, get_dialect

__all__ = ["PRESETS", "Routing", "SloHeaders", "format_ms", "routing_issues", "slo_header_values"]

# RFC 9110 field names: a token.
HEADER_TOKEN = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"
_TOKEN = re.compile(HEADER_TOKEN)
# Headers that carry a credential whatever the variant says (its `headers_from_env` names are added per variant).
CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "x-api-key", "api-key", "cookie"})
# What loadgen writes on every request itself (request head, framing, request id, trace context).
OWN_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "content-type",
        "accept",
        "user-agent",
        "x-request-id",
        "traceparent",
    }
)
PRESETS: dict[str, dict[str, str]] = {
    "dynamo": {"session_header": "X-Dynamo-Session-ID", "parent_header": "X-Dynamo-Parent-Session-ID"},
    "llm-d": {"token_header": "x-session-token"},
    "llm-d-session-id": {"session_header": "x-session-token"},
}
# The request headers a routing block may send, by field (slo_headers' apart).
_REQUEST_FIELDS = ("session_header", "parent_header", "replay_header")
_Issues = list[tuple[tuple[str | int, ...], str]]


def _name_issue(name: str) -> str | None:
    if not _TOKEN.fullmatch(name):
        return f"{name!r} is not a valid HTTP header name (letters, digits and !#$%&'*+.^_`|~- only)"
    return None


class SloHeaders(BaseModel):
    """The request's latency targets, in headers an SLO-aware router reads."""

    model_config = ConfigDict(extra="forbid")

    ttft_ms: PositiveFloat | None = Field(
        default=None,
        description="TTFT target sent in `ttft_header`, in milliseconds. Null: the scenario's `goodput.ttft_ms` "
        "(no header when that is not set either).",
    )
    tpot_ms: PositiveFloat | None = Field(
        default=None,
        description="TPOT target sent in `tpot_header`, in milliseconds. Null: the scenario's `goodput.tpot_ms` "
        "(no header when that is not set either).",
    )
    ttft_header: str = Field(
        default="x-slo-ttft-ms",
        json_schema_extra={"pattern": HEADER_TOKEN},
        description="Request header of the TTFT target (llm-d router v0.9 and later name it `x-llm-d-slo-ttft-ms` "
        "and still read this one).",
    )
    tpot_header: str = Field(
        default="x-slo-tpot-ms",
        json_schema_extra={"pattern": HEADER_TOKEN},
        description="Request header of the TPOT target (llm-d router v0.9 and later: `x-llm-d-slo-tpot-ms`).",
    )

    @model_validator(mode="after")
    def _check(self) -> SloHeaders:
        issues: _Issues = []
        for field in ("ttft_header", "tpot_header"):
            problem = _name_issue(getattr(self, field))
            if problem is not None:
                issues.append(((field,), problem))
        if not issues and self.ttft_header.lower() == self.tpot_header.lower():
            issues.append((("tpot_header",), f"{self.tpot_header} is ttft_header too: give each its own"))
        if issues:
            raise SubpathIssues(issues)
        return self


class Routing(BaseModel):
    """Session and SLO headers for a router in front of the variant's replicas (llm-d, NVIDIA Dynamo, or any that
    reads a session id, hands a session token back, or routes by latency targets)."""

    model_config = ConfigDict(extra="forbid")

    preset: Literal["dynamo", "llm-d", "llm-d-session-id"] | None = Field(
        default=None,
        description="Fill the fields below for a known router (a field given too wins): `dynamo` sends each "
        "session's id in `X-Dynamo-Session-ID` (the Dynamo frontend's session affinity, "
        "`--router-session-affinity-ttl-secs`); `llm-d` captures `x-session-token` from each response and sends it "
        "back on the session's next turns (llm-d's session-affinity scorer or filter, default algorithm); "
        "`llm-d-session-id` sends each session's id in `x-session-token` (their `session_id_header` algorithm).",
    )
    session_header: str | None = Field(
        default=None,
        json_schema_extra={"pattern": HEADER_TOKEN},
        description="Request header carrying the session's id on every turn of a multi-turn session "
        "(`lg-{seed}-{stream}-{index}`: the same session has the same id on every variant and in every run of the "
        "seed). Requests of mixes without sessions carry none. Null: no id header.",
    )
    parent_header: str | None = Field(
        default=None,
        json_schema_extra={"pattern": HEADER_TOKEN},
        description="Request header carrying, on an agent's sub-agent's requests, its parent's session id (a "
        "sub-agent is a session of its own: `session_header` carries its id, `{task id}-b{path}`). Null: none "
        "(the `dynamo` preset: `X-Dynamo-Parent-Session-ID`).",
    )
    token_header: str | None = Field(
        default=None,
        json_schema_extra={"pattern": HEADER_TOKEN},
        description="Response header holding the router's token for the session (e.g. the replica it chose): "
        "captured from each turn's response and sent on the session's next turns (the latest one seen), in "
        "`replay_header`. Null: nothing captured.",
    )
    replay_header: str | None = Field(
        default=None,
        json_schema_extra={"pattern": HEADER_TOKEN},
        description="Request header the captured token is sent back in. Null: the same name as `token_header`.",
    )
    slo_headers: SloHeaders | None = Field(
        default=None,
        description="Send every request's TTFT and TPOT targets in headers, for SLO-aware routers (the Gateway API "
        "Inference Extension's and llm-d's latency-predicting scorers, admission control): e.g. `{}` for the "
        "scenario's goodput bounds, or `{ttft_ms: 500, tpot_ms: 50}`. Null: none.",
    )

    @model_validator(mode="after")
    def _resolve(self) -> Routing:
        given = set(self.model_fields_set)  # before a preset fills its fields (setattr marks them set)
        if self.preset is not None:
            for field, value in PRESETS[self.preset].items():
                if field not in given:
                    setattr(self, field, value)
        if self.token_header is not None and self.replay_header is None:
            self.replay_header = self.token_header
        issues: _Issues = []
        for field in ("session_header", "parent_header", "token_header", "replay_header"):
            name = getattr(self, field)
            problem = None if name is None else _name_issue(name)
            if problem is not None:
                issues.append(((field,), problem))
        if self.replay_header is not None and self.token_header is None:
            issues.append((("replay_header",), "replays the token of token_header, which is not set"))
        if self.parent_header is not None and self.session_header is None:
            if "parent_header" in given:
                issues.append((("parent_header",), "names the parent of a session_header id, which is not set"))
            else:
                self.parent_header = None  # the preset's, with its session_header turned off
        if self.token_header is not None and self.token_header.lower() == "set-cookie":
            issues.append((("token_header",), "a cookie is a credential to loadgen: it is neither kept nor sent"))
        if not issues and self.session_header is None and self.token_header is None and self.slo_headers is None:
            issues.append(((), "sends nothing: give a preset, session_header, token_header or slo_headers"))
        if issues:
            raise SubpathIssues(issues)
        return self

    def request_headers(self) -> list[tuple[str, str]]:
        """(field path from the block, header name) of every request header the block may send."""
        out = [(f, getattr(self, f)) for f in _REQUEST_FIELDS if getattr(self, f) is not None]
        slo = self.slo_headers
        if slo is not None:
            out += [(f"slo_headers.{f}", getattr(slo, f)) for f in ("ttft_header", "tpot_header")]
        return out


class _VariantLike(Protocol):
    name: str
    dialect: str
    headers: dict[str, str]
    headers_from_env: dict[str, str]
    api_key_env: str | None
    routing: Routing | None


class _ClassLike(Protocol):
    headers: dict[str, str]


class _GoodputLike(Protocol):
    ttft_ms: float | None
    tpot_ms: float | None


def routing_issues(
    variants: Sequence[_VariantLike], classes: Sequence[_ClassLike], goodput: _GoodputLike | None
) -> _Issues:
    """What each variant's `routing` block contradicts elsewhere in the scenario (paths from its root): a header
    name that is a credential header, one loadgen, the variant's dialect or the scenario already sends, two fields
    naming one header, and SLO headers with no value to send."""
    issues: _Issues = []
    class_headers = {k.lower(): i for i, c in enumerate(classes) for k in c.headers}
    for j, variant in enumerate(variants):
        routing = variant.routing
        if routing is None:
            continue
        at: tuple[str | int, ...] = ("variants", j, "routing")
        secret = {k.lower() for k in variant.headers_from_env}
        literal = {k.lower() for k in variant.headers}
        # The dialect's own headers (anthropic-version), unknown dialects aside (named elsewhere).
        known = variant.dialect in DIALECT_NAMES
        spoken = {k.lower() for k in get_dialect(variant.dialect).headers} if known else set()
        seen: dict[str, str] = {}
        for field, name in routing.request_headers():
            path = (*at, *field.split("."))
            low = name.lower()
            if low in CREDENTIAL_HEADERS or low in secret:
                where = f" (variants[{j}].headers_from_env)" if low in secret else ""
                issues.append((path, f"{name} carries a credential{where}: name another header"))
            elif low in OWN_HEADERS:
                issues.append((path, f"loadgen writes {name} itself on every request"))
            elif low in spoken:
                issues.append((path, f"the {variant.dialect} dialect sends {name} on every request: name another"))
            elif low in literal:
                issues.append((path, f"variants[{j}].headers sets {name} too: one header, one meaning"))
            elif low in class_headers:
                issues.append((path, f"traffic.classes[{class_headers[low]}].headers sets {name} too"))
            elif low in seen:
                issues.append((path, f"{seen[low]} names {name} too: give each its own header"))
            seen.setdefault(low, field)
        slo = routing.slo_headers
        if slo is not None and not slo_header_values(slo, goodput):
            issues.append(
                (
                    (*at, "slo_headers"),
                    "no target to send: give ttft_ms or tpot_ms here, or goodput.ttft_ms / goodput.tpot_ms",
                )
            )
    return issues


def format_ms(value: float) -> str:
    """A target as a header value: whole milliseconds as an integer, else a plain decimal (never an exponent)."""
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.6f}".rstrip("0").rstrip(".")


def slo_header_values(slo: SloHeaders, goodput: _GoodputLike | None) -> dict[str, str]:
    """The SLO headers every request carries: name → value (the block's own targets, else goodput's)."""
    out: dict[str, str] = {}
    for metric in ("ttft", "tpot"):
        value = getattr(slo, f"{metric}_ms")
        if value is None and goodput is not None:
            value = getattr(goodput, f"{metric}_ms")
        if value is not None:
            out[getattr(slo, f"{metric}_header")] = format_ms(value)
    return out
