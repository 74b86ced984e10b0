#!/usr/bin/env python3
"""Generate charts/loadgen/values.schema.json and charts/loadgen/README.md from charts/loadgen/values.yaml, and
charts/loadgen/templates/_credentials.tpl from loadgen/config/credentials.py.

values.yaml is the source: every key carries a `# key -- description` comment (helm-docs style, continued on the
following comment lines). The schema's `scenario` part is loadgen's own config model
(`Scenario.model_json_schema()`, its `$defs` lifted to the root), so the chart refuses the shapes and values `loadgen
validate` refuses, but for one pattern: an environment variable's NAME (`api_key_env`), which Helm's schema check
would quote when it fails, and a key pasted there is exactly what fails it; the templates check those names without
quoting them (`loadgen.checkScenario`). Every other part is built from the defaults' types, tightened by
`_OVERRIDES`, with `additionalProperties: false` on every mapping of chart values. `_credentials.tpl` holds loadgen's
lists of what looks like a credential (a header name, a body field), which the templates refuse as loadgen does.

    python scripts/gen-chart-docs.py           # rewrite both files
    python scripts/gen-chart-docs.py --check   # exit 1 when either differs from what would be written
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parent.parent / "charts" / "loadgen"
_DOC = re.compile(r"^\s*# ([A-Za-z0-9_.]+) -- (.*)$")
_PORT = {"type": "integer", "minimum": 1, "maximum": 65535}
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_OVERRIDES: dict[str, dict[str, Any]] = {
    "mode": {"enum": ["ui", "headless"]},
    "image.digest": {"type": "string", "pattern": "^(sha256:[0-9a-f]{64})?$"},
    "image.pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
    "apiKeySecrets": {
        "type": "object",
        "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
        "additionalProperties": {
            "type": "object",
            "additionalProperties": False,
            "required": ["name", "key"],
            "properties": {"name": {"type": "string", "minLength": 1}, "key": {"type": "string", "minLength": 1}},
        },
    },
    "workers.replicas": {"type": "integer", "minimum": 1},
    "workers.topologySpread.maxSkew": {"type": "integer", "minimum": 1},
    "workers.topologySpread.whenUnsatisfiable": {"enum": ["ScheduleAnyway", "DoNotSchedule"]},
    "headless.expectWorkersMaxWait": {"type": "integer", "minimum": 1},
    "headless.ttlSecondsAfterFinished": {"type": "integer", "minimum": 0},
    "headless.activeDeadlineSeconds": {"type": "integer", "minimum": 0},
    "service.type": {"enum": ["ClusterIP", "NodePort", "LoadBalancer"]},
    "service.webPort": _PORT,
    "service.zmqPort": _PORT,
    "metrics.port": _PORT,
    "metrics.path": {"type": "string", "pattern": "^/"},
}
for _pod in ("master", "workers"):
    _OVERRIDES[f"{_pod}.extraArgs"] = {"type": "array", "items": {"type": "string"}}
    for _key in ("nodeSelector", "podAnnotations", "podLabels"):
        _OVERRIDES[f"{_pod}.{_key}"] = _STRING_MAP
for _key in ("service.annotations", "ingress.annotations", "serviceAccount.annotations"):
    _OVERRIDES[_key] = _STRING_MAP
for _key in ("metrics.serviceMonitor.labels", "metrics.podMonitor.labels"):
    _OVERRIDES[_key] = _STRING_MAP


def descriptions(text: str) -> dict[str, str]:
    """`# key -- description` comments of values.yaml, with their continuation comment lines."""
    docs: dict[str, str] = {}
    current: str | None = None
    for line in text.splitlines():
        m = _DOC.match(line)
        if m:
            current = m.group(1)
            docs[current] = m.group(2).strip()
        elif current and line.strip().startswith("# "):
            docs[current] += " " + line.strip()[2:].strip()
        else:
            current = None
    return docs


def undocumented(values: dict[str, Any], docs: dict[str, str], prefix: str = "") -> list[str]:
    """Keys with no description of their own whose value is not a mapping of described keys."""
    missing = []
    for key, value in values.items():
        path = prefix + key
        if path in docs:
            continue
        if isinstance(value, dict) and value:
            missing += undocumented(value, docs, path + ".")
        else:
            missing.append(path)
    return missing


def _leaf_schema(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "integer"}
    if isinstance(value, float):
        return {"type": "number"}
    if isinstance(value, str):
        return {"type": "string"}
    if isinstance(value, list):
        return {"type": "array"}
    return {"type": "object"}


def _scenario_schema() -> tuple[dict[str, Any], dict[str, Any]]:
    from loadgen.config.scenario import Scenario

    schema = chart_scenario_schema(Scenario.model_json_schema())
    defs = schema.pop("$defs", {})
    schema.pop("title", None)
    return schema, defs


def chart_scenario_schema(node: Any) -> Any:
    """The model's schema as the chart's: without the pattern of an environment variable's NAME (Helm's error would
    quote the value, maybe a key pasted in its place; the templates check it without quoting it)."""
    from loadgen.config.credentials import ENV_NAME

    if isinstance(node, dict):
        return {k: chart_scenario_schema(v) for k, v in node.items() if not (k == "pattern" and v == ENV_NAME)}
    if isinstance(node, list):
        return [chart_scenario_schema(v) for v in node]
    return node


def schema_of(values: dict[str, Any], docs: dict[str, str], prefix: str = "") -> dict[str, Any]:
    props: dict[str, Any] = {}
    for key, value in values.items():
        path = prefix + key
        if path == "scenario":
            node, _ = _scenario_schema()
        elif path in _OVERRIDES:
            node = dict(_OVERRIDES[path])
        elif path not in docs and isinstance(value, dict):
            node = schema_of(value, docs, path + ".")
        else:
            node = _leaf_schema(value)
        if path in docs:
            node["description"] = docs[path]
        props[key] = node
    return {"type": "object", "additionalProperties": False, "properties": props}


def build_schema(values_text: str) -> dict[str, Any]:
    values = yaml.safe_load(values_text)
    schema = schema_of(values, descriptions(values_text))
    _, defs = _scenario_schema()
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "loadgen chart values (by scripts/gen-chart-docs.py; the scenario part from loadgen's model)",
        **schema,
        "$defs": defs,
    }


def _flat(values: dict[str, Any], docs: dict[str, str], prefix: str = "") -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = []
    for key, value in values.items():
        path = prefix + key
        if path not in docs and isinstance(value, dict) and value:
            rows += _flat(value, docs, path + ".")
        else:
            rows.append((path, value))
    return rows


def build_readme(values_text: str) -> str:
    values = yaml.safe_load(values_text)
    docs = descriptions(values_text)
    head = (CHART / "README.head.md").read_text(encoding="utf-8")
    lines = [head.rstrip(), "", "## Values", "", "| Key | Default | Description |", "|---|---|---|"]
    for path, value in _flat(values, docs):
        default = json.dumps(value, separators=(", ", ": ")) if not isinstance(value, str) else json.dumps(value)
        if len(default) > 80:
            default = "see values.yaml"
        desc = docs.get(path, "").replace("|", "\\|")
        lines.append(f"| `{path}` | `{default}` | {desc} |")
    lines.append("")
    lines.append("<!-- Generated by scripts/gen-chart-docs.py from values.yaml and README.head.md; do not edit. -->")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--check", action="store_true", help="exit 1 if a generated file is out of date")
    args = p.parse_args(argv)
    values_text = (CHART / "values.yaml").read_text(encoding="utf-8")
    missing = undocumented(yaml.safe_load(values_text), descriptions(values_text))
    if missing:
        print(f"values without a `# key -- description` comment: {', '.join(missing)}", file=sys.stderr)
        return 1
    from loadgen.config.credentials import chart_template

    outputs = {
        CHART / "values.schema.json": json.dumps(build_schema(values_text), indent=2) + "\n",
        CHART / "README.md": build_readme(values_text),
        CHART / "templates" / "_credentials.tpl": chart_template(),
    }
    stale = [path for path, text in outputs.items() if not path.exists() or path.read_text(encoding="utf-8") != text]
    if args.check:
        for path in stale:
            print(f"{path} is out of date: run python scripts/gen-chart-docs.py", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.write_text(outputs[path], encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
