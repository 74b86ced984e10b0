"""Tools and structured output (`traffic.mixes[].tools`): a share of a mix's requests carries `tools` (synthetic
function schemas) with a `tool_choice`, and/or a `response_format` (a JSON schema, given or synthetic, or
`json_object`), as agents and extraction pipelines send them.

The schemas are built once per (seed, mix) from a hash of their own, so every request of the mix carries the same
tools (as an agent's do: a shared prefix for the server's cache) and every run and worker builds the same ones.
Which requests carry them is drawn from the request's identity (stream, index, session turn) and the seed, apart
from every other draw (`ToolsPlan.draw`): the same requests carry tools for every variant, and the prompts and
lengths are the same with tools or without.

Only openai-chat and openai-responses requests can carry them (the latter in the Responses API's shapes:
dialects/responses.py), and anthropic-messages requests tools alone (in Anthropic's shapes: dialects/anthropic.py;
the Messages API has no response_format); `tool_issues` refuses the rest, naming the field. A session mix with tools
is an agent: a turn after a tool call sends the call back with the tool's result (traffic/sessions.py).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_validator

from loadgen.config.errors import SubpathIssues
from loadgen.config.types import TokenRange

if TYPE_CHECKING:
    from loadgen.config.variant import Variant

__all__ = ["FORMAT_DIALECTS", "TOOL_DIALECTS", "Tools", "ToolsPlan", "function_schemas", "tool_issues"]

# The dialects whose requests carry tools (OpenAI's chat API, as vLLM / SGLang serve it, and its Responses API, as
# OpenAI, vLLM and llama.cpp serve it; Anthropic's Messages API), and those of them that also carry a response_format.
TOOL_DIALECTS: tuple[str, ...] = ("openai-chat", "openai-responses", "anthropic-messages")
FORMAT_DIALECTS: tuple[str, ...] = ("openai-chat", "openai-responses")
TOOLS_DOC = (
    "Tools and structured output: a share of this mix's requests carries `tools` (synthetic function schemas) "
    "with a `tool_choice`, and/or a `response_format`, e.g. {share: 0.5, functions: 4, tool_choice: required}; the "
    "report then gives time to the first tool call apart from the first content token (openai-chat, "
    "openai-responses; anthropic-messages: tools only). With `sessions`, an agent: a turn after a tool call sends "
    "the call back with the tool's result (`role: tool`). "
    "These requests are sent without the variant's exact_output (their structure ends the reply; max_tokens is a "
    "cap), and a response_format's replies are judged valid JSON of the schema or not. Null: plain requests."
)
_TYPES = ("string", "integer", "number", "boolean")
_WORDS = ("city", "date", "query", "limit", "unit", "account", "region", "amount", "label", "priority", "topic", "id")


class Tools(BaseModel):
    """What a share of the mix's requests carries: function tools with a tool_choice, and/or a response_format."""

    model_config = ConfigDict(extra="forbid")

    share: float = Field(
        default=1.0,
        gt=0,
        le=1,
        allow_inf_nan=False,
        description="Share of the mix's requests that carry these fields (0 < share <= 1), drawn per request from "
        "its identity: the same requests for every variant.",
    )
    functions: StrictInt = Field(
        default=0,
        ge=0,
        le=128,
        description="Synthetic function schemas in `tools` (`tool_0`, `tool_1`, ...; seeded, the same for every "
        "request of the mix). 0: no tools (response_format only).",
    )
    parameters: TokenRange = Field(
        default=(1, 4),
        description="[min, max] parameters per function schema (each a string, integer, number or boolean), drawn "
        "per function from the seed.",
    )
    tool_choice: str = Field(
        default="auto",
        description="`auto` (the model decides), `required` (it must call one), or a function's name (`tool_1`: "
        "it must call that one). Needs functions > 0.",
    )
    response_format: Literal["json_schema", "json_object"] | None = Field(
        default=None,
        description="Structured output: `json_schema` (the reply must match `json_schema`) or `json_object` (any "
        "JSON object). Null: free text.",
    )
    json_schema: dict[str, Any] | None = Field(
        default=None,
        description="The schema for response_format json_schema. Null: a synthetic object schema of `parameters` "
        "properties (seeded).",
    )

    @model_validator(mode="after")
    def _check(self) -> Tools:
        issues: list[tuple[tuple[str | int, ...], str]] = []
        if not self.functions and self.response_format is None:
            issues.append((("functions",), "give functions > 0, a response_format, or both"))
        choice = self.tool_choice
        if choice not in ("auto", "required") and choice not in function_names(self.functions):
            names = ", ".join(function_names(self.functions)[:3])
            issues.append(
                (("tool_choice",), f"expected auto, required or a function's name ({names or 'no functions'})")
            )
        elif not self.functions and "tool_choice" in self.model_fields_set:
            issues.append((("tool_choice",), "needs functions > 0"))
        if self.json_schema is not None and self.response_format != "json_schema":
            issues.append((("json_schema",), "applies with response_format: json_schema only"))
        if issues:
            raise SubpathIssues(issues)
        return self


def function_names(n: int) -> list[str]:
    return [f"tool_{i}" for i in range(n)]


def _rng(seed: int, mix: str, what: str) -> random.Random:
    digest = hashlib.blake2b(f"{seed}/tools/{mix}/{what}".encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "big"))


def _object_schema(rng: random.Random, parameters: tuple[int, int]) -> dict[str, Any]:
    n = rng.randint(*parameters)
    names = [f"{rng.choice(_WORDS)}_{k}" for k in range(n)]
    props = {name: {"type": rng.choice(_TYPES), "description": f"The {name.split('_')[0]}."} for name in names}
    return {"type": "object", "properties": props, "required": names}


def function_schemas(tools: Tools, seed: int, mix: str) -> list[dict[str, Any]]:
    """The mix's `tools`: one OpenAI function schema per function, from (seed, mix, function) alone."""
    out = []
    for i, name in enumerate(function_names(tools.functions)):
        params = _object_schema(_rng(seed, mix, f"fn{i}"), tools.parameters)
        desc = f"Synthetic tool {i} of mix {mix}: looks up {', '.join(params['properties'])}."
        out.append({"type": "function", "function": {"name": name, "description": desc, "parameters": params}})
    return out


def body_fields(tools: Tools, seed: int, mix: str) -> dict[str, Any]:
    """The body fields a request of the mix that carries tools adds (built once per mix)."""
    fields: dict[str, Any] = {}
    if tools.functions:
        fields["tools"] = function_schemas(tools, seed, mix)
        choice = tools.tool_choice
        fields["tool_choice"] = (
            choice if choice in ("auto", "required") else {"type": "function", "function": {"name": choice}}
        )
    if tools.response_format == "json_object":
        fields["response_format"] = {"type": "json_object"}
    elif tools.response_format == "json_schema":
        schema = tools.json_schema or _object_schema(_rng(seed, mix, "response"), tools.parameters)
        fields["response_format"] = {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema}}
    return fields


class ToolsPlan:
    """The scenario's mixes with `tools` and its seed: the body fields each request adds, or None."""

    __slots__ = ("_fields", "_shares", "_seed")

    def __init__(self, tools: dict[str, Tools], seed: int) -> None:
        self._fields = {mix: body_fields(t, seed, mix) for mix, t in tools.items()}
        self._shares = {mix: t.share for mix, t in tools.items()}
        self._seed = seed

    def draw(self, mix: str, stream: int, index: int, turn: int) -> dict[str, Any] | None:
        """The fields request (stream, index, turn) of `mix` carries; None: it carries none. A session's turns
        (turn >= 1) all draw as its first: an agent's session carries its tools throughout."""
        share = self._shares.get(mix)
        if share is None:
            return None
        if share < 1:
            key = f"{self._seed}/tools/share/{stream}-{index}-{min(turn, 1)}"
            u = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big") / 2.0**64
            if u >= share:
                return None
        return self._fields[mix]


class _MixRef(Protocol):  # config/traffic.py's MixRef (which imports this module)
    @property
    def name(self) -> str: ...
    @property
    def sessions(self) -> object: ...
    @property
    def tools(self) -> Tools | None: ...


def tools_by_mix(mixes: Sequence[_MixRef]) -> dict[str, Tools]:
    """`traffic.mixes`' tools by mix name (mixes without none left out)."""
    return {ref.name: ref.tools for ref in mixes if ref.tools is not None}


def tool_issues(mixes: Sequence[_MixRef], variants: list[Variant]) -> list[tuple[tuple[str | int, ...], str]]:
    """A mix with tools sent to a variant whose dialect cannot carry them, or with a response_format to one whose
    dialect carries tools only."""
    issues: list[tuple[tuple[str | int, ...], str]] = []
    for i, ref in enumerate(mixes):
        if ref.tools is None:
            continue
        for v in variants:
            if v.dialect not in TOOL_DIALECTS:
                issues.append(
                    (
                        ("traffic", "mixes", i, "tools"),
                        f"variant {v.name!r} speaks {v.dialect}, whose requests carry no tools or response_format "
                        f"(only {', '.join(TOOL_DIALECTS)})",
                    )
                )
                break
            if ref.tools.response_format is not None and v.dialect not in FORMAT_DIALECTS:
                issues.append(
                    (
                        ("traffic", "mixes", i, "tools", "response_format"),
                        f"variant {v.name!r} speaks {v.dialect}, whose requests carry tools but no response_format "
                        f"(only {', '.join(FORMAT_DIALECTS)})",
                    )
                )
                break
    return issues
