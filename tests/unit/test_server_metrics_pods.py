"""A variant scraped pod by pod: counters differenced per pod and summed (a pod's restart loses only its own
interval), queue and batch summed, KV-cache use as the mean and the max across pods; through one URL, scrapes from
different processes are several replicas, reported as a note without numbers."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from loadgen.live.server_metrics import ServerTimeline, parse_metrics
from loadgen.report.server_metrics_report import server_metrics_lines, server_metrics_series
from tests.report_schema import SCHEMA_FILE

A, B = "http://10.0.0.1:8000/metrics", "http://10.0.0.2:8000/metrics"


def _text(*, gen: float, prompt: float = 0, waiting: float = 0, running: float = 0, kv: float = 0,
          hits: float = 0, queries: float = 0, start: float | None = 1000.0) -> str:  # fmt: skip
    out = (
        f'# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{model_name="m"}} {waiting}\n'
        f'# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{model_name="m"}} {running}\n'
        f'# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{{model_name="m"}} {kv}\n'
        f'# TYPE vllm:generation_tokens counter\nvllm:generation_tokens_total{{model_name="m"}} {gen}\n'
        f'# TYPE vllm:prompt_tokens counter\nvllm:prompt_tokens_total{{model_name="m"}} {prompt}\n'
        f'# TYPE vllm:prefix_cache_hits counter\nvllm:prefix_cache_hits_total{{model_name="m"}} {hits}\n'
        f'# TYPE vllm:prefix_cache_queries counter\nvllm:prefix_cache_queries_total{{model_name="m"}} {queries}\n'
    )
    if start is not None:
        out += f"# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds {start}\n"
    return out


def _values(**kw: float | None) -> dict[str, float]:
    kind, values = parse_metrics(_text(**kw))  # type: ignore[arg-type]
    assert kind == "vllm"
    return values


def test_the_process_start_is_read_as_the_identity_and_only_beside_known_metrics() -> None:
    assert _values(gen=5, start=1234.5)["process_start"] == 1234.5
    assert parse_metrics("# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds 3\n") == (None, {})


def test_counters_are_summed_over_pods_each_differenced_on_its_own() -> None:
    tl = ServerTimeline("http://svc.ns.svc:8000/metrics", 2.0, scope="pods")
    a1 = _values(gen=1000, waiting=1, running=4, kv=0.2, start=1.0)
    b1 = _values(gen=50, waiting=2, running=1, kv=0.6, start=2.0)
    a2 = _values(gen=1400, waiting=3, running=4, kv=0.4, hits=10, queries=40, start=1.0)
    b2 = _values(gen=150, waiting=0, running=2, kv=0.8, hits=30, queries=60, start=2.0)
    a3 = _values(gen=1600, waiting=0, running=2, kv=0.3, hits=10, queries=40, start=1.0)
    b3 = _values(gen=30, waiting=5, running=1, kv=0.9, start=9.0)  # B restarted: a new process, its counter from 0
    for t, a, b in ((100.0, a1, b1), (102.0, a2, b2), (104.0, a3, b3)):
        tl.add_round(t, "vllm", {A: a, B: b})
    r = tl.report()
    assert r["scope"] == "pods" and r["several_replicas"] is False and r["note"] is None
    s = r["series"]
    # 400/2 + 100/2 tokens/s, then A's 200/2 alone: B restarted, its interval is unknown — never 1600-150 mixed
    assert s["generation_tokens_per_s"] == [None, 250.0, 100.0]
    assert s["waiting"] == [3, 3, 5] and s["running"] == [5, 6, 3]
    assert s["kv_usage"] == [0.4, 0.6, 0.6] and s["kv_usage_max"] == [0.6, 0.8, 0.9]
    assert s["prefix_cache_hit_rate"] == [None, 0.4, None]  # (10+30)/(40+60), then A's 0/0 and B restarted
    assert r["summary"]["generation_tokens"] == 400 + 100 + 200
    assert r["summary"]["kv_usage_max"] == 0.9 and r["summary"]["kv_usage_mean"] == pytest.approx(1.6 / 3, abs=1e-3)
    assert r["summary"]["waiting_max"] == 5
    pods = {p["url"]: p for p in r["pods"]}
    assert pods[A]["restarts"] == 0 and pods[B]["restarts"] == 1
    assert pods[A]["summary"]["generation_tokens"] == 600 and pods[B]["summary"]["generation_tokens"] == 100
    assert pods[B]["series"]["kv_usage"] == [0.6, 0.8, 0.9] and pods[B]["summary"]["kv_usage_max"] == 0.9


def test_a_pod_that_fails_a_scrape_is_differenced_over_its_own_gap_and_the_sum_is_not_partial() -> None:
    tl = ServerTimeline("u", 1.0, scope="pods")
    tl.add_round(0.0, "vllm", {A: _values(gen=0, waiting=1), B: _values(gen=0, waiting=1)})
    tl.add_round(1.0, "vllm", {A: _values(gen=10, waiting=1), B: None})
    tl.add_round(2.0, "vllm", {A: _values(gen=20, waiting=1), B: _values(gen=40, waiting=1)})
    r = tl.report()
    assert r["series"]["generation_tokens_per_s"] == [None, 10.0, 30.0]  # B: 40 over its own 2 s
    assert r["series"]["waiting"] == [2, None, 2]  # a queue summed without a pod would read low
    assert r["failures"] == 0 and [p["failures"] for p in r["pods"]] == [0, 1]
    assert r["summary"]["generation_tokens"] == 60


def test_pods_that_come_and_go_between_lists() -> None:
    tl = ServerTimeline("u", 1.0, scope="pods")
    tl.add_round(0.0, "vllm", {A: _values(gen=0)})
    tl.add_round(1.0, "vllm", {A: _values(gen=5), B: _values(gen=100)})  # B appears (scaled up): no delta yet
    tl.add_round(2.0, "vllm", {B: _values(gen=110)})  # A is gone
    assert tl.report()["series"]["generation_tokens_per_s"] == [None, 5.0, 10.0]


@pytest.mark.parametrize(
    ("starts", "several"),
    [
        ([1.0, 1.0, 1.0, 1.0], False),
        ([1.0, 1.0, 2.0, 2.0], False),  # a restart
        ([1.0, 2.0, 1.0, 2.0], True),  # two processes taking turns
        ([1.0, 1.0, 2.0, 1.0], True),
    ],
)
def test_several_replicas_behind_one_url_by_their_process_start(starts: list[float], several: bool) -> None:
    tl = ServerTimeline("http://svc/metrics", 1.0)
    for i, start in enumerate(starts):
        tl.add(float(i), "vllm", _values(gen=10 * i, waiting=1, start=start))
    r = tl.report()
    assert r["scope"] == "service" and r["several_replicas"] is several and r["pods"] == []
    if several:
        assert "several replicas answer behind http://svc/metrics" in r["note"]
        assert r["series"] == {} and r["summary"] == {}
        lines = "\n".join(server_metrics_lines({"variants": [{"name": "v", "server_metrics": r}]}))
        assert "⚠ several replicas" in lines and "| v |" not in lines
        assert server_metrics_series({"variants": [{"name": "v", "server_metrics": r}]}) == []
    else:
        assert r["note"] is None and r["series"]["waiting"] == [1, 1, 1, 1]


def test_without_a_process_identity_counters_going_back_twice_are_several_replicas() -> None:
    tl = ServerTimeline("u", 1.0)
    for i, gen in enumerate((500, 700, 40, 760, 60)):
        tl.add(float(i), "llamacpp", _values(gen=gen, start=None))
    assert tl.report()["several_replicas"] is True
    once = ServerTimeline("u", 1.0)
    for i, gen in enumerate((500, 700, 40, 90)):  # one restart
        once.add(float(i), "llamacpp", _values(gen=gen, start=None))
    assert once.report()["several_replicas"] is False


def test_the_markdown_has_a_row_per_pod_and_the_report_validates() -> None:
    tl = ServerTimeline("http://svc.ns.svc:8000/metrics", 1.0, scope="pods")
    tl.add_round(0.0, "vllm", {A: _values(gen=0, kv=0.1), B: _values(gen=0, kv=0.5)})
    tl.add_round(1.0, "vllm", {A: _values(gen=8, kv=0.2), B: _values(gen=2, kv=0.7)})
    sm = tl.report()
    report = {"variants": [{"name": "v", "server_metrics": sm}]}
    lines = "\n".join(server_metrics_lines(report))
    assert "| v | vllm | 2 | 2 |" in lines
    assert f"| v | {A} | 2 | 0 | 0 |" in lines and f"| v | {B} | 2 | 0 | 0 |" in lines
    assert "server-kv_usage_max" in [c[0] for c in server_metrics_series(report)]
    _validate(sm)
    several = ServerTimeline("u", 1.0)
    for i, start in enumerate((1.0, 2.0, 1.0)):
        several.add(float(i), "vllm", _values(gen=i, start=start))
    _validate(several.report())


def _validate(server_metrics: dict[str, Any]) -> None:
    """Against report.schema.json's `variants[].server_metrics`."""
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))["$defs"]["variant"]["properties"]["server_metrics"]
    jsonschema.Draft202012Validator(schema).validate(server_metrics)
