"""How `load.users` is split over the variants: by `variants[].weight`, never the whole number to each.

Open loop: each worker splits its own users over the variants by `weighted_turns` (so every worker holds senders of
every variant it has enough users for). Closed loop: Locust's dispatcher spreads one weighted user class per variant
over all workers. Either way a variant's senders are its share of `load.users`, and what a report says about "the
senders" (the overload note, its advice, the vLLM export's `max_concurrency`) is about that share. Pure: the report
reads it where the run did not count its users (a report rebuilt from raw records).
"""

from __future__ import annotations

from collections.abc import Iterator
from heapq import heapify, heapreplace
from math import log2

from loadgen.config.scenario import Scenario

__all__ = [
    "class_turns",
    "load_leaves_variants",
    "scenario_senders",
    "senders_per_variant",
    "uncovered_variants",
    "users_leave_variants",
    "weighted_turns",
]


def weighted_turns(weights: dict[str, float]) -> Iterator[str]:
    """Names in proportion to their weights, as evenly spread as can be (smooth weighted round-robin): the first n
    turns give each name round(n·share) within one, so any n >= len(weights) with even weights reaches every name.
    """
    current = dict.fromkeys(weights, 0.0)
    total = sum(weights.values())
    while True:
        for name, weight in weights.items():
            current[name] += weight
        best = max(current, key=current.__getitem__)
        current[best] -= total
        yield best


def senders_per_variant(scenario: Scenario, users: list[int]) -> dict[str, int]:
    """Open loop: the users of each variant when workers hold `users` users each (each worker splits its own users
    over the variants by `weighted_turns`, so every worker has senders of every variant it has enough users for)."""
    out = dict.fromkeys((v.name for v in scenario.variants), 0)
    weights = {v.name: v.weight for v in scenario.variants}
    for n in users:
        turns = weighted_turns(weights)
        for _ in range(n):
            out[next(turns)] += 1
    return out


def scenario_senders(scenario: Scenario) -> dict[str, int]:
    """Each variant's share of `load.users` as the scenario asks for it, for a report whose run did not count them:
    all of them to each variant when variants run one after another (`load.sequential`), else the weighted split of
    one process (with several workers a variant's count can differ by up to one per worker)."""
    if scenario.load.sequential or len(scenario.variants) == 1:
        return {v.name: scenario.load.users for v in scenario.variants}
    return senders_per_variant(scenario, [scenario.load.users])


def class_turns(weights: dict[str, float]) -> Iterator[str]:
    """Closed loop: the variants' user classes in the order Locust's dispatcher hands users out (its
    `locust.dispatch._kl_generator`, by Kullback-Leibler divergence: weights 5 and 1 give AAABAAAAABAA), here so
    that a command that starts no Locust process (`loadgen k8s run`) can tell which variants would get no user.
    tests/unit/test_senders_cover.py holds it to Locust's own."""
    heap = [(w * log2(w / (w + 1.0)), w + 1.0, w, name) for name, w in weights.items() if w > 0]
    heapify(heap)
    while heap:
        _, x, weight, name = heap[0]
        yield name
        heapreplace(heap, (weight * log2(x / (x + 1.0)), x + 1.0, weight, name))


def uncovered_variants(scenario: Scenario, users: int | None = None) -> list[str]:
    """The variants `users` users (default `load.users`) leave without a user: the weighted split of open loop (one
    process's), the dispatcher's order of closed loop."""
    n = scenario.load.users if users is None else users
    if scenario.load.arrival is not None:
        got = senders_per_variant(scenario, [n])
    else:
        got = dict.fromkeys((v.name for v in scenario.variants), 0)
        turns = class_turns({v.name: v.weight for v in scenario.variants})
        for _ in range(n):
            got[next(turns)] += 1
    return [v.name for v in scenario.variants if not got.get(v.name)]


def users_leave_variants(scenario: Scenario, users: int | None = None, field: str = "load.users") -> str | None:
    """Why `users` (the value of `field`) cannot run `scenario`: a variant would get no user under the weights, and
    its SLOs fail for want of data. None when every variant gets one."""
    idle = uncovered_variants(scenario, users)
    if not idle:
        return None
    n = scenario.load.users if users is None else users
    return (
        f"{field} ({n}) leaves variant(s) {', '.join(idle)} without a user under variants[].weight "
        f"({', '.join(f'{v.name} {v.weight:g}' for v in scenario.variants)}); raise {field} to at least "
        f"{len(scenario.variants)} or even out the weights"
    )


def load_leaves_variants(scenario: Scenario, users: int | None = None) -> str | None:
    """What a Locust master refuses before load (locust_plugin/plugin.py), and `loadgen k8s run` before it creates
    anything: the users (`users`, else `load.users`; each stage's) leave a variant without one. Variants run one after
    another (`load.sequential`) each get every user."""
    if scenario.load.sequential and len(scenario.variants) > 1:
        return None
    stages = scenario.load.stages
    if stages is not None:
        staged = [users_leave_variants(scenario, st.users, f"load.stages[{i}].users") for i, st in enumerate(stages)]
        return next((p for st, p in zip(stages, staged, strict=True) if st.users and p), None)
    return users_leave_variants(scenario, users)
