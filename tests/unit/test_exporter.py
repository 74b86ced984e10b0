"""The exporter's figures against the HDR histograms they come from, and its text against Prometheus' own parser."""

from __future__ import annotations

import math
import random

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from loadgen.config.errors import ConfigError
from loadgen.config.live_metrics import DEFAULT_BUCKETS_S
from loadgen.config.scenario import validate_scenario
from loadgen.live.exporter import FAMILIES, LiveView, MetricsText, exporter_registry
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.health import HealthStats, HealthThresholds
from loadgen.measure.histogram import LatencyHistogram
from loadgen.measure.sessions import SessionStats
from loadgen.metric_names import PERCENTILES
from loadgen.report.server_split import latency_split
from loadgen.report.sessions import sessions_json


def _hist(rng: random.Random, n: int, sigma: float = 0.9) -> LatencyHistogram:
    h = LatencyHistogram()
    for _ in range(n):
        h.record(rng.lognormvariate(-2.0, sigma))
    return h


@pytest.mark.parametrize("censored", [0, 3, 40])
def test_buckets_and_quantiles_are_the_hdr_histograms_own(censored: int) -> None:
    rng = random.Random(censored)
    h = _hist(rng, 3000)
    h.record(0.1)  # a value on a bucket bound: counts in le="0.1" exactly when its HDR value is ≤ 0.1
    text = MetricsText(lambda: None, DEFAULT_BUCKETS_S)
    f = text.figures(h, censored)
    assert f.buckets[:-1] == [h.count - h.count_above(b) for b in DEFAULT_BUCKETS_S]
    assert f.buckets[-1] == h.count
    summary = h.summary_ms(censored)
    for (name, _), q in zip(PERCENTILES, f.quantiles, strict=True):
        want = summary[name]
        assert (q == math.inf) if want is None else q == pytest.approx(want / 1e3, abs=1e-9), name
    assert f.sum_s / h.count == pytest.approx(h.summary_ms()["mean"] / 1e3, rel=1e-5)


def _view() -> tuple[Aggregate, LiveView]:
    rng = random.Random(1)
    agg = Aggregate()
    for v in ("base", "int8"):
        for m in ("chat", "rag"):
            g = agg.group(v, m)
            g.requests, g.ok, g.errors, g.output_tokens = 100, 97, {"timeout": 2, "http_503": 1}, 4200
            g.censored = {"ttft": 2, "e2e": 3}
            g.cut_by_stop, g.cancelled = 1, 4  # in no outcome: counted apart
            for metric in ("ttft", "itl", "tpot", "e2e"):
                g.hists[metric] = _hist(rng, 200)
    c = agg.priority_class("base", "interactive")
    c.requests, c.ok = 10, 10
    c.hists["ttft"] = _hist(rng, 10)
    health = HealthStats()
    health.add_lag(0.004)
    health.add_cpu(35.0)
    return agg, LiveView(agg, {"worker-0": health}, "demo", 3, HealthThresholds())


def _samples(body: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(body.decode())
        for s in fam.samples
    }


def test_the_text_parses_and_says_what_the_aggregate_holds() -> None:
    agg, view = _view()
    text = MetricsText(lambda: view, DEFAULT_BUCKETS_S)
    s = _samples(text.render())
    lab = (("mix", "chat"), ("variant", "base"))
    assert s[("loadgen_requests_total", tuple(sorted((*lab, ("outcome", "ok")))))] == 97
    assert s[("loadgen_requests_total", tuple(sorted((*lab, ("outcome", "error")))))] == 3
    assert s[("loadgen_errors_total", tuple(sorted((*lab, ("class", "timeout")))))] == 2
    assert s[("loadgen_censored_samples_total", tuple(sorted((*lab, ("metric", "e2e")))))] == 3
    assert s[("loadgen_output_tokens_total", lab)] == 4200
    for reason, n in (("warmup", 0), ("cut_by_stop", 1), ("cancelled", 4)):
        assert s[("loadgen_requests_excluded_total", tuple(sorted((*lab, ("reason", reason)))))] == n
    h = agg.groups[("base", "chat")].hists["ttft"]
    assert s[("loadgen_ttft_seconds_count", lab)] == h.count
    assert s[("loadgen_ttft_seconds_bucket", tuple(sorted((*lab, ("le", "0.1")))))] == h.count - h.count_above(0.1)
    # The censored failures rank above every recorded sample, as in the report.
    p99 = h.summary_ms(2)["p99"]
    assert s[("loadgen_ttft_quantile_seconds", tuple(sorted((*lab, ("quantile", "0.99")))))] == pytest.approx(
        math.inf if p99 is None else p99 / 1e3
    )
    assert s[("loadgen_worker_cpu_p90_ratio", (("worker", "worker-0"),))] == pytest.approx(0.35)
    assert s[("loadgen_run_untrustworthy_reasons", ())] == 0
    assert s[("loadgen_run_info", (("run", "3"), ("scenario", "demo")))] == 1
    ck = (("outcome", "ok"), ("priority_class", "interactive"), ("variant", "base"))
    assert s[("loadgen_class_requests_total", ck)] == 10


def test_a_group_that_changed_is_rendered_again_and_the_registry_agrees() -> None:
    agg, view = _view()
    text = MetricsText(lambda: view, DEFAULT_BUCKETS_S)
    first = text.render()
    assert text.render() == first  # nothing changed: the same text
    g = agg.groups[("int8", "rag")]
    g.hists["ttft"].record(100.0)  # a new sample above every bound
    g.requests += 1
    g.ok += 1
    g.cancelled += 1
    s = _samples(text.render())
    lab = (("mix", "rag"), ("variant", "int8"))
    assert s[("loadgen_ttft_seconds_count", lab)] == 201
    assert s[("loadgen_ttft_seconds_bucket", tuple(sorted((*lab, ("le", "60.0")))))] == 200
    assert s[("loadgen_requests_excluded_total", tuple(sorted((*lab, ("reason", "cancelled")))))] == 5
    # The registry push_to_gateway takes holds the same samples (floats as prometheus_client writes them).
    assert _samples(generate_latest(exporter_registry(text))) == s


def test_no_run_yet_exports_the_families_empty() -> None:
    body = MetricsText(lambda: None, DEFAULT_BUCKETS_S).render().decode()
    families = list(text_string_to_metric_families(body))
    assert [f.name for f in families] == [name for name, _, _ in FAMILIES]
    assert not any(f.samples for f in families)


@pytest.mark.parametrize("buckets", [[], [0.5, 0.1], [0.0, 1.0], [1.0, float("inf")]])
def test_bucket_bounds_are_checked(buckets: list[float]) -> None:
    doc = {
        "variants": [{"name": "a", "base_url": "http://127.0.0.1:1", "model": "m"}],
        "metrics": {"buckets_s": buckets},
    }
    with pytest.raises(ConfigError, match="buckets_s"):
        validate_scenario(doc)


def test_the_scrape_interval_defaults_to_two_seconds() -> None:
    sc = validate_scenario({"variants": [{"name": "a", "base_url": "http://127.0.0.1:1", "model": "m"}]})
    assert sc.metrics.server_scrape_interval == 2.0
    assert sc.metrics.buckets_s == list(DEFAULT_BUCKETS_S)


def test_the_server_split_is_the_reports_rule_on_the_window_so_far() -> None:
    # The client's mean TTFT over the variant's mixes, split by the server's mean queue and prefill: the same figures
    # as the report's latency_split for the same means; a variant whose server exports no times has none.
    agg, view = _view()
    view.server_times = {"base": {"queue": {"count": 90, "mean_ms": 40.0}, "prefill": {"count": 90, "mean_ms": 60.0}}}
    samples = _samples(MetricsText(lambda: view, DEFAULT_BUCKETS_S).render())
    hists = [agg.groups["base", m].hists["ttft"] for m in ("chat", "rag")]
    client_ms = sum(h.summary_ms()["mean"] * h.count for h in hists) / sum(h.count for h in hists)
    split = {dict(k[1])["part"]: v for k, v in samples.items() if k[0] == "loadgen_server_ttft_split_seconds"}
    want = latency_split(
        {
            "server_metrics": {"request_times": view.server_times["base"]},
            "overall": {"metrics_ms": {"ttft": {"mean": client_ms}}},
        }
    )
    assert want is not None
    assert split["client_ttft"] == pytest.approx(client_ms / 1e3, rel=1e-4)
    assert split["queue"] == pytest.approx(0.040) and split["prefill"] == pytest.approx(0.060)
    assert split["server_ttft"] == pytest.approx(0.100)
    assert split["network_client"] == pytest.approx(want["network_client_ms"] / 1e3, rel=1e-3)
    share = samples["loadgen_server_queue_share_ratio", (("variant", "base"),)]
    assert share == pytest.approx(want["queue_share"], rel=1e-3)
    assert not any(dict(k[1]).get("variant") == "int8" for k in samples if k[0].startswith("loadgen_server_"))


def _sessions(agg: Aggregate, variant: str, durations: list[float], cut: int, failed: int = 0) -> SessionStats:
    """A (variant, `agent`) of completed sessions of these durations, `cut` / `failed` ones censored above them."""
    s = agg.sessions.setdefault((variant, "agent"), SessionStats())
    for d in durations:
        s.duration.record(d)
    s.completed = s.completed_in_window = len(durations)
    s.fates = {"completed": len(durations), "failed": failed, "cut": cut, "in_warmup": 2}
    s.censored = cut + failed
    s.steps, s.duration_s = 6 * len(durations), sum(durations)
    s.model_s, s.tool_s = 0.6 * s.duration_s, 0.3 * s.duration_s
    s.subagent_s = s.duration_s - s.model_s - s.tool_s
    s.good = len(durations) - 1
    return s


def _with(lab: tuple[tuple[str, str], ...], **more: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((*lab, *more.items())))


_SCENARIO = {
    "variants": [{"name": v, "base_url": "http://127.0.0.1:1", "model": "m"} for v in ("base", "int8")],
    "traffic": {"mixes": [{"name": "chat", "weight": 1}, {"name": "agent", "weight": 1}]},
}


def test_agent_sessions_are_the_reports_figures_and_absent_without_sessions() -> None:
    agg, view = _view()
    families = ("loadgen_sessions", "loadgen_session_", "loadgen_sessions_per_hour")
    # No agent sessions: the families are declared, with no sample.
    plain = MetricsText(lambda: view, DEFAULT_BUCKETS_S).render().decode()
    assert "# TYPE loadgen_sessions_total counter" in plain
    assert not any(k[0].startswith(families) for k in _samples(plain.encode()))

    rng = random.Random(7)
    _sessions(agg, "base", [rng.uniform(30, 300) for _ in range(40)], cut=1, failed=1)
    _sessions(agg, "int8", [rng.uniform(30, 300) for _ in range(3)], cut=5)  # most cut: p50 among them
    view.window_s = 1800.0
    samples = _samples(MetricsText(lambda: view, DEFAULT_BUCKETS_S).render())
    scenario = validate_scenario(_SCENARIO)
    for v in scenario.variants:
        (report,) = (sessions_json(agg, v, view.window_s, users=4) or {}).values()  # the report's own
        lab = (("mix", "agent"), ("variant", v.name))
        for fate in ("completed", "failed", "cut", "not_sent", "in_warmup"):
            got = samples[("loadgen_sessions_total", _with(lab, fate=fate))]
            assert got == report["fates"].get(fate, 0), fate
        for name, p in PERCENTILES:
            got = samples[("loadgen_session_duration_quantile_seconds", _with(lab, quantile=repr(round(p / 100, 6))))]
            want = report["duration_ms"][name]
            assert got == (math.inf if want is None else pytest.approx(want / 1e3, abs=1e-12)), (v.name, name)
        assert samples[("loadgen_sessions_per_hour", lab)] == report["sessions_per_hour"]
        for part in ("model", "tools", "subagents"):
            got = samples[("loadgen_session_time_share_ratio", _with(lab, part=part))]
            assert got == report["time_share"][part]
        assert samples[("loadgen_session_goodput_ratio", lab)] == report["goodput_share"]
    base, int8 = (("mix", "agent"), ("variant", "base")), (("mix", "agent"), ("variant", "int8"))
    assert samples[("loadgen_session_duration_quantile_seconds", _with(base, quantile="0.5"))] < math.inf
    # 3 completed, 5 cut: the median and above rank among the cut ones, +Inf as the report's "censored".
    assert samples[("loadgen_session_duration_quantile_seconds", _with(int8, quantile="0.5"))] == math.inf
    assert samples[("loadgen_sessions_per_hour", base)] == pytest.approx(40 * 2)  # 40 in half an hour
    # No window yet (the warm-up): no rate, the rest as before.
    view.window_s = 0.0
    early = _samples(MetricsText(lambda: view, DEFAULT_BUCKETS_S).render())
    assert not any(k[0] == "loadgen_sessions_per_hour" for k in early)
    assert early[("loadgen_session_goodput_ratio", base)] == samples[("loadgen_session_goodput_ratio", base)]


def test_agent_sessions_under_way_are_the_workers_latest_counts() -> None:
    from loadgen.measure.collector import Collector

    col = Collector(1)
    base = {"run": 1, "health": HealthStats().to_wire(), "window": None}
    col.merge_report("w1", {**base, "tasks_running": [["base", "agent", 3], ["int8", "agent", 1]]})
    col.merge_report("w2", {**base, "tasks_running": [["base", "agent", 2]]})
    col.merge_report("w1", {**base, "tasks_running": [["base", "agent", 1], ["int8", "agent", 0]]})  # its latest
    assert col.sessions_in_flight() == {("base", "agent"): 3, ("int8", "agent"): 0}
    _, view = _view()
    view.sessions_in_flight = col.sessions_in_flight()
    samples = _samples(MetricsText(lambda: view, DEFAULT_BUCKETS_S).render())
    assert samples[("loadgen_sessions_in_flight", (("mix", "agent"), ("variant", "base")))] == 3
    assert samples[("loadgen_sessions_in_flight", (("mix", "agent"), ("variant", "int8")))] == 0
