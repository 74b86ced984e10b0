"""Fault knobs of the simulator: parsing, validation, and reproducible per-request draws (no sockets)."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from loadgen.sim.__main__ import main as sim_main
from loadgen.sim.faults import (
    CUT,
    ERROR_EVENT,
    HTTP_429,
    HTTP_500,
    HTTP_503,
    JSON_ERROR_ON_STREAM,
    RESET,
    FaultInjector,
    FaultPlan,
    FaultSpec,
    UnknownFaultKnobError,
    fault_knobs,
    parse_fault_arg,
)
from loadgen.sim.launch import SimServerThread, start_sim_process
from loadgen.sim.truth import TruthLog, load_truth
from loadgen.sim.variant_spec import parse_variant, with_faults

KNOBS = {
    "error_rate", "rate_429", "rate_503", "reset_rate", "cut_rate", "malformed_rate", "error_event_rate",
    "stall_rate", "stall_s", "slow_headers_s", "json_error_on_stream_rate",
}  # fmt: skip


def test_defaults_are_off_and_draw_nothing() -> None:
    spec = FaultSpec()
    assert set(fault_knobs()) == KNOBS
    assert not spec.enabled
    rng = random.Random(1)
    assert all(spec.draw(rng, 10, stream=True) is None for _ in range(100))
    assert FaultInjector(spec).draw(10, True) is None


def test_from_dict_and_validation() -> None:
    spec = FaultSpec.from_dict({"rate_429": 0.2, "stall_rate": 1, "stall_s": 2})
    assert spec.rate_429 == 0.2 and spec.stall_s == 2.0 and spec.enabled
    with pytest.raises(UnknownFaultKnobError) as e:
        FaultSpec.from_dict({"rate_420": 0.1})
    assert "rate_420" in str(e.value) and all(k in str(e.value) for k in KNOBS)
    for bad in ({"error_rate": 1.5}, {"cut_rate": -0.1}, {"reset_rate": float("nan")}, {"stall_s": -1}):
        with pytest.raises(ValueError):
            FaultSpec.from_dict(bad)
    with pytest.raises(ValueError, match="sum"):  # answered instead of the response: at most one per request
        FaultSpec(error_rate=0.6, rate_429=0.6)
    with pytest.raises(ValueError, match="sum"):  # a stream ends only once
        FaultSpec(reset_rate=0.5, cut_rate=0.3, error_event_rate=0.3)
    with pytest.raises(ValueError, match="stall_s"):
        FaultSpec(stall_rate=0.5)
    assert FaultSpec(slow_headers_s=30).enabled  # seconds are not capped at 1


def test_parse_fault_arg() -> None:
    assert parse_fault_arg("baseline:rate_429=0.2") == ("baseline", "rate_429", 0.2)
    assert parse_fault_arg("my-v.1:stall_s=2") == ("my-v.1", "stall_s", 2.0)
    for bad in ("baseline", "baseline:rate_429", ":rate_429=1", "baseline:=1", "b:rate_429=lots"):
        with pytest.raises(ValueError):
            parse_fault_arg(bad)
    with pytest.raises(UnknownFaultKnobError):
        parse_fault_arg("baseline:retry_rate=0.1")


def test_draw_is_reproducible_and_seed_dependent() -> None:
    spec = FaultSpec(rate_429=0.2, reset_rate=0.3, malformed_rate=0.5, stall_rate=0.5, stall_s=0.1)

    def plans(seed: str) -> list[FaultPlan | None]:
        injector = FaultInjector(spec, seed=seed)
        return [injector.draw(8, stream=True) for _ in range(200)]

    assert plans("0:baseline:faults") == plans("0:baseline:faults")
    assert plans("0:baseline:faults") != plans("1:baseline:faults")


def test_draw_rates_positions_and_stream_only_knobs() -> None:
    spec = FaultSpec(
        error_rate=0.1, rate_429=0.2, json_error_on_stream_rate=0.1, reset_rate=0.2, cut_rate=0.2, malformed_rate=0.5
    )
    rng = random.Random(7)
    n, max_tokens = 4000, 6
    plans = [spec.draw(rng, max_tokens, stream=True) for _ in range(n)]
    replies = Counter(p.reply for p in plans if p is not None)
    ends = Counter(p.end for p in plans if p is not None and p.reply is None)
    assert replies[HTTP_500] / n == pytest.approx(0.1, abs=0.03)
    assert replies[HTTP_429] / n == pytest.approx(0.2, abs=0.03)
    assert replies[JSON_ERROR_ON_STREAM] / n == pytest.approx(0.1, abs=0.03)
    assert HTTP_503 not in replies
    no_reply = sum(1 for p in plans if p is None or p.reply is None)
    assert ends[RESET] / no_reply == pytest.approx(0.2, abs=0.04) and ends[CUT] / no_reply == pytest.approx(
        0.2, abs=0.04
    )
    for p in plans:
        if p is not None:
            assert 1 <= p.end_at <= max_tokens - 1  # always before the natural end
            assert p.malformed_at == 0 or 1 <= p.malformed_at <= max_tokens
    # Non-streamed requests: no SSE to corrupt, so only the status faults and reset apply.
    rng = random.Random(7)
    for _ in range(1000):
        p = spec.draw(rng, max_tokens, stream=False)
        if p is not None:
            assert p.reply in (None, HTTP_500, HTTP_429) and p.end in (None, RESET) and p.malformed_at == 0


def test_one_token_request_still_gets_its_chunk_before_the_end() -> None:
    plan = FaultSpec(error_event_rate=1.0).draw(random.Random(0), 1, stream=True)
    assert plan is not None and plan.end == ERROR_EVENT and plan.end_at == 1


def test_with_faults_names_unknown_variant() -> None:
    specs = [parse_variant("baseline"), parse_variant("b=int8")]
    out = with_faults(specs, {"b": {"cut_rate": 0.5}})
    assert out[0].faults == FaultSpec() and out[1].faults.cut_rate == 0.5
    with pytest.raises(ValueError, match="nope"):
        with_faults(specs, {"nope": {"cut_rate": 0.5}})
    with pytest.raises(ValueError, match="nope"):
        SimServerThread(["baseline"], faults={"nope": {"cut_rate": 0.5}})
    with pytest.raises(UnknownFaultKnobError):
        start_sim_process(["baseline"], faults={"baseline": {"rst_rate": 1.0}})  # caught before spawning


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--fault", "baseline:rate_420=0.2"], "rate_420"),
        (["--fault", "baseline:rate_429=1.5"], "[0, 1]"),
        (["--fault", "baseline:stall_s=-1"], ">= 0"),
        (["--fault", "other:rate_429=0.5"], "other"),
        (["--fault", "baseline-rate_429=0.5"], "VARIANT:KNOB=VALUE"),
    ],
)
def test_cli_rejects_bad_faults_with_status_2(args: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert sim_main(["--variant", "baseline", *args]) == 2
    err = capsys.readouterr().err
    assert needle in err
    if "rate_420" in args[1]:
        assert all(k in err for k in KNOBS)  # the message lists the known knobs


def test_truth_log_fault_records(tmp_path: Path) -> None:
    log = TruthLog(tmp_path / "t.jsonl")
    log.open()
    log.arrival("r1", "v", 1.0)
    log.fault("r1", "v", 1.5, HTTP_429)
    log.arrival("r2", "v", 2.0)
    log.token("r2", "v", 2.1, 1, 2.125)
    log.fault("r2", "v", 2.1, RESET)
    log.abort("r2", "v", 2.2)
    log.flush()
    lines = (tmp_path / "t.jsonl").read_text().splitlines()
    assert '{"rid":"r1","variant":"v","kind":"fault","fault":"http_429","t":1.5}' in lines
    truth = load_truth(tmp_path / "t.jsonl")
    assert truth["r1"].faults == [HTTP_429] and truth["r1"].finish is None
    assert truth["r2"].faults == [RESET] and truth["r2"].aborted and truth["r2"].chunk_tokens == [1]
    assert truth["r2"].chunk_times == [2.1] and truth["r2"].chunk_ends == [2.125]
