"""A variant's `power` / `gpu_memory` queries against a Prometheus that misbehaves (the stand-in of
test_cluster_metrics.py, on loopback; tests/e2e/test_power_prometheus.py reads the real one): a query it refuses is a
configuration error before load naming the variant's field, and once the run ran, a refused or unreachable query is
the part's note, never an exception; several series are summed and said so."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from loadgen.config.errors import ConfigError
from loadgen.config.scenario import parse_scenario
from loadgen.live.variant_power import variant_power
from loadgen.locust_plugin.launcher import free_port
from loadgen.preflight import load_checked
from tests.serving import threaded_http

from .test_cluster_metrics import _Prom


@pytest.fixture
def prom() -> Iterator[str]:
    _Prom.seen = []
    with threaded_http(_Prom) as srv:
        yield f"http://127.0.0.1:{srv.server_address[1]}"


def _scenario(url: str, power: str, memory: str = "gpu") -> str:
    return (
        "variants:\n  - {name: a, base_url: 'http://127.0.0.1:1', model: m, cost: {usd_per_hour: 1},\n"
        f"     power: {{query: '{power}'}}, gpu_memory: {{query: '{memory}'}}}}\n"
        f"metrics: {{prometheus: {{url: '{url}', step: 1s, timeout: 3s}}}}\n"
    )


def test_a_refused_power_query_is_exit_2_before_load_naming_the_field(tmp_path: Path, prom: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(_scenario(prom, "bad(DCGM_FI_DEV_POWER_USAGE"))
    with pytest.raises(ConfigError) as err:
        load_checked(path)
    (issue,) = err.value.issues
    assert issue.path == "variants[0].power.query" and "bad_data" in issue.message
    path.write_text(_scenario(prom, "up"))
    assert load_checked(path).variants[0].power is not None  # both queries accepted: no issue
    assert [p["query"] for _, p, _ in _Prom.seen[-2:]] == ["up", "gpu"]


def test_what_fails_after_the_run_is_a_note(prom: str) -> None:
    sc = parse_scenario(_scenario(prom, "bad(x", "gpu"))
    cfg = sc.metrics.prometheus
    assert cfg is not None
    out = variant_power(cfg, sc.variants[0], 1000.0, 1004.0, 100)
    assert out["energy"]["joules"] is None and "bad_data" in out["energy"]["note"]
    # The stand-in answers `gpu` with 70 series of value g (1..70): summed point by point, and said so.
    mem = out["gpu_memory"]
    assert mem["note"] == "the query gave 70 series: summed" and mem["samples"] == 5
    assert mem["max_gib"] == mem["mean_gib"] == round(sum(range(1, 71)) / 1024, 4)  # MiB → GiB
    gone = parse_scenario(_scenario(f"http://127.0.0.1:{free_port()}", "up")).metrics.prometheus
    assert gone is not None
    out = variant_power(gone, sc.variants[0], 1000.0, 1004.0, 100)
    assert out["energy"]["note"].startswith(f"cannot reach {gone.url}")
