"""Which variants a number of users leaves without one: told without Locust (`loadgen k8s run` starts none), by the
same order Locust's dispatcher hands users out in."""

from __future__ import annotations

import itertools
import json
import random
import subprocess
import sys

from loadgen.config.scenario import validate_scenario
from loadgen.traffic.senders import class_turns, load_leaves_variants, uncovered_variants

# Locust's own order, in a process of its own (importing locust monkey-patches the process: test_layout.py).
_LOCUST_ORDER = """
import itertools, json, sys
from locust.dispatch import _kl_generator
print(json.dumps([list(itertools.islice(_kl_generator(w.items()), 60)) for w in json.load(sys.stdin)]))
"""


def test_class_turns_are_locust_s_dispatch_order() -> None:
    rng = random.Random(7)
    cases = [
        {f"v{i}": rng.choice([0.5, 1, 1, 2, 3, 10, rng.uniform(0.1, 20)]) for i in range(rng.randint(1, 6))}
        for _ in range(200)
    ]
    run = subprocess.run(
        [sys.executable, "-c", _LOCUST_ORDER], input=json.dumps(cases), capture_output=True, text=True, check=True
    )
    for weights, locust in zip(cases, json.loads(run.stdout), strict=True):
        assert list(itertools.islice(class_turns(weights), 60)) == locust, weights


def _scenario(load: dict[str, object], weights: tuple[float, ...] = (10, 1)) -> object:
    variants = [{"name": f"v{i}", "base_url": "http://h:1", "model": "m", "weight": w} for i, w in enumerate(weights)]
    return validate_scenario({"variants": variants, "load": load})


def test_users_that_leave_a_variant_without_one() -> None:
    assert uncovered_variants(_scenario({"users": 2})) == ["v1"]  # 10 : 1 gives the first two users to v0
    assert uncovered_variants(_scenario({"users": 2}), users=12) == []
    open_loop = {"users": 2, "arrival": {"kind": "poisson", "rate": 1}}
    assert uncovered_variants(_scenario(open_loop, (1, 1))) == [] and uncovered_variants(_scenario(open_loop)) == ["v1"]
    assert "load.users (2) leaves variant(s) v1" in str(load_leaves_variants(_scenario({"users": 2})))
    staged = _scenario({"stages": [{"duration": "1s", "users": 20}, {"duration": "1s", "users": 2}]})
    assert "load.stages[1].users (2)" in str(load_leaves_variants(staged))
    # One after another, each variant gets every user.
    assert load_leaves_variants(_scenario({"users": 1, "sequential": True})) is None
