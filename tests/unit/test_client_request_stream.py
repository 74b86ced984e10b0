"""A run's request streams: the scenario's sampler is built once per run and forked per user (spawning a thousand
users must not build a thousand), each fork is exactly the stream its id names, and they share the run's dialer and
reactor."""

from __future__ import annotations

from typing import Any

import pytest

from loadgen.client.dial import Dialer
from loadgen.client.reactor import Reactor
from loadgen.config.scenario import validate_scenario
from loadgen.locust_plugin import request_stream
from loadgen.locust_plugin.request_stream import StreamAssigner
from loadgen.traffic.sampler import sampler_for


def test_streams_fork_one_sampler_per_run(monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = validate_scenario(
        {
            "variants": [
                {"name": "a", "base_url": "http://127.0.0.1:1", "model": "m"},
                {"name": "b", "base_url": "http://127.0.0.1:2", "model": "m"},
            ]
        }
    )
    built: list[int] = []

    def counting(sc: Any, stream: int) -> Any:
        built.append(stream)
        return sampler_for(sc, stream)

    monkeypatch.setattr(request_stream, "sampler_for", counting)
    dialer, reactor = Dialer(), Reactor()
    try:
        assigner = StreamAssigner(scenario, 1, "w1", dialer, reactor)
        streams = [assigner.new_stream(v) for v in ("a", "b", "a", "a", "b")]
        assert built == [0]  # once for the run, not per user
        assert [s.stream_id for s in streams] == [100_000, 100_000, 100_001, 100_002, 100_001]
        for s in streams:
            # the k-th user of every variant replays the same requests
            assert s._sampler.spec_at(3) == sampler_for(scenario, s.stream_id).spec_at(3)
            assert s._conn._dialer is dialer and s._conn._reactor is reactor
        assert streams[0]._sampler._block is streams[1]._sampler._block  # the word block is shared, not copied
        for s in streams:
            s.close()
    finally:
        reactor.close()
