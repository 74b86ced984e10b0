"""What a report needs to be reproduced and trusted later: the scenario as it ran (secrets never: base URLs lose
their user info and query, headers cannot hold credentials, keys are only ever named by `api_key_env`), and the
software and machine that built the report (loadgen, Locust and Python versions, CPU model and cores)."""

from __future__ import annotations

import contextlib
import os
import platform
from importlib import metadata
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from loadgen.config.scenario import Scenario

__all__ = ["environment", "safe_url", "scenario_record"]


def safe_url(url: str) -> str:
    """`url` without user info, query or fragment (where a token might ride along)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def scenario_record(scenario: Scenario) -> dict[str, Any]:
    """The validated scenario as plain JSON, with every variant's base URL made safe."""
    doc = scenario.model_dump(mode="json")
    for variant in doc.get("variants", []):
        variant["base_url"] = safe_url(variant["base_url"])
    return doc


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def environment() -> dict[str, Any]:
    """The process building the report (the master): software versions and the machine."""
    return {
        "loadgen": _version("llm-loadgen"),
        "locust": _version("locust"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_model": _cpu_model(),
        "cores": os.cpu_count(),
    }
