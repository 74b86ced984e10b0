"""The scenario: one strict, typed, described model of everything a run needs, and its YAML loader.

Unknown keys are errors and every field carries a description, which ``scenario_json_schema()`` exports; the annotated
example ``examples/scenario.yaml`` is written by hand and held to this model by ``tests/unit/test_examples.py``.
Loading never raises anything but ``ConfigError``, whose issues carry the field path (``variants[0].dialect``) and
the YAML line, so a typo is a one-line fix rather than a traceback.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    model_validator,
)

from loadgen.config.adapters import adapter_slo_issues
from loadgen.config.classes import PriorityClass, class_issues
from loadgen.config.errors import (
    ConfigError,
    ConfigIssue,
    SubpathIssues,
    compose_yaml,
    describe_value,
    duplicate_key_issues,
    format_path,
    in_file_order,
    line_of,
    translate_validation_error,
)
from loadgen.config.images import image_issues
from loadgen.config.live_metrics import LiveMetrics
from loadgen.config.overrides import Override, apply_overrides
from loadgen.config.quality import Quality
from loadgen.config.routing import routing_issues
from loadgen.config.slo import SLO, default_slos
from loadgen.config.stop_when import StopWhen
from loadgen.config.tools import tool_issues
from loadgen.config.tracing import Tracing
from loadgen.config.traffic import Arrival, Bucket, Load, MixDef, MixRef, Traffic
from loadgen.config.variant import Variant
from loadgen.config.verdict_options import ColdStarts, Goodput, RunTrust
from loadgen.config.whole_replies import whole_reply_issues
from loadgen.metric_names import SCHEDULED_METRICS
from loadgen.registry import UnknownNameError

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
    "ScenarioDocument",
    "Traffic",
    "Variant",
    "check_environment",
    "load_scenario",
    "missing_secrets",
    "parse_document",
    "parse_scenario",
    "read_document",
    "scenario_json_schema",
    "validate_scenario",
]


QUEUE_DELAY_REFUSED = (
    "queue_delay and e2e_from_schedule need open-loop arrivals: set load.arrival (e.g. {kind: poisson, rate: 10}); "
    "closed-loop users send as soon as they are free, so there is no schedule to measure from"
)


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
    stop_when: StopWhen | None = Field(
        default=None,
        description="End the run early once its answer is known (an SLO breached beyond doubt, a window of errors, "
        "failures in a row, an unreachable target): exit 1 whatever the rule (a dead target is a breach); never a "
        "pass. Null: the run lasts its duration.",
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
    quality: Quality | None = Field(
        default=None,
        description="Compare each variant's replies with the baseline's for the same requests (agreement on the first "
        "k tokens, exact matches, edit similarity), beside its speedup; set temperature 0 and a seed in every "
        "variant's extra_body. A bounded sample of requests keeps its replies. Null: no comparison of outputs.",
    )
    tracing: Tracing | None = Field(
        default=None,
        description="W3C trace context: every request carries a `traceparent` header (its trace id in the raw "
        "records, so a server's spans join them), a share flagged sampled; optionally spans and the run's summary "
        "exported over OTLP/HTTP. Null: no trace header.",
    )

    @model_validator(mode="after")
    def _check(self) -> Scenario:
        issues: list[tuple[tuple[str | int, ...], str]] = []
        arrival = self.load.arrival
        if self.traffic.trace is not None and arrival is None:
            self.load.arrival = Arrival(kind="trace")  # a trace is sent at its own times unless told otherwise
        elif arrival is not None and arrival.kind == "trace" and self.traffic.trace is None:
            issues.append((("load", "arrival", "kind"), "trace needs traffic.trace: the file whose times it sends"))
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
        if self.load.users < len(self.variants) and not self.load.sequential:
            # Users are split over variants by weight across all workers: fewer users than variants leaves one
            # without traffic, and its SLOs would fail for want of data. (Variants run one after another each get
            # them all.)
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
            if slo.metric == "session_duration":
                agents = sorted(ref.name for ref in self.traffic.mixes if ref.agent is not None)
                if not agents or (slo.mix is not None and slo.mix in mix_names and slo.mix not in agents):
                    where = f"mix {slo.mix!r} is" if slo.mix is not None else "no mix of traffic.mixes is"
                    message = f"session_duration judges agent tasks, and {where} sent as agent tasks (`agent`)"
                    issues.append((("slos", i, "metric"), message + (f"; these are: {agents}" if agents else "")))
            if slo.adapter is not None:
                issues += adapter_slo_issues(i, slo.adapter, slo.variant, self.variants)
        issues += class_issues(self.traffic.classes, self.slos, self.variants)
        issues += image_issues(self.traffic, self.variants)
        issues += whole_reply_issues(self.variants, self.slos, self.goodput, self.traffic.cancel)
        issues += tool_issues(self.traffic.mixes, self.variants)
        issues += routing_issues(self.variants, self.traffic.classes, self.goodput)
        issues += [
            (("variants", i, field), "reads the cluster Prometheus: give metrics.prometheus {url, queries}")
            for i, variant in enumerate(self.variants)
            for field in ("power", "gpu_memory")
            if getattr(variant, field) is not None and self.metrics.prometheus is None
        ]
        reads = any(v.power or v.gpu_memory for v in self.variants)
        if self.metrics.prometheus is not None and not self.metrics.prometheus.queries and not reads:
            issues.append((("metrics", "prometheus", "queries"), "at least 1 query, or a variant's power / gpu_memory"))
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
    """One issue per secret of a variant (``api_key_env``, each ``headers_from_env`` value) naming a variable unset or
    empty in ``environ`` (default: the process environment). Issues name the field and the variable, never a value."""
    env = os.environ if environ is None else environ
    issues = []
    for i, variant in enumerate(scenario.variants):
        sources = (
            [("api_key_env", variant.api_key_env, "its API key", "or set api_key_env: null")]
            if (variant.api_key_env)
            else []
        )
        sources += [
            (f"headers_from_env.{header}", name, f"its {header} header", f"or drop {header} from headers_from_env")
            for header, name in variant.headers_from_env.items()
        ]
        for field, name, what, otherwise in sources:
            assert name is not None
            if name not in env:
                state = "is not set"
            elif not env[name].strip():
                state = "is empty"
            else:
                continue
            message = (
                f"environment variable {name} {state}, so every request to variant {variant.name!r} would be sent "
                f"without {what}; export {name} (e.g. from a Kubernetes Secret) {otherwise}"
            )
            issues.append(ConfigIssue(f"variants[{i}].{field}", message))
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


@dataclass(frozen=True)
class ScenarioDocument:
    """A scenario as read, before validation: its data (``--set`` overrides applied), the YAML node tree whose marks
    give each field's line, and the overrides, so that a problem found in a field says where that field came from
    (the file's line, or the ``--set`` flag that set it)."""

    source: str
    data: Any
    root: yaml.Node | None = None
    overrides: tuple[Override, ...] = ()

    def with_overrides(self, overrides: Sequence[Override]) -> ScenarioDocument:
        """This document with ``overrides`` applied in turn (later ones win); raises ``ConfigError``."""
        if not overrides:
            return self
        data, applied = apply_overrides(self.data, overrides, self.source)
        return replace(self, data=data, overrides=(*self.overrides, *applied))

    def issue(self, loc: tuple[str | int, ...], message: str, *, with_line: bool = True) -> ConfigIssue:
        """A problem of the field at ``loc``: its line in the file, or the ``--set`` flag that set it."""
        override = self._override_of(loc)
        if override is not None:
            return ConfigIssue(format_path(loc), f"{message} ({override.flag})")
        return ConfigIssue(format_path(loc), message, line_of(self.root, loc) if with_line else None)

    def validate(self) -> Scenario:
        """The validated scenario; every problem raises ``ConfigError`` (each issue with its field path and line)."""
        if not isinstance(self.data, dict):
            issue = ConfigIssue(
                "",
                "expected a mapping of scenario fields (variants, traffic, load, ...), got "
                f"{describe_value(self.data)}",
                1,
            )
            raise ConfigError([issue], self.source)
        issues = duplicate_key_issues(self.root) if self.root is not None else []
        try:
            scenario = Scenario.model_validate(self.data)
        except ValidationError as exc:
            found = [self._relabel(i) for i in translate_validation_error(exc, Scenario, self.root)]
            raise ConfigError(in_file_order([*issues, *found]), self.source) from None
        except RecursionError:
            issue = ConfigIssue("", "the document refers to itself (a recursive YAML anchor)", None)
            raise ConfigError([*issues, issue], self.source) from None
        if issues:
            raise ConfigError(in_file_order(issues), self.source)
        return scenario

    def _override_of(self, loc: tuple[str | int, ...] | str) -> Override | None:
        path = loc if isinstance(loc, str) else format_path(loc)
        for override in reversed(self.overrides):  # the last one set it
            at = format_path(override.loc)
            if path == at or path.startswith((at + ".", at + "[")):
                return override
        return None

    def _relabel(self, issue: ConfigIssue) -> ConfigIssue:
        override = self._override_of(issue.path)
        if override is None:
            return issue
        return ConfigIssue(issue.path, f"{issue.message} ({override.flag})")


def read_document(path: str | Path) -> ScenarioDocument:
    """A scenario file read and parsed as YAML, not yet validated; raises ``ConfigError``."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([ConfigIssue("", "file not found")], source) from None
    except UnicodeDecodeError as exc:
        raise ConfigError([ConfigIssue("", f"not UTF-8 text ({exc.reason} at byte {exc.start})")], source) from None
    except OSError as exc:
        raise ConfigError([ConfigIssue("", f"cannot read the file: {exc.strerror or exc}")], source) from None
    return parse_document(text, source)


def parse_document(text: str, source: str = "<string>") -> ScenarioDocument:
    """Scenario YAML parsed, not yet validated; ``source`` names it in error messages."""
    root, data = compose_yaml(text, source)
    return ScenarioDocument(source, data, root)


def load_scenario(path: str | Path, overrides: Sequence[Override] = ()) -> Scenario:
    """Read and validate a scenario file (with ``--set`` overrides); every problem raises ``ConfigError``. Checks
    only the model's rules: the checks that read files or ask servers are ``loadgen.preflight``'s."""
    return read_document(path).with_overrides(overrides).validate()


def parse_scenario(text: str, source: str = "<string>") -> Scenario:
    """Validate a scenario given as YAML text; ``source`` names it in error messages."""
    return parse_document(text, source).validate()


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
