"""The simulator's priority scheduling (vLLM's `--scheduling-policy priority`): with the batch full, the waiting
request of the lowest `priority` goes first (FCFS among equals); under `fcfs` the field is read and ignored. And the
`--set VARIANT:FIELD=VALUE` flags that turn it on."""

from __future__ import annotations

from dataclasses import replace

import pytest

from loadgen.sim.__main__ import main as sim_main
from loadgen.sim.engine import Engine
from loadgen.sim.framings import FRAMINGS, ApiError
from loadgen.sim.profiles import SimProfile, get_profile, parse_set_arg

from .test_sim_engine import FLAT, Recorder, words


def _admission_order(policy: str) -> list[str]:
    engine = Engine(replace(FLAT, max_num_seqs=1, scheduling_policy=policy))
    engine.submit("running", words(10), 2, Recorder(), priority=5)
    plan = engine.plan_step()  # admitted: the batch (of one) is full while the others arrive
    for rid, priority in (("b1", 10), ("i1", 0), ("b2", 10), ("i2", 0), ("m1", 5)):
        engine.submit(rid, words(10), 1, Recorder(), priority=priority)
    order = []
    while plan is not None:
        order += [s.rid for s in plan.admitted]
        engine.complete_step(plan)
        plan = engine.plan_step()
    return order


def test_priority_scheduling_admits_the_lowest_value_first_and_fcfs_among_equals() -> None:
    # The first request holds the batch of one while the others queue; then the queue's order decides.
    assert _admission_order("priority") == ["running", "i1", "i2", "m1", "b1", "b2"]
    assert _admission_order("fcfs") == ["running", "b1", "i1", "b2", "i2", "m1"]


def test_an_aborted_waiting_request_is_skipped_in_priority_order() -> None:
    engine = Engine(replace(FLAT, max_num_seqs=1, scheduling_policy="priority"))
    engine.submit("running", words(10), 2, Recorder())
    plan = engine.plan_step()
    urgent = engine.submit("urgent", words(10), 1, Recorder(), priority=-1)
    engine.submit("later", words(10), 1, Recorder(), priority=3)
    engine.abort(urgent)
    assert engine.num_waiting == 1
    admitted = []
    while plan is not None:
        admitted += [s.rid for s in plan.admitted]
        engine.complete_step(plan)
        plan = engine.plan_step()
    assert admitted == ["running", "later"] and engine.num_waiting == 0


def test_openai_routes_read_priority_and_refuse_a_non_integer() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi there"}], "max_tokens": 3}
    chat, completions = FRAMINGS["/v1/chat/completions"], FRAMINGS["/v1/completions"]
    assert chat.parse(body).priority == 0
    assert chat.parse({**body, "priority": -7}).priority == -7
    assert completions.parse({"prompt": "a b", "max_tokens": 2, "priority": 10}).priority == 10
    for bad in ("high", 1.5, True):
        with pytest.raises(ApiError) as err:
            chat.parse({**body, "priority": bad})
        assert err.value.status == 400 and "priority" in err.value.message


def test_profile_fields_are_set_from_text_and_mistakes_are_named() -> None:
    base = get_profile("baseline")
    changed = base.with_changes({"max_num_seqs": "4", "scheduling_policy": "priority", "prefix_caching": "true"})
    assert (changed.max_num_seqs, changed.scheduling_policy, changed.prefix_caching) == (4, "priority", True)
    assert changed.with_changes({"decode_base_ms": "2.5"}).decode_base_ms == 2.5
    for changes, words_ in (
        ({"max_num_seqs": "four"}, "expected a whole number"),
        ({"max_num_seqs": "0"}, "max_num_seqs must be >= 1"),
        ({"scheduling_policy": "lifo"}, "fcfs or priority"),
        ({"prefix_caching": "yes"}, "true or false"),
        ({"name": "x"}, "no field 'name'"),
    ):
        with pytest.raises(ValueError, match=words_):
            base.with_changes(changes)
    with pytest.raises(ValueError, match="scheduling_policy"):
        SimProfile(name="p", scheduling_policy="random")
    assert parse_set_arg("a:max_num_seqs=4") == ("a", "max_num_seqs", "4")
    with pytest.raises(ValueError, match="VARIANT:FIELD=VALUE"):
        parse_set_arg("max_num_seqs=4")


def test_a_bad_set_flag_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert sim_main(["--variant", "a=baseline", "--set", "b:max_num_seqs=2"]) == 2
    assert "unknown variant(s) ['b']" in capsys.readouterr().err
    assert sim_main(["--variant", "a=baseline", "--set", "a:scheduling_policy=lifo"]) == 2
    assert "fcfs or priority" in capsys.readouterr().err
