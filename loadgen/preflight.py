"""The preflight step: the checks of a valid scenario that read files or ask servers, run once before any load.

The model (loadgen/config/) checks shapes and values only; what it cannot know without I/O is checked here, each
problem a ``ConfigError`` issue naming the field and its line (or the ``--set`` flag that set it), exit 2:

- `traffic.dataset`: the file read, filtered and checked against `sample` and `default_output_tokens`
  (traffic/replay.py; the sampler reuses the rows read here);
- `traffic.trace`: the trace file read and windowed (traffic/trace_file.py), and a run long enough for its window
  when `load.duration` was left to its default;
- `traffic.agent_trace`: the agentic trace read and its graph checked (traffic/agent_traces.py);
- `tokenizer`: a file loaded and able to cut prompts exactly, or `server` asked of the first variant (the tokenizer
  the sampler then uses in this process);
- `tracing.otlp_endpoint`: the OpenTelemetry SDK installed (the `otel` extra);
- `metrics.prometheus`: each query once against the cluster Prometheus (``cluster=True``; a worker process that
  reports nothing skips it, and so does `loadgen validate`, which may run where the cluster is not).

Every path to load goes through here: `loadgen validate`, `run`, `demo` and `sweep` (the CLI, before any process
starts), and the Locust plugin as each process loads the scenario (so `locust -f` runs the same checks, and the pods
of `loadgen k8s run` / the Helm chart check where the files and the cluster are).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from loadgen.config.errors import ConfigError, ConfigIssue, SubpathIssues, in_file_order
from loadgen.config.overrides import Override
from loadgen.config.scenario import Scenario, ScenarioDocument, parse_document, read_document
from loadgen.live.cluster_metrics import check_queries
from loadgen.live.otlp import otel_missing
from loadgen.traffic.images import pillow_missing
from loadgen.traffic.replay import replay_rows
from loadgen.traffic.server_tokenizer import TokenizerError, check_tokenizer
from loadgen.traffic.trace_agent import agent_trace_of
from loadgen.traffic.trace_file import trace_of

__all__ = ["checked", "load_checked", "parse_checked", "preflight"]


def preflight(scenario: Scenario, doc: ScenarioDocument, *, cluster: bool = True) -> None:
    """Raise ``ConfigError`` (exit 2) listing every problem these checks find in ``scenario``, validated from
    ``doc`` (which places each problem in the file or on its ``--set``)."""
    issues: list[ConfigIssue] = []
    replay = scenario.traffic.dataset
    if replay is not None:
        try:
            replay_rows(replay)
        except SubpathIssues as exc:
            issues += [doc.issue(("traffic", "dataset", *sub), message) for sub, message in exc.issues]
    if scenario.traffic.trace is not None:
        issues += _trace_issues(scenario, doc)
    if scenario.traffic.agent_trace is not None:
        try:
            agent_trace_of(scenario.traffic.agent_trace)
        except SubpathIssues as exc:
            issues += [doc.issue(("traffic", "agent_trace", *sub), message) for sub, message in exc.issues]
    if scenario.tokenizer is not None:
        try:
            check_tokenizer(scenario.tokenizer, scenario.variants)
        except TokenizerError as exc:
            issues.append(doc.issue(("tokenizer",), str(exc)))
    issues += [doc.issue(("traffic", "custom_mixes", name, "images"), hint) for name, hint in pillow_missing(scenario)]
    if scenario.tracing is not None and scenario.tracing.otlp_endpoint is not None and otel_missing():
        issues.append(doc.issue(("tracing", "otlp_endpoint"), str(otel_missing())))
    prometheus = scenario.metrics.prometheus
    if cluster and prometheus is not None and not issues:  # a scenario already refused asks no one else
        more = {
            f"variants.{i}.{field}.query": part.query
            for i, v in enumerate(scenario.variants)
            for field, part in (("power", v.power), ("gpu_memory", v.gpu_memory))
            if part is not None
        }
        for field, message in check_queries(prometheus, more=more):
            path = tuple(int(part) if part.isdigit() else part for part in field.split("."))  # variants.0.power…
            issues.append(doc.issue(path, message, with_line=False))
    if issues:
        raise ConfigError(in_file_order(issues), doc.source)


def checked(doc: ScenarioDocument, *, cluster: bool = True) -> Scenario:
    """``doc`` validated by the model, then preflighted."""
    scenario = doc.validate()
    preflight(scenario, doc, cluster=cluster)
    return scenario


def load_checked(path: str | Path, overrides: Sequence[Override] = (), *, cluster: bool = True) -> Scenario:
    """A scenario file with its ``--set`` overrides, validated and preflighted; raises ``ConfigError``."""
    return checked(read_document(path).with_overrides(overrides), cluster=cluster)


def parse_checked(text: str, source: str = "<string>", *, cluster: bool = True) -> Scenario:
    """Scenario YAML text validated and preflighted; raises ``ConfigError``."""
    return checked(parse_document(text, source), cluster=cluster)


def _trace_issues(scenario: Scenario, doc: ScenarioDocument) -> list[ConfigIssue]:
    replay = scenario.traffic.trace
    assert replay is not None
    try:
        trace = trace_of(replay)
    except SubpathIssues as exc:
        return [doc.issue(("traffic", "trace", *sub), message) for sub, message in exc.issues]
    load, arrival = scenario.load, scenario.load.arrival
    last = trace.rows[-1].offset
    timed = arrival is not None and arrival.kind == "trace"
    if timed and "duration" not in load.model_fields_set and last > load.duration:
        # An explicit duration may cut the window short on purpose; the default would do it silently.
        return [
            doc.issue(
                ("traffic", "trace"),
                f"its window sends its last row at {last:g}s but the run lasts {load.duration:g}s (load.duration's "
                f"default): set load.duration to {math.ceil(last) + 1:g}s or more, or shorten the window "
                "(traffic.trace.duration)",
            )
        ]
    return []
