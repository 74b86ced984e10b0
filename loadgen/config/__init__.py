"""The scenario: a strict, typed, described model of everything a run needs (`scenario`, `traffic`, `types`, the
built-in mix table `builtin_mixes`), its YAML loader with line numbers and field paths (`errors`), durations, and the
JSON-schema export.

Stage 1 of a request's path. Pure: the standard library, pydantic, PyYAML, orjson and `loadgen.registry`; to check a
scenario it also asks later stages what exists — the dialect names (`loadgen.protocol.dialects`), a named tokenizer
(`loadgen.traffic.tokenizer`) and a dataset file (`loadgen.traffic.datasets`), both read once when the scenario
loads. `from loadgen.config import Scenario, load_scenario, …` is the public way in.
"""

from loadgen.config.errors import ConfigError, ConfigIssue
from loadgen.config.scenario import (
    SLO,
    Scenario,
    Variant,
    check_environment,
    load_scenario,
    missing_secrets,
    parse_scenario,
    scenario_json_schema,
    validate_scenario,
)
from loadgen.config.traffic import Bucket, Load, MixDef, MixRef, Traffic

__all__ = [
    "SLO",
    "Bucket",
    "ConfigError",
    "ConfigIssue",
    "Load",
    "MixDef",
    "MixRef",
    "Scenario",
    "Traffic",
    "Variant",
    "check_environment",
    "load_scenario",
    "missing_secrets",
    "parse_scenario",
    "scenario_json_schema",
    "validate_scenario",
]
