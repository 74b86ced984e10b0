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


def test_with_quality_a_stream_keeps_the_text_the_sample_would_keep_and_no_other() -> None:
    from loadgen.measure.outputs import OutputSamples
    from loadgen.measure.pairs import pair_hash, pair_key
    from loadgen.measure.records import RequestRecord
    from loadgen.traffic.references import Reference

    variants = [{"name": "a", "base_url": "http://127.0.0.1:1", "model": "m"}]
    dialer, reactor = Dialer(), Reactor()
    try:
        plain = StreamAssigner(validate_scenario({"variants": variants}), 0, "w0", dialer, reactor).new_stream("a")
        sample = OutputSamples()
        assigner = StreamAssigner(
            validate_scenario({"variants": variants, "quality": {}}), 0, "w0", dialer, reactor, sample
        )
        stream = assigner.new_stream("a")
        specs = [stream.draw() for _ in range(64)]
        assert not any(plain._wants_text(s) for s in specs)  # no quality: no text
        assert all(stream._wants_text(s) for s in specs)  # level 0: every reply may be kept
        sample.level = 2  # the sample has risen: a quarter of the keys survive it
        wanted = [stream._wants_text(s) for s in specs]
        assert wanted == [pair_hash(f"{stream.stream_id}-{s.index}-{s.turn}") < 2**61 for s in specs]
        assert 0 < sum(wanted) < 64
        # The key is the one the sample files the reply's record under (measure/pairs.py's, from its id).
        rec = RequestRecord(f"w0-a-{stream.stream_id}-{specs[5].index}", "a", specs[5].mix, turn=specs[5].turn)
        assert pair_key(rec) == f"{stream.stream_id}-{specs[5].index}-{specs[5].turn}"
        judged = specs[wanted.index(False)]
        judged.reference = Reference("x")
        assert stream._wants_text(judged)  # a reply judged against a reference keeps its text whatever the sample
        for s in (plain, stream):
            s.close()
    finally:
        reactor.close()


def test_every_request_gets_its_whole_timeout_and_a_fork_times_its_own() -> None:
    """Each request of a stream is timed against the whole `request_timeout`, whatever the requests before it took:
    against a server that never answers, every one ends timed out and none before its deadline; a sub-agent's fork,
    sending beside its parent, times its own. (Restarting one gevent.Timeout per stream instead of making one per
    request looked like a saving, but libev restarts a stopped timer with what was left of it, not its length.)"""
    import socket
    import time

    import gevent

    from loadgen.measure.records import ErrorKind

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)  # accepted by the kernel, never answered
    port = listener.getsockname()[1]
    variants = [{"name": "a", "base_url": f"http://127.0.0.1:{port}", "model": "m", "request_timeout": "0.2s"}]
    dialer, reactor = Dialer(), Reactor()
    try:
        stream = StreamAssigner(validate_scenario({"variants": variants}), 0, "w0", dialer, reactor).new_stream("a")
        for _ in range(3):
            t0 = time.monotonic()
            rec = stream.send_next(0.0)
            assert rec.error == ErrorKind.TIMEOUT and time.monotonic() - t0 >= 0.2
        twin = stream.fork()
        both = [gevent.spawn(stream.send_next, 0.0), gevent.spawn(twin.send_next, 0.0)]
        t0 = time.monotonic()
        gevent.joinall(both, raise_error=True)
        assert time.monotonic() - t0 >= 0.2
        assert [g.value.error for g in both] == [ErrorKind.TIMEOUT] * 2  # side by side, each timed out
        for s in (stream, twin):
            s.close()
    finally:
        reactor.close()
        listener.close()


def test_requests_that_each_take_a_third_of_the_timeout_never_time_out() -> None:
    """The timeout is not used up across requests: a stream's requests, each taking about a third of it (the
    simulator's ~30 ms to the first token and 10 ms per token, 30 tokens), all succeed, one after another."""
    from loadgen.sim.launch import SimServerThread

    sim = SimServerThread(["baseline"])
    variants = [{"name": "a", "base_url": sim.base_url("baseline"), "model": "m", "request_timeout": "1s"}]
    mix = {"buckets": [{"name": "s", "prompt_tokens": [8, 8], "weight": 1}], "output_tokens": [30, 30]}
    scenario = validate_scenario(
        {"variants": variants, "traffic": {"mixes": [{"name": "short"}], "custom_mixes": {"short": mix}}}
    )
    dialer, reactor = Dialer(), Reactor()
    try:
        stream = StreamAssigner(scenario, 0, "w0", dialer, reactor).new_stream("a")
        recs = [stream.send_next(0.0) for _ in range(5)]
        assert [r.error for r in recs] == [None] * 5
        assert all(r.output_token_count == 30 for r in recs)
        assert sum(r.done - r.sent for r in recs) > 1.0  # together longer than one timeout
        stream.close()
    finally:
        reactor.close()
        sim.stop()
