"""A variant's `exact_output`: ask the server for outputs of exactly max_tokens (ignore EOS), as benchmarks do.

Kept apart from scenario.py (whose `Variant` inherits this field and its check) so that no module passes 500 lines.
The switch is carried to the dialect as `ignore_eos: true` in the variant's `extra_body`: the one key every server
family that can enforce length understands (vLLM, SGLang, TensorRT-LLM, llama.cpp, Triton's vLLM backend), and the
dialect adds its per-request field (`min_tokens` = max_tokens for openai-chat, openai-completions and triton;
openai-responses sends `ignore_eos` alone, which vLLM's and llama.cpp's Responses endpoints take). So the user's own
`extra_body: {ignore_eos: ...}` and `exact_output` are one setting: given both, they must agree.
"""

from __future__ import annotations

from typing import Any, Protocol, cast
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, StrictBool, model_validator

from loadgen.config.errors import SubpathIssues
from loadgen.protocol.dialects import get_dialect

__all__ = ["ExactOutput", "STRICT_HOSTS"]

# Hosted APIs known to reject request fields they do not know (OpenAI: "Unrecognized request argument supplied:
# ignore_eos"): `exact_output` defaults to off for them.
STRICT_HOSTS = ("api.openai.com", ".openai.azure.com")


class _VariantLike(Protocol):
    dialect: str
    base_url: str
    extra_body: dict[str, Any]
    exact_output: bool | None


class ExactOutput(BaseModel):
    exact_output: StrictBool | None = Field(
        default=None,
        description="Ask the server to generate exactly `max_tokens` per request, ignoring end-of-sequence (what "
        "benchmarks want: vLLM bench serve's --ignore-eos). Sent as `ignore_eos: true` (openai-*, llamacpp, "
        "triton) plus `min_tokens` = max_tokens (openai-chat, openai-completions, triton). tgi and ollama-* have "
        "no such option: max_tokens is only a cap there and may not be true. The report gives each variant's "
        "`output_length`: `enforced` or `max_only`. Requests that carry tools or a response_format are sent "
        "without it (their structure ends the reply). Null: on where the dialect can, except for hosts that reject "
        "unknown fields (api.openai.com, *.openai.azure.com); `extra_body.ignore_eos`, when given, decides instead.",
    )

    @model_validator(mode="after")
    def _resolve_exact_output(self) -> ExactOutput:
        v = cast("_VariantLike", self)
        asked = v.extra_body.get("ignore_eos")
        can = get_dialect(v.dialect).enforces_length
        if v.exact_output is not None and isinstance(asked, bool) and asked != v.exact_output:
            raise SubpathIssues(
                [(("exact_output",), f"contradicts extra_body.ignore_eos ({str(asked).lower()}): give one of them")]
            )
        if v.exact_output and not can:
            raise SubpathIssues(
                [(("exact_output",), f"{v.dialect} cannot ask its server for an exact output length (no ignore_eos)")]
            )
        if v.exact_output is None and asked is None:
            host = urlsplit(v.base_url).hostname or ""
            strict = any(host == h or (h.startswith(".") and host.endswith(h)) for h in STRICT_HOSTS)
            v.exact_output = can and not strict
        elif v.exact_output is None:
            v.exact_output = asked is True and can
        if v.exact_output and asked is None:
            # A new mapping: the user's own is left as given.
            v.extra_body = {**v.extra_body, "ignore_eos": True}
        return self
