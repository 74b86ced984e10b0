"""The servers' own metrics: each engine's current names normalised, counters turned into rates, resets skipped."""

from __future__ import annotations

import pytest

from loadgen.live.server_metrics import ServerTimeline, metrics_url, parse_metrics

VLLM = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="m"}} {running}
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting}
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {kv}
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{{engine="0",model_name="m"}} {pre}
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{{engine="0",model_name="m"}} {queries}
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {hits}
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {draft}
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {acc}
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{{engine="0",model_name="m"}} {gen}
"""

LLAMACPP = """# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 1200
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 340
# TYPE llamacpp:prompt_tokens_seconds gauge
llamacpp:prompt_tokens_seconds 512.3
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 3
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 1
"""


def _vllm(**kw: float) -> str:
    base = {"running": 0, "waiting": 0, "kv": 0, "pre": 0, "queries": 0, "hits": 0, "draft": 0, "acc": 0, "gen": 0}
    return VLLM.format(**(base | kw))


def test_vllm_names_and_counters_as_rates() -> None:
    tl = ServerTimeline("http://x/metrics", 2.0)
    for t, kw in (
        (100.0, {"running": 4, "waiting": 0, "kv": 0.2}),
        (102.0, {"running": 8, "waiting": 6, "kv": 0.9, "pre": 2, "queries": 1000, "hits": 250, "draft": 40,
                 "acc": 30, "gen": 400}),
        (104.0, {"running": 8, "waiting": 2, "kv": 0.7, "pre": 3, "queries": 3000, "hits": 1250, "draft": 80,
                 "acc": 50, "gen": 1000}),
    ):  # fmt: skip
        kind, values = parse_metrics(_vllm(**kw))
        assert kind == "vllm"
        tl.add(t, kind, values)
    r = tl.report()
    assert r["source"] == "vllm" and r["samples"] == 3 and r["t_unix_s"] == [100.0, 102.0, 104.0]
    assert r["series"]["waiting"] == [0, 6, 2]
    assert r["series"]["preemptions_per_s"] == [None, 1.0, 0.5]
    assert r["series"]["generation_tokens_per_s"] == [None, 200.0, 300.0]
    assert r["series"]["prefix_cache_hit_rate"] == [None, 0.25, 0.5]
    assert r["series"]["spec_acceptance"] == [None, 0.75, 0.5]
    s = r["summary"]
    assert s["waiting_mean"] == pytest.approx(8 / 3, abs=1e-4) and s["waiting_max"] == 6
    assert s["kv_usage_max"] == 0.9 and s["preemptions"] == 3
    assert s["prefix_cache_hit_rate"] == pytest.approx(1250 / 3000, abs=1e-4)
    assert s["spec_acceptance"] == pytest.approx(50 / 80, abs=1e-4)


def test_a_counter_reset_is_no_negative_rate() -> None:
    tl = ServerTimeline("u", 1.0)
    for t, gen in ((0.0, 500), (1.0, 700), (2.0, 50), (3.0, 150)):  # the server restarted between 1 and 2
        tl.add(t, *parse_metrics(_vllm(gen=gen)))
    assert tl.report()["series"]["generation_tokens_per_s"] == [None, 200.0, None, 100.0]


def test_llamacpp_and_its_throughput_gauges_are_not_read() -> None:
    kind, values = parse_metrics(LLAMACPP)
    assert kind == "llamacpp"
    # requests_processing / deferred are the batch and the queue; the per-read throughput gauges are not used.
    assert values == {"prompt_tokens": 1200, "generation_tokens": 340, "running": 3, "waiting": 1}


def test_sglang_and_tgi_and_an_unknown_server() -> None:
    kind, values = parse_metrics(
        '# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name="m"} 5\n'
        '# TYPE sglang:cache_hit_rate gauge\nsglang:cache_hit_rate{model_name="m"} 0.4\n'
        '# TYPE sglang:spec_accept_rate gauge\nsglang:spec_accept_rate{model_name="m"} 0.7\n'
    )
    assert kind == "sglang" and values == {"waiting": 5, "prefix_hit_rate_gauge": 0.4, "spec_acceptance_gauge": 0.7}
    tl = ServerTimeline("u", 1.0)
    tl.add(0.0, kind, values)
    assert tl.report()["summary"]["prefix_cache_hit_rate"] == 0.4
    kind, values = parse_metrics("# TYPE tgi_queue_size gauge\ntgi_queue_size 2\ntgi_batch_current_size 7\n")
    assert kind == "tgi" and values == {"waiting": 2, "running": 7}
    assert parse_metrics("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 3\n") == (None, {})


@pytest.mark.parametrize(
    ("base", "url"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000/metrics"),
        ("http://h:8000/v1", "http://h:8000/metrics"),
        ("https://user:pw@h/prefix/v1/", "https://h/prefix/metrics"),
    ],
)
def test_metrics_url(base: str, url: str) -> None:
    assert metrics_url(base) == url
