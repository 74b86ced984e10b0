"""Which variants a simulator run serves: ``NAME[=PROFILE][:PORT]`` from the command line (``parse_variant``), with
the faults (``--fault``) and profile changes (``--set``) given per variant applied (``with_faults``,
``with_profile_changes``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from loadgen.registry import Registry
from loadgen.sim.faults import FaultSpec
from loadgen.sim.profiles import SimProfile, profile_registry

__all__ = ["VariantSpec", "parse_variant", "with_faults", "with_profile_changes"]


@dataclass(frozen=True, slots=True)
class VariantSpec:
    """One variant of a simulator run: its name, its profile, its port (0: any free one) and its faults."""

    name: str
    profile: SimProfile
    port: int = 0
    faults: FaultSpec = field(default_factory=FaultSpec)


def with_faults(specs: list[VariantSpec], faults: Mapping[str, Mapping[str, float]] | None) -> list[VariantSpec]:
    """``specs`` with the fault knobs ``{variant: {knob: value}}`` applied; unknown variants or knobs raise."""
    if not faults:
        return list(specs)
    names = {s.name for s in specs}
    unknown = sorted(set(faults) - names)
    if unknown:
        raise ValueError(f"faults given for unknown variant(s) {unknown}; variants: {sorted(names)}")
    return [replace(s, faults=FaultSpec.from_dict(faults[s.name])) if s.name in faults else s for s in specs]


def with_profile_changes(
    specs: list[VariantSpec], changes: Mapping[str, Mapping[str, str]] | None
) -> list[VariantSpec]:
    """``specs`` with profile fields changed, ``{variant: {field: value text}}`` (``--set``); unknown variants or
    fields, and bad values, raise ValueError."""
    if not changes:
        return list(specs)
    unknown = sorted(set(changes) - {s.name for s in specs})
    if unknown:
        raise ValueError(f"--set for unknown variant(s) {unknown}; variants: {sorted(s.name for s in specs)}")
    return [replace(s, profile=s.profile.with_changes(changes[s.name])) if s.name in changes else s for s in specs]


def parse_variant(text: str, profiles: Registry[SimProfile] | None = None) -> VariantSpec:
    """Parse ``NAME[=PROFILE][:PORT]`` (profile defaults to NAME, port 0 = ephemeral)."""
    registry = profiles if profiles is not None else profile_registry()
    rest, port = text, 0
    head, sep, tail = text.rpartition(":")
    if sep:
        if not tail.isdigit() or int(tail) > 65535:
            raise ValueError(f"variant {text!r}: port must be a number 0-65535")
        rest, port = head, int(tail)
    name, _, profile_name = rest.partition("=")
    profile_name = profile_name or name
    if not name or not all(c.isalnum() or c in "._-" for c in name):
        raise ValueError(f"variant {text!r}: name must be non-empty letters, digits, '.', '_' or '-'")
    return VariantSpec(name, registry.get(profile_name), port)
