"""The annotated example scenario documents the whole model: every field of every nested model and every dialect.

The walk follows the pydantic model itself, so a field added anywhere fails here until the example shows it.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel

from loadgen.config.scenario import Scenario, load_scenario, parse_scenario
from loadgen.protocol.dialects import DIALECT_NAMES

EXAMPLE = Path(str(resources.files("loadgen") / "examples" / "scenario.yaml"))
README = Path(__file__).resolve().parents[2] / "README.md"


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The models a field's values are validated as: through Annotated, Optional / unions, list[...], dict[..., ...]."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is Annotated:
        return _models_in(args[0])
    if origin in (list, tuple, set, frozenset, Union, UnionType):
        return [m for a in args for m in _models_in(a)]
    if origin is dict:
        return _models_in(args[1])
    return []


def _values(value: Any) -> list[dict[str, Any]]:
    """The mappings a field's value holds for its nested model (a mapping, a list of them, or a dict of them)."""
    if isinstance(value, dict):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, dict)]
    return []


def missing_fields(
    model: type[BaseModel], instances: list[dict[str, Any]], commented: set[str], path: str
) -> list[str]:
    """Field paths (``variants[].tls_verify``) no instance in the example sets and no ``# field:`` comment shows."""
    missing = []
    for attr, field in model.model_fields.items():
        name = field.alias or attr  # as the scenario spells it (an SLO's `cls` is `class` there)
        here = f"{path}.{name}" if path else name
        present = [inst[name] for inst in instances if name in inst]
        if not present and name not in commented:
            missing.append(here)
        for sub in _models_in(field.annotation):
            origin = get_origin(field.annotation)
            is_dict = origin is dict or (origin is Annotated and get_origin(get_args(field.annotation)[0]) is dict)
            children: list[dict[str, Any]] = []
            for value in present:
                if is_dict and isinstance(value, dict):
                    children += [v for v in value.values() if isinstance(v, dict)]
                else:
                    children += _values(value)
            suffix = "{}" if is_dict else ("[]" if any(isinstance(v, list) for v in present) else "")
            missing += missing_fields(sub, children, commented, here + suffix)
    return missing


def _commented_fields(text: str) -> set[str]:
    # A field that cannot be set beside another (e.g. a bound of another metric) may be shown as "# field: value".
    return set(re.findall(r"^\s*#\s*-?\s*\{?\s*([a-z_]+):", text, flags=re.MULTILINE))


def test_example_scenario_validates() -> None:
    scenario = load_scenario(EXAMPLE)
    assert len(scenario.variants) >= 2 and scenario.slos


def test_example_scenario_shows_every_field_of_the_model() -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    missing = missing_fields(Scenario, [yaml.safe_load(text)], _commented_fields(text), "")
    assert not missing, f"fields missing from {EXAMPLE.name} (set them, or show them as '# field: value'): {missing}"


def test_example_scenario_names_every_dialect() -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    missing = [n for n in sorted(DIALECT_NAMES) if not re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", text)]
    assert not missing, f"dialects not named in {EXAMPLE.name}: {missing}"


def test_the_walk_finds_a_missing_nested_field() -> None:
    # The check above must be able to fail: drop a nested key, a list item's key and a top-level one.
    doc = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    before = set(missing_fields(Scenario, [doc], set(), ""))
    for bucket in doc["traffic"]["custom_mixes"]["support-tickets"]["buckets"]:
        del bucket["weight"]
    for variant in doc["variants"]:
        variant.pop("tls_verify", None)
    del doc["report_dir"]
    after = set(missing_fields(Scenario, [doc], set(), ""))
    assert after - before == {"variants[].tls_verify", "traffic.custom_mixes{}.buckets[].weight", "report_dir"}
    assert not set(missing_fields(Scenario, [doc], {"tls_verify", "weight", "report_dir"}, "")) - before


def test_readme_scenario_validates() -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)
    assert blocks, "README.md has no yaml block"
    for block in blocks:
        assert parse_scenario(block, "README.md").variants
