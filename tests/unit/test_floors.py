"""Every declared floor is a version the floors job installs (scripts/test-floors): requirements/floor-constraints.txt,
resolved with each direct dependency at its lowest allowed version, pins each one exactly at its floor. A floor the
resolver cannot reach (another dependency needs more) would never be tested: it is raised instead."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Extras the floors job does not install (bench runs beside the tests, not in them).
NOT_INSTALLED = {"bench"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _release(version: str) -> tuple[int, ...]:
    parts = [int(p) for p in version.split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def _floors() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    reqs = list(project["dependencies"])
    for extra, items in project["optional-dependencies"].items():
        if extra not in NOT_INSTALLED:
            reqs += [r for r in items if not r.startswith("llm-loadgen")]
    out = {}
    for req in reqs:
        m = re.match(r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?\s*(?:>=|==)\s*([0-9][0-9.]*)", req)
        if m:
            out[_norm(m.group(1))] = m.group(2)
    return out


def _pins() -> dict[str, str]:
    text = (ROOT / "requirements" / "floor-constraints.txt").read_text(encoding="utf-8")
    return {_norm(m.group(1)): m.group(2) for m in re.finditer(r"^([A-Za-z0-9_.-]+)==([0-9][0-9.]*)", text, re.M)}


def test_every_floor_is_the_version_the_floors_job_installs() -> None:
    floors, pins = _floors(), _pins()
    assert len(floors) >= 20  # the base, tokenizer, k8s and dev floors were all read
    wrong = {n: (f, pins.get(n)) for n, f in floors.items() if pins.get(n) is None or _release(pins[n]) != _release(f)}
    assert wrong == {}, f"declared floor vs floors lock (raise the floor, then bash scripts/lock): {wrong}"
