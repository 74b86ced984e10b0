"""The scenario: a strict, typed, described model of everything a run needs (`scenario`, `traffic`, `types`, the
built-in mix table `builtin_mixes`), its YAML loader with line numbers and field paths (`errors`), `--set` overrides
(`overrides`), durations, and the JSON-schema export.

Stage 1 of a request's path. Pure: the standard library, pydantic, PyYAML, orjson, `loadgen.registry`,
`loadgen.metric_names`, `loadgen.exit_codes` and the dialect names (`loadgen.protocol.dialects`). The model checks
shapes and values and reads no file (but the scenario itself) and asks no server: what needs I/O (a dataset file, a
tokenizer, the cluster Prometheus) is `loadgen.preflight`'s, run before load. tests/unit/test_layout.py holds this.
`from loadgen.config import Scenario, load_scenario, …` is the public way in.
"""

from loadgen.config.errors import ConfigError, ConfigIssue
from loadgen.config.overrides import Override, parse_override
from loadgen.config.scenario import (
    SLO,
    Scenario,
    ScenarioDocument,
    Variant,
    check_environment,
    load_scenario,
    missing_secrets,
    parse_document,
    parse_scenario,
    read_document,
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
    "Override",
    "Scenario",
    "ScenarioDocument",
    "Traffic",
    "Variant",
    "check_environment",
    "load_scenario",
    "missing_secrets",
    "parse_document",
    "parse_override",
    "parse_scenario",
    "read_document",
    "scenario_json_schema",
    "validate_scenario",
]
