"""One deployment under test in a scenario (`variants[]`): where it is, how to talk to it, and where its credentials
come from. Credentials are only ever named (the environment variables of `api_key_env` and `headers_from_env`): a
literal one in `headers` or `extra_body` is refused, since a scenario's values are copied into reports and the
chart's ConfigMap."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import urlsplit

import orjson
from pydantic import ConfigDict, Field, StrictBool, StrictInt, field_validator, model_validator

from loadgen.config.adapters import Adapters
from loadgen.config.classes import header_issues
from loadgen.config.cost import GpuMemoryQuery, PowerQuery, VariantCost
from loadgen.config.credentials import ENV_NAME, credential_key
from loadgen.config.errors import SubpathIssues
from loadgen.config.k8s_target import K8sSelector, ResolvedFrom
from loadgen.config.output_length import ExactOutput
from loadgen.config.routing import Routing
from loadgen.config.types import NAME_PATTERN, Duration, PositiveFloat
from loadgen.protocol.dialects import (
    DIALECT_NAMES,
    MODEL_PER_REQUEST_DIALECTS,
    POOLING_DIALECTS,
    WHOLE_REPLY_DIALECTS,
    get_dialect,
)
from loadgen.registry import UnknownNameError

__all__ = ["OPENAI_HOSTS", "Variant"]

_ENV_NAME = re.compile(ENV_NAME)
# Where chat requests cap the output with `max_completion_tokens` by default: OpenAI's API, whose reasoning models
# answer 400 ("Unsupported parameter: 'max_tokens' … Use 'max_completion_tokens' instead") to `max_tokens`.
OPENAI_HOSTS = ("api.openai.com",)


class Variant(ExactOutput):
    """One deployment under test: an endpoint, the model it serves, and how to talk to it."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        pattern=NAME_PATTERN,
        description="Short unique name used in reports and metrics, e.g. `baseline`, `int8`, `spec-decode`.",
    )
    base_url: str = Field(
        default="",
        description="Server root, e.g. `http://127.0.0.1:8000`. The dialect appends its path "
        "(`/v1/chat/completions`), so leave out `/v1`. A trailing slash is dropped. Give this or `selector`.",
    )
    selector: K8sSelector | None = Field(
        default=None,
        description="On Kubernetes, instead of `base_url`: the label selector of the variant's Service, resolved "
        "to its URL when the run starts (e.g. `{selector: loadgen.io/variant=int8, namespace: llm}`).",
    )
    resolved_from: ResolvedFrom | None = Field(
        default=None, description="Filled in by loadgen when it resolves `selector`; leave it out."
    )
    model: str = Field(min_length=1, description="Model name sent in each request's `model` field.")
    adapters: Adapters = Field(
        default_factory=list,
        description="LoRA adapters the variant's requests are spread over, `[{name, share}]`: each request's "
        "`model` is one of these names, drawn by share from the request's identity (the same request names the "
        "same adapter in every variant listing the same adapters), as served by vLLM `--enable-lora --lora-modules "
        "name=path`. List the variant's own `model` to send a share to the base model. Results are reported per "
        f"adapter. {', '.join(MODEL_PER_REQUEST_DIALECTS)} only. Empty: every request names `model`.",
    )
    dialect: str = Field(
        default="openai-chat",
        description=f"Wire protocol of the server; one of: {', '.join(sorted(DIALECT_NAMES))}.",
    )
    api_key_env: str | None = Field(
        default=None,
        json_schema_extra={"pattern": ENV_NAME},
        description="NAME of the environment variable holding the API key (e.g. `OPENAI_API_KEY`, or one filled "
        "from a Kubernetes Secret), sent as `Authorization: Bearer KEY` (anthropic-messages: `x-api-key: KEY`). The "
        "key itself never goes in the scenario. Null: no auth.",
    )
    headers: dict[str, str] = Field(
        default_factory=dict,
        description="Extra HTTP headers sent with every request, e.g. `{X-Route: canary}`. Not for credentials: a "
        "header whose name holds key, token, secret, password, credential, authorization or cookie is refused here; "
        "give it in `headers_from_env`, or the bearer key in `api_key_env`.",
    )
    headers_from_env: dict[str, str] = Field(
        default_factory=dict,
        description="HTTP headers whose values come from the environment: header name → NAME of the environment "
        "variable holding the value, e.g. `{api-key: AZURE_OPENAI_KEY}` (Azure API Management and gateways that "
        "take a key header). Reports, logs and manifests hold the variable's name, never its value; on Kubernetes "
        "the chart fills the variable from a Secret (`apiKeySecrets`).",
    )
    routing: Routing | None = Field(
        default=None,
        description="Headers for a router in front of the variant's replicas: each multi-turn session's id "
        "(`session_header`), the router's session token captured from responses and sent back on the session's "
        "next turns (`token_header`), each request's TTFT / TPOT targets (`slo_headers`); `preset: dynamo`, "
        "`llm-d` or `llm-d-session-id` for those routers. Null: none of them.",
    )
    connect_timeout: Duration = Field(
        default=10.0, gt=0, description="Longest wait to open a connection (seconds, or e.g. `10s`)."
    )
    read_timeout: Duration = Field(
        default=60.0,
        gt=0,
        description="Longest silence allowed between bytes of a response, including before the first token "
        "(seconds, or e.g. `60s`). A stalled stream fails after this long.",
    )
    request_timeout: Duration = Field(
        default=600.0,
        gt=0,
        description="Longest a whole request may take, stream included (seconds, or e.g. `10m`).",
    )
    tls_ca_file: str | None = Field(
        default=None,
        min_length=1,
        description="For an `https://` base_url: a PEM file of CA certificates to trust instead of the system "
        "store (like curl's `--cacert`), e.g. a private CA's bundle; to trust both, concatenate the system bundle "
        "into it. A path on the machine (or in the pod) running the workers, read when they connect: a file that "
        "cannot be loaded fails every request as `connect`. Null: the system store.",
    )
    tls_verify: StrictBool = Field(
        default=True,
        description="For an `https://` base_url: verify the server's certificate and host name. `false` turns "
        "verification off, for testing only: anyone on the path can then read the traffic and the API key.",
    )
    continuous_usage_stats: StrictBool = Field(
        default=False,
        description="The server reports cumulative token usage in every stream chunk (vLLM's "
        "`stream_options.continuous_usage_stats`), which gives exact tokens per chunk for ITL.",
    )
    stream: StrictBool = Field(
        default=True,
        description="Ask for a streamed reply and time its tokens (TTFT, ITL, TPOT, E2E). `false` "
        f"({', '.join(WHOLE_REPLY_DIALECTS)}): ask for one whole JSON reply (`stream: false` in the body), as batch "
        "jobs and many SDK calls do; such requests measure E2E and the output tokens of the reply's usage only. "
        "TTFT, ITL and TPOT are then not measured for the variant (the report says so), and SLOs on them apply to "
        "the streamed variants only.",
    )
    items_per_request: StrictInt | None = Field(
        default=None,
        ge=1,
        description=f"Pooling dialects ({', '.join(POOLING_DIALECTS)}): the inputs of an embeddings batch, or the "
        "documents a rerank request ranks (after its query), cut from the request's prompt (the mix's prompt "
        "length is the whole request's input). The report gives items per second. Null: 1.",
    )
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] | None = Field(
        default=None,
        description="The body field openai-chat requests cap their output with: `max_tokens` (vLLM, SGLang, "
        "llama.cpp, TGI and most OpenAI-compatible servers) or `max_completion_tokens` (OpenAI's own name; its "
        "reasoning models (o1, o3, o4-mini, gpt-5 …) refuse `max_tokens`). Null: `max_completion_tokens` for "
        "api.openai.com, `max_tokens` elsewhere. The other dialects have a field of their own.",
    )
    extra_body: dict[str, Any] = Field(
        default_factory=dict,
        description="JSON merged into every request body the dialect builds, e.g. `{ignore_eos: true}` (what "
        "`exact_output` sends: every request generates its full output length), `{cache_prompt: false}` (llama.cpp), "
        "`{timings_per_token: true}` (llama.cpp's OpenAI server: exact tokens per chunk), "
        "`{options: {num_ctx: 8192}}` (Ollama), `{return_num_output_tokens: true}` (Triton's vLLM backend). "
        "Nested mappings merge with the dialect's own (Ollama `options`, TGI `parameters`); other values "
        "replace it. Not for credentials: use `api_key_env`.",
    )
    baseline: StrictBool = Field(
        default=False,
        description="Compare the other variants against this one. At most one variant may set it; "
        "without it, the first variant is the baseline.",
    )
    weight: PositiveFloat = Field(
        default=1.0,
        description="Relative share of users sent to this variant when variants run concurrently.",
    )
    cost: VariantCost | None = Field(
        default=None,
        description="What the deployment costs: `{usd_per_hour: X}` or `{usd_per_gpu_hour: X, gpus: N}`; the report "
        "gives $ per 1M output tokens and per 1M good tokens (goodput) over the measured window.",
    )
    power: PowerQuery | None = Field(
        default=None,
        description="Where the variant's power draw (watts) is read: `{query: PromQL}` on `metrics.prometheus`; the "
        "report gives joules per output token and output tokens per joule.",
    )
    gpu_memory: GpuMemoryQuery | None = Field(
        default=None,
        description="Where the variant's GPU memory in use is read: `{query: PromQL, unit: MiB}` on "
        "`metrics.prometheus`; the report gives its max and mean over the measured window.",
    )

    @field_validator("base_url")
    @classmethod
    def _check_base_url(cls, value: str) -> str:
        url = value.strip().rstrip("/")
        if not url:
            return url  # `selector` names the server instead; _check_target says when neither does
        parts = urlsplit(url)
        if "@" in parts.netloc:
            # Not echoed: it holds a password.
            raise ValueError(
                "credentials don't belong in base_url: set api_key_env to the NAME of an environment "
                "variable holding the key"
            )
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"expected an http:// or https:// URL of the server root, got {value!r}")
        if parts.query or parts.fragment:
            raise ValueError(f"expected the server root without a query or fragment, got {value!r}")
        if parts.path.endswith("/v1"):
            raise ValueError(
                f"{value!r} ends in /v1, but the dialect appends /v1/...; give the server root, "
                f"e.g. {url[: -len('/v1')]!r}"
            )
        return url

    @field_validator("tls_ca_file")
    @classmethod
    def _check_tls_ca_file(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or any(c in value for c in "\0\r\n")):
            raise ValueError(f"expected the path of a PEM file, got {value!r}")
        return value

    @model_validator(mode="after")
    def _check_target(self) -> Variant:
        if bool(self.base_url) == (self.selector is not None):
            field = "selector" if self.base_url else "base_url"
            raise SubpathIssues([((field,), "give exactly one of base_url or selector")])
        return self

    @model_validator(mode="after")
    def _resolve_max_tokens_field(self) -> Variant:
        if self.max_tokens_field is None:
            host = urlsplit(self.base_url).hostname or ""
            openai = self.dialect == "openai-chat" and host in OPENAI_HOSTS
            self.max_tokens_field = "max_completion_tokens" if openai else "max_tokens"
        elif self.max_tokens_field == "max_completion_tokens" and self.dialect != "openai-chat":
            raise SubpathIssues(
                [(("max_tokens_field",), f"only openai-chat requests take max_completion_tokens, not {self.dialect}")]
            )
        return self

    @model_validator(mode="after")
    def _check_whole_replies(self) -> Variant:
        pooling = self.dialect in POOLING_DIALECTS
        if self.items_per_request is not None and not pooling:
            message = (
                f"{self.dialect} requests carry one prompt; items_per_request is for {', '.join(POOLING_DIALECTS)}"
            )
            raise SubpathIssues([(("items_per_request",), message)])
        if pooling and self.stream:
            if "stream" in self.model_fields_set:
                raise SubpathIssues([(("stream",), f"{self.dialect} replies come whole: leave stream out")])
            self.stream = False  # an embedding or a ranking is one reply, never a stream
        if self.stream:
            return self
        if self.dialect not in WHOLE_REPLY_DIALECTS:
            message = (
                f"{self.dialect} requests are always streamed; stream: false is for {', '.join(WHOLE_REPLY_DIALECTS)}"
            )
            raise SubpathIssues([(("stream",), message)])
        issues: list[tuple[tuple[str | int, ...], str]] = []
        if self.continuous_usage_stats:
            issues.append((("continuous_usage_stats",), "counts tokens per chunk of a stream; stream is false"))
        if "stream_options" in self.extra_body:
            issues.append((("extra_body", "stream_options"), "only for a stream (vLLM refuses it); stream is false"))
        if issues:
            raise SubpathIssues(issues)
        return self

    @model_validator(mode="after")
    def _check_usage_stats(self) -> Variant:
        if self.continuous_usage_stats and self.dialect == "openai-responses":
            message = (
                "openai-responses streams no per-event usage (the Responses API has no stream_options): its counts "
                "come from the final usage, a tokenizer, or llama.cpp's extra_body {timings_per_token: true}"
            )
            raise SubpathIssues([(("continuous_usage_stats",), message)])
        if self.continuous_usage_stats and self.dialect == "anthropic-messages":
            message = (
                "anthropic-messages streams no per-chunk usage (the Messages API counts the output once, in "
                "message_delta): each delta is one token, or a tokenizer counts them"
            )
            raise SubpathIssues([(("continuous_usage_stats",), message)])
        return self

    @model_validator(mode="after")
    def _check_adapters(self) -> Variant:
        if self.adapters and self.dialect not in MODEL_PER_REQUEST_DIALECTS:
            message = (
                f"{self.dialect} requests cannot name a model each (one model per endpoint), so they cannot be spread "
                f"over adapters; adapters are for {', '.join(MODEL_PER_REQUEST_DIALECTS)}"
            )
            raise SubpathIssues([(("adapters",), message)])
        return self

    @model_validator(mode="after")
    def _check_tls(self) -> Variant:
        scheme = self.selector.scheme if self.selector is not None else urlsplit(self.base_url).scheme
        if scheme == "https":
            return self
        issues: list[tuple[tuple[str | int, ...], str]] = []
        if self.tls_ca_file is not None:
            issues.append((("tls_ca_file",), "only applies to an https:// base_url; base_url is http://"))
        if not self.tls_verify:
            issues.append((("tls_verify",), "only applies to an https:// base_url; base_url is http://"))
        if issues:
            raise SubpathIssues(issues)
        return self

    @field_validator("dialect")
    @classmethod
    def _check_dialect(cls, value: str) -> str:
        if value not in DIALECT_NAMES:
            raise ValueError(str(UnknownNameError("dialect", value, sorted(DIALECT_NAMES))))
        return value

    @field_validator("api_key_env")
    @classmethod
    def _check_api_key_env(cls, value: str | None) -> str | None:
        # Never echo the value: it is exactly where someone pastes a key by mistake.
        if value is not None and not _ENV_NAME.fullmatch(value):
            raise ValueError(
                "expected the NAME of an environment variable holding the key (letters, digits, '_'; "
                "e.g. OPENAI_API_KEY), not the key itself"
            )
        return value

    @field_validator("extra_body")
    @classmethod
    def _check_extra_body(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            orjson.dumps(value)
        except TypeError as exc:
            raise ValueError(
                f"expected JSON values (mappings, lists, strings, numbers, booleans, null): {exc}"
            ) from None
        secret = credential_key(value)
        if secret is not None:
            raise SubpathIssues(
                [
                    (
                        secret,
                        "looks like a credential, and a scenario's values are copied into reports and manifests: "
                        "send it as a header from the environment (headers_from_env) or the key in api_key_env",
                    )
                ]
            )
        if "stream" in value:
            raise SubpathIssues(
                [(("stream",), "give it as the variant's own `stream` field (`stream: false`: one whole reply)")]
            )
        for key in ("n", "best_of"):
            several = value.get(key)
            if isinstance(several, int) and not isinstance(several, bool) and several > 1:
                # Their chunks would interleave on one timeline: TTFT, ITL and tokens would mix the choices.
                raise SubpathIssues(
                    [((key,), f"{several} choices per request cannot be timed on one timeline; loadgen times one")]
                )
        return value

    @field_validator("headers")
    @classmethod
    def _check_headers(cls, value: dict[str, str]) -> dict[str, str]:
        issues = header_issues(value)
        if issues:
            raise SubpathIssues(issues)
        return value

    @field_validator("headers_from_env")
    @classmethod
    def _check_headers_from_env(cls, value: dict[str, str]) -> dict[str, str]:
        # The check of a literal value is not the point here: these are names. Echoing them is safe.
        issues = [
            issue for issue in header_issues(dict.fromkeys(value, "")) if "looks like a credential" not in issue[1]
        ]
        for key, name in value.items():
            if not _ENV_NAME.fullmatch(name):
                issues.append(
                    (
                        (key,),
                        "expected the NAME of an environment variable holding the value (letters, digits, '_'; "
                        "e.g. AZURE_OPENAI_KEY), not the value itself",
                    )
                )
        if issues:
            raise SubpathIssues(issues)
        return value

    @model_validator(mode="after")
    def _check_header_sources(self) -> Variant:
        literal = {k.lower() for k in self.headers}
        issues: list[tuple[tuple[str | int, ...], str]] = []
        for key in self.headers_from_env:
            if key.lower() in literal:
                issues.append((("headers_from_env", key), f"{key} is in headers too: give it in one place"))
            elif key.lower() == get_dialect(self.dialect).key_header.lower() and self.api_key_env:
                issues.append((("headers_from_env", key), f"api_key_env sends the {key} header already: give one"))
        if issues:
            raise SubpathIssues(issues)
        return self

    def credential_headers(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """The headers this variant's requests carry from the environment (default: the process's): the bearer key
        of `api_key_env`, and `headers_from_env`. An unset or empty variable sends no header (`missing_secrets`
        refuses such a run before load)."""
        env = os.environ if environ is None else environ
        key = env.get(self.api_key_env, "") if self.api_key_env else ""
        dialect = get_dialect(self.dialect)  # `x-api-key: KEY` for anthropic-messages
        out = {dialect.key_header: dialect.key_scheme + key} if key else {}
        out.update({h: env[n] for h, n in self.headers_from_env.items() if env.get(n)})
        return out

    def secret_env_names(self) -> list[str]:
        """The environment variables this variant's requests read: its API key's, then its headers'."""
        names = [self.api_key_env] if self.api_key_env else []
        return names + [n for n in self.headers_from_env.values() if n not in names]
