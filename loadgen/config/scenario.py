"""The scenario: one strict, typed, described model of everything a run needs, and its YAML loader.

Unknown keys are errors and every field carries a description, which ``scenario_json_schema()`` exports; the annotated
example ``examples/scenario.yaml`` is written by hand and held to this model by ``tests/unit/test_examples.py``.
Loading never raises anything but ``ConfigError``, whose issues carry the field path (``variants[0].dialect``) and
the YAML line, so a typo is a one-line fix rather than a traceback.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from loadgen.config.classes import PriorityClass, class_issues, header_issues
from loadgen.config.errors import (
    ConfigError,
    ConfigIssue,
    SubpathIssues,
    compose_yaml,
    describe_value,
    duplicate_key_issues,
    in_file_order,
    translate_validation_error,
)
from loadgen.config.k8s_target import K8sSelector, ResolvedFrom
from loadgen.config.live_metrics import LiveMetrics
from loadgen.config.output_length import ExactOutput
from loadgen.config.slo import SLO, default_slos
from loadgen.config.traffic import Bucket, Load, MixDef, MixRef, Traffic
from loadgen.config.types import NAME_PATTERN, Duration, PositiveFloat
from loadgen.config.verdict_options import ColdStarts, Goodput, RunTrust
from loadgen.metric_names import SCHEDULED_METRICS
from loadgen.protocol.dialects import DIALECT_NAMES
from loadgen.registry import UnknownNameError
from loadgen.traffic.server_tokenizer import TokenizerError, check_tokenizer

__all__ = [
    "SLO",
    "Bucket",
    "ConfigError",
    "ConfigIssue",
    "Load",
    "MixDef",
    "MixRef",
    "PriorityClass",
    "Scenario",
    "Traffic",
    "Variant",
    "check_environment",
    "load_scenario",
    "missing_secrets",
    "parse_scenario",
    "scenario_json_schema",
    "validate_scenario",
]

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

QUEUE_DELAY_REFUSED = (
    "queue_delay and e2e_from_schedule need open-loop arrivals: set load.arrival (e.g. {kind: poisson, rate: 10}); "
    "closed-loop users send as soon as they are free, so there is no schedule to measure from"
)


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
    dialect: str = Field(
        default="openai-chat",
        description=f"Wire protocol of the server; one of: {', '.join(sorted(DIALECT_NAMES))}.",
    )
    api_key_env: str | None = Field(
        default=None,
        json_schema_extra={"pattern": f"^{_ENV_NAME.pattern}$"},
        description="NAME of the environment variable holding the API key (e.g. `OPENAI_API_KEY`, or one filled "
        "from a Kubernetes Secret). The key itself never goes in the scenario. Null: no auth.",
    )
    headers: dict[str, str] = Field(
        default_factory=dict,
        description="Extra HTTP headers sent with every request. Not for credentials: use `api_key_env`.",
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
        if value.get("stream", True) is not True:
            raise ValueError("`stream` must stay true: loadgen measures streamed responses")
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


class Scenario(BaseModel):
    """A complete load-test scenario: variants to compare, the traffic to send them, load, and SLOs."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(default="scenario", min_length=1, description="Name of the scenario, shown in reports.")
    seed: StrictInt = Field(
        default=0,
        ge=0,
        description="Seed of the request stream. The same seed replays the same prompts and lengths against "
        "every variant and in every run.",
    )
    variants: list[Variant] = Field(
        min_length=1, description="Deployments under test (at least one), with unique names."
    )
    traffic: Traffic = Field(default_factory=Traffic, description="Request mixes.")
    load: Load = Field(default_factory=Load, description="Users, ramp, duration.")
    slos: list[SLO] = Field(
        default_factory=default_slos,
        description="Objectives checked after the run; any breach exits with status 1. "
        "Default: TTFT p99 <= 3000 ms, E2E p99 <= 10000 ms and success rate >= 99 % for every variant. "
        "An empty list checks nothing.",
    )
    report_dir: str = Field(default="loadgen-report", min_length=1, description="Directory the reports are written to.")
    tokenizer: str | None = Field(
        default=None,
        min_length=1,
        description="The target model's tokenizer: prompts exactly their target length in its tokens, and chunks of "
        "servers that stream no token counts counted. A `tokenizer.json`, a local Hugging Face model folder, or a "
        "`.gguf` file (byte-level BPE), loaded with the scenario (`pip install 'llm-loadgen[tokenizer]'`); `server`: "
        "the first variant's `POST /tokenize` (llama.cpp, vLLM; all variants one model). Null: common words (~1 token "
        "each, lengths approximate).",
    )
    goodput: Goodput | None = Field(
        default=None,
        description="Per-request SLOs, e.g. {ttft_ms: 2000, tpot_ms: 50}: a successful request that meets all of "
        "them counts toward goodput (requests/s reported beside throughput, with the requests that missed each "
        "bound). Null: no goodput.",
    )
    run_trust: RunTrust = Field(
        default_factory=RunTrust,
        description="When the load generator's own measurements make the run untrustworthy (exit 3).",
    )
    cold_starts: ColdStarts = Field(
        default_factory=ColdStarts,
        description="What makes a request cold (first of its worker for the variant, on a new connection, or after "
        "an idle gap): cold requests are reported apart from the warm steady state.",
    )
    metrics: LiveMetrics = Field(
        default_factory=LiveMetrics,
        description="The master's Prometheus exporter (histogram buckets) and its scraping of each variant's /metrics.",
    )

    @field_validator("tokenizer")
    @classmethod
    def _check_tokenizer(cls, value: str | None, info: ValidationInfo) -> str | None:
        try:  # loads it (once per process) and checks it can cut prompts exactly (`server`: asks the first variant)
            _ = value is None or check_tokenizer(value, info.data.get("variants") or [])
        except TokenizerError as exc:
            raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _check(self) -> Scenario:
        issues: list[tuple[tuple[str | int, ...], str]] = []
        names: set[str] = set()
        baseline_at: int | None = None
        for i, variant in enumerate(self.variants):
            if variant.name in names:
                issues.append((("variants", i, "name"), f"variant {variant.name!r} is defined twice"))
            names.add(variant.name)
            if variant.baseline:
                if baseline_at is not None:
                    issues.append(
                        (
                            ("variants", i, "baseline"),
                            f"variants[{baseline_at}] is already the baseline; only one variant may be",
                        )
                    )
                else:
                    baseline_at = i
        if self.load.users < len(self.variants):
            # Users are split over variants by weight across all workers: fewer users than variants leaves one
            # without traffic, and its SLOs would fail for want of data.
            issues.append(
                (
                    ("load", "users"),
                    f"{self.load.users} users cannot cover {len(self.variants)} variants: every variant needs at "
                    f"least one user (load.users >= {len(self.variants)})",
                )
            )
        mix_names = [ref.name for ref in self.traffic.mixes]
        for i, slo in enumerate(self.slos):
            if slo.variant is not None and slo.variant not in names:
                message = str(UnknownNameError("variant", slo.variant, sorted(names)))
                issues.append((("slos", i, "variant"), message))
            if slo.mix is not None and slo.mix not in mix_names:
                message = f"mix {slo.mix!r} is not in traffic.mixes: {sorted(mix_names)}"
                issues.append((("slos", i, "mix"), message))
            if slo.metric in SCHEDULED_METRICS and self.load.arrival is None:
                issues.append((("slos", i, "metric"), QUEUE_DELAY_REFUSED))
        issues += class_issues(self.traffic.classes, self.slos, self.variants)
        if issues:
            raise SubpathIssues(issues)
        return self

    @property
    def baseline_variant(self) -> Variant:
        """The variant flagged ``baseline: true``, else the first one."""
        return next((v for v in self.variants if v.baseline), self.variants[0])

    def variant(self, name: str) -> Variant:
        """The variant called ``name``; raises ``UnknownNameError`` listing the known ones."""
        for variant in self.variants:
            if variant.name == name:
                return variant
        raise UnknownNameError("variant", name, [v.name for v in self.variants])


def missing_secrets(scenario: Scenario, environ: Mapping[str, str] | None = None) -> list[ConfigIssue]:
    """One issue per variant whose ``api_key_env`` names a variable unset or empty in ``environ`` (default: the
    process environment). Issues name the field and the variable, never a value."""
    env = os.environ if environ is None else environ
    issues = []
    for i, variant in enumerate(scenario.variants):
        name = variant.api_key_env
        if name is None:
            continue
        if name not in env:
            state = "is not set"
        elif not env[name].strip():
            state = "is empty"
        else:
            continue
        message = (
            f"environment variable {name} {state}, so every request to variant {variant.name!r} would be sent "
            f"without its API key; export {name} (e.g. from a Kubernetes Secret) or set api_key_env: null"
        )
        issues.append(ConfigIssue(f"variants[{i}].api_key_env", message))
    return issues


def check_environment(scenario: Scenario, source: str = "<scenario>", environ: Mapping[str, str] | None = None) -> None:
    """Raise ``ConfigError`` (exit 2) if a variant's API key variable is unset or empty: a run without its key
    would only measure how fast the server says 401."""
    issues = missing_secrets(scenario, environ)
    if issues:
        raise ConfigError(issues, source)


def scenario_json_schema() -> dict[str, Any]:
    """JSON schema of a scenario (``additionalProperties: false`` throughout), e.g. for an editor's YAML checks."""
    return Scenario.model_json_schema()


# --- loading -------------------------------------------------------------------------------------------------


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file; every problem raises ``ConfigError``."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([ConfigIssue("", "file not found")], source) from None
    except UnicodeDecodeError as exc:
        raise ConfigError([ConfigIssue("", f"not UTF-8 text ({exc.reason} at byte {exc.start})")], source) from None
    except OSError as exc:
        raise ConfigError([ConfigIssue("", f"cannot read the file: {exc.strerror or exc}")], source) from None
    return parse_scenario(text, source)


def parse_scenario(text: str, source: str = "<string>") -> Scenario:
    """Validate a scenario given as YAML text; ``source`` names it in error messages."""
    root, data = compose_yaml(text, source)
    if not isinstance(data, dict):
        issue = ConfigIssue(
            "", f"expected a mapping of scenario fields (variants, traffic, load, ...), got {describe_value(data)}", 1
        )
        raise ConfigError([issue], source)
    issues = duplicate_key_issues(root)
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(in_file_order([*issues, *translate_validation_error(exc, Scenario, root)]), source) from None
    except RecursionError:
        issue = ConfigIssue("", "the document refers to itself (a recursive YAML anchor)", None)
        raise ConfigError([*issues, issue], source) from None
    if issues:
        raise ConfigError(in_file_order(issues), source)
    return scenario


def validate_scenario(data: object, source: str = "<data>") -> Scenario:
    """Validate an already-parsed scenario (e.g. a file merged with CLI overrides); raises ``ConfigError``."""
    if not isinstance(data, dict):
        raise ConfigError(
            [ConfigIssue("", f"expected a mapping of scenario fields, got {describe_value(data)}")], source
        )
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(translate_validation_error(exc, Scenario, None), source) from None
