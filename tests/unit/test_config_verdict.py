"""Verdict-related config: SLO bounds (latency metrics take stat + max_ms, success_rate min_percent), one choice per
request; mistakes name the field."""

from __future__ import annotations

import pytest

from loadgen.config.scenario import ConfigError, parse_scenario

BASE = 'variants: [{name: a, base_url: "http://127.0.0.1:1", model: m}]\n'


@pytest.mark.parametrize(
    ("slo", "field", "says"),
    [
        ("{metric: success_rate}", "slos[0].min_percent", "needs min_percent"),
        ("{metric: success_rate, min_percent: 99, max_ms: 5}", "slos[0].max_ms", "does not apply"),
        ("{metric: success_rate, min_percent: 101}", "slos[0].min_percent", "100"),
        ("{metric: ttft, max_ms: 5}", "slos[0].stat", "needs a stat"),
        ("{metric: ttft, stat: p99}", "slos[0].max_ms", "needs max_ms"),
        ("{metric: e2e, stat: p99, max_ms: 9, min_percent: 9}", "slos[0].min_percent", "only applies"),
    ],
)
def test_slo_bound_mistakes_name_the_field(slo: str, field: str, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_scenario(BASE + f"slos: [{slo}]")
    text = str(err.value)
    assert field in text and says in text, text


def test_success_rate_slo_per_variant_and_mix() -> None:
    sc = parse_scenario(BASE + "slos: [{metric: success_rate, min_percent: 99.5, variant: a, mix: chat}]")
    (slo,) = sc.slos
    assert (slo.min_percent, slo.variant, slo.mix) == (99.5, "a", "chat")
    assert slo.describe() == "success rate ≥ 99.5 %"


def test_default_slos_include_success_rate() -> None:
    sc = parse_scenario(BASE)
    assert [s.describe() for s in sc.slos] == ["ttft p99 ≤ 3000 ms", "e2e p99 ≤ 10000 ms", "success rate ≥ 99 %"]


@pytest.mark.parametrize("key", ["n", "best_of"])
def test_several_choices_per_request_are_refused(key: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_scenario(f'variants: [{{name: a, base_url: "http://127.0.0.1:1", model: m, extra_body: {{{key}: 3}}}}]')
    assert f"variants[0].extra_body.{key}" in str(err.value) and "one timeline" in str(err.value)
    parse_scenario(f'variants: [{{name: a, base_url: "http://127.0.0.1:1", model: m, extra_body: {{{key}: 1}}}}]')


@pytest.mark.parametrize("metric", ["queue_delay", "e2e_from_schedule"])
def test_schedule_metrics_need_open_loop(metric: str) -> None:
    slo = f"slos: [{{metric: {metric}, stat: p99, max_ms: 50}}]"
    with pytest.raises(ConfigError) as err:
        parse_scenario(BASE + slo)
    assert "slos[0].metric" in str(err.value) and "load.arrival" in str(err.value)
    parse_scenario(BASE + "load: {arrival: {kind: poisson, rate: 5}}\n" + slo)
