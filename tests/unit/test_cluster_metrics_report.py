"""`metrics.prometheus` in the scenario and `cluster_metrics` in the reports: the fields' errors, the Markdown
table, the HTML charts on the client timeline's axis, the schema, and a sequential run's phases joined into one."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from loadgen.config.errors import ConfigError
from loadgen.config.scenario import validate_scenario
from loadgen.report.cluster_metrics_report import cluster_metrics_series, join_cluster_sections
from loadgen.report.html import render_html
from loadgen.report.markdown import render_markdown
from tests.report_schema import checked
from tests.unit.test_report_html import _data, _report


def _scenario(prometheus: object) -> dict[str, object]:
    variants = [{"name": "a", "base_url": "http://127.0.0.1:1", "model": "m"}]
    return {"name": "s", "variants": variants, "metrics": {"prometheus": prometheus}}


@pytest.mark.parametrize(
    "prometheus, path, needle",
    [
        ({"url": "prometheus:9090", "queries": {"a": "up"}}, "metrics.prometheus.url", "http:// or https://"),
        ({"url": "http://p:9090", "queries": {}}, "metrics.prometheus.queries", "at least 1"),
        ({"url": "http://p:9090", "queries": {"gpu util": "up"}}, "metrics.prometheus.queries", "'gpu util'"),
        ({"url": "http://p:9090", "queries": {"a": "  "}}, "metrics.prometheus.queries", "empty"),
        ({"url": "http://p:9090", "queries": {"a": "up"}, "step": 0}, "metrics.prometheus.step", "above zero"),
        ({"url": "http://p:9090", "queries": {"a": "up"}, "bearer_token_env": "$T"}, "metrics.prometheus", "NAME"),
        ({"url": "http://p:9090", "queries": {"a": "up"}, "token": "x"}, "metrics.prometheus.token", ""),
    ],
)
def test_field_errors_name_the_field(prometheus: dict[str, object], path: str, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        validate_scenario(_scenario(prometheus))
    issue = next(i for i in err.value.issues if i.path.replace("[", ".").replace("]", "").startswith(path))
    assert needle in issue.message, issue.message


def test_defaults() -> None:
    cfg = validate_scenario(_scenario({"url": "https://p.example/prom/", "queries": {"a": "up"}})).metrics.prometheus
    assert cfg is not None
    assert (cfg.url, cfg.step, cfg.timeout, cfg.bearer_token_env) == ("https://p.example/prom", 5.0, 10.0, None)


def _series(labels: dict[str, str], ts: list[float], values: list[float | None]) -> dict[str, Any]:
    present = [v for v in values if v is not None]
    return {
        "labels": labels, "t_unix_s": ts, "values": values,
        "mean": sum(present) / len(present) if present else None,
        "min": min(present, default=None), "max": max(present, default=None),
    }  # fmt: skip


def _section(start: float, gpu_values: list[float | None]) -> dict[str, Any]:
    ts = [start + i for i in range(len(gpu_values))]
    return {
        "url": "http://prom:9090", "start_unix_s": start, "end_unix_s": ts[-1], "step_s": 1.0, "note": None,
        "queries": [
            {"name": "gpu_util", "query": "avg by (gpu) (DCGM_FI_DEV_GPU_UTIL)", "error": None, "series_left_out": 0,
             "series": [_series({"gpu": "0"}, ts, gpu_values), _series({"gpu": "1"}, ts, [50.0] * len(ts))]},
            {"name": "broken", "query": "sum(", "error": "bad_data: parse error", "series": [], "series_left_out": 0},
        ],
    }  # fmt: skip


def test_the_markdown_html_and_schema_carry_it() -> None:
    report = _report()
    origin = report["variants"][0]["timeline"]["start_unix_s"]
    report["cluster_metrics"] = _section(origin + 2.0, [80.0, None, 90.0])
    checked(report)
    md = render_markdown(report)
    assert "## Cluster metrics (Prometheus at http://prom:9090, over the run, step 1 s)" in md
    assert "| gpu_util | gpu=0 | 2 | 85 | 80 | 90 |" in md and "| gpu_util | gpu=1 | 3 | 50 | 50 | 50 |" in md
    assert "- `broken`: Prometheus answered bad_data: parse error" in md
    # On the client charts' axis: x = seconds from the client timeline's start.
    (key, title, query, lines), *rest = cluster_metrics_series(report)
    assert rest == [] and (key, title, query) == (
        "cluster-0",
        "Cluster: gpu_util",
        "avg by (gpu) (DCGM_FI_DEV_GPU_UTIL)",
    )
    assert lines[0] == ("gpu=0", [[2.0, 80.0], [3.0, None], [4.0, 90.0]])
    charts = {c["id"]: c for c in _data(render_html(report))["charts"]}
    assert [d["label"] for d in charts["cluster-0"]["config"]["data"]["datasets"]] == ["gpu=0", "gpu=1"]


def test_a_note_is_all_the_markdown_says() -> None:
    report = _report()
    report["cluster_metrics"] = {**_section(1.0, [1.0]), "queries": [], "note": "cannot reach http://prom:9090"}
    checked(report)
    md = render_markdown(report)
    assert "- cannot reach http://prom:9090" in md and "| query |" not in md
    assert cluster_metrics_series(report) == []


def test_a_sequential_runs_phases_join_in_time_order() -> None:
    second, first = _section(20.0, [70.0, 72.0]), _section(10.0, [10.0, None, 30.0])
    second["queries"][1]["error"] = None
    joined = join_cluster_sections([second, {}, first])
    assert joined is not None
    assert (joined["start_unix_s"], joined["end_unix_s"]) == (10.0, 21.0)
    gpu0 = joined["queries"][0]["series"][0]
    assert gpu0["t_unix_s"] == [10.0, 11.0, 12.0, 20.0, 21.0] and gpu0["values"] == [10.0, None, 30.0, 70.0, 72.0]
    assert gpu0["mean"] == pytest.approx(45.5) and (gpu0["min"], gpu0["max"]) == (10.0, 72.0)
    assert joined["queries"][1]["error"] == "bad_data: parse error"  # one phase's refusal is kept
    assert first["queries"][0]["series"][0]["values"] == [10.0, None, 30.0]  # the phases' own are untouched
    assert join_cluster_sections([{}, {}]) is None
    report = _report()
    report["cluster_metrics"] = copy.deepcopy(joined)
    checked(report)
