"""The scenario document of one variant alone: what `loadgen sweep` steps and sequential phases run.

Works on the raw document (the YAML as written, not the validated model), so what runs is what the user wrote,
minus the other variants and the SLOs that name them.
"""

from __future__ import annotations

import copy
from typing import Any

from loadgen.config.scenario import Scenario, validate_scenario

__all__ = ["phase_scenarios", "single_variant_doc"]


def single_variant_doc(raw: dict[str, Any], sc: Scenario, index: int) -> dict[str, Any]:
    """`raw` with only variant `index` and the SLOs that apply to it (none named for another variant).
    `sc` is `raw` validated: its SLOs line up with raw's one for one."""
    name = sc.variants[index].name
    doc = copy.deepcopy(raw)
    doc["variants"] = [raw["variants"][index]]
    if raw.get("slos") is not None:
        doc["slos"] = [s for s, slo in zip(raw["slos"], sc.slos, strict=True) if slo.variant in (None, name)]
    load = doc.get("load")
    if isinstance(load, dict):
        load.pop("sequential", None)  # one variant: nothing to run one after another
        load.pop("sequential_pause", None)
    return doc


def phase_scenarios(raw: dict[str, Any], sc: Scenario, source: str) -> list[tuple[dict[str, Any], Scenario]]:
    """A sequential run's phases: each variant's document alone (`single_variant_doc`) and that document validated,
    in the variants' order; raises ``ConfigError`` naming the variant whose phase is refused."""
    phases = []
    for i, v in enumerate(sc.variants):
        doc = single_variant_doc(raw, sc, i)
        phases.append((doc, validate_scenario(doc, source=f"{source} (variant {v.name!r} alone)")))
    return phases
