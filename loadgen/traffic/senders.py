"""How `load.users` is split over the variants: by `variants[].weight`, never the whole number to each.

Open loop: each worker splits its own users over the variants by `weighted_turns` (so every worker holds senders of
every variant it has enough users for). Closed loop: Locust's dispatcher spreads one weighted user class per variant
over all workers. Either way a variant's senders are its share of `load.users`, and what a report says about "the
senders" (the overload note, its advice, the vLLM export's `max_concurrency`) is about that share. Pure: the report
reads it where the run did not count its users (a report rebuilt from raw records).
"""

from __future__ import annotations

from collections.abc import Iterator

from loadgen.config.scenario import Scenario

__all__ = ["scenario_senders", "senders_per_variant", "weighted_turns"]


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
