"""A cluster Prometheus read over the run window: what the GPUs and nodes did while the load ran (DCGM utilisation,
framebuffer memory, power; node CPU), beside the client latencies of the same moments.

`check_queries` asks the Prometheus once per query before load (`/api/v1/query`): an unreachable URL, a missing
token or a query Prometheus refuses is a configuration error then, not an empty section after an hour's run.
`query_window` evaluates every query over the run (`/api/v1/query_range`) into report.json's `cluster_metrics`; it
never raises — what fails is a note (the whole section) or an error (one query), and the run's verdict is untouched.

Plain urllib: the master calls this at most once per report, and under Locust's monkey-patching its sockets yield.
"""

from __future__ import annotations

import base64
import json
import math
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from loadgen.config.credentials import credential_values, redact
from loadgen.config.live_metrics import ClusterPrometheus
from loadgen.report.cluster_metrics_report import series_summary

__all__ = ["MAX_POINTS", "MAX_SERIES", "PrometheusError", "check_queries", "query_window", "range_series"]

MAX_POINTS = 1000  # per series: the step grows for long runs (Prometheus itself refuses 11,000)
MAX_SERIES = 64  # per query, the rest counted (a DCGM query by GPU on 8 nodes of 8 GPUs is 64)


class PrometheusError(Exception):
    """The Prometheus answered with an error (`bad_data`: the query) or not at all (`unreachable`)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _headers(cfg: ClusterPrometheus, environ: Mapping[str, str]) -> dict[str, str]:
    headers = {"Accept": "application/json"}
    if cfg.bearer_token_env:
        headers["Authorization"] = f"Bearer {environ.get(cfg.bearer_token_env, '')}"
    elif cfg.basic_auth_env is not None:
        pair = f"{environ.get(cfg.basic_auth_env.username, '')}:{environ.get(cfg.basic_auth_env.password, '')}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
    return headers


def _redacted(cfg: ClusterPrometheus, environ: Mapping[str, str], text: str) -> str:
    """`text` (a Prometheus's error, which may echo what it was sent) without the credentials' values, in any form
    (the Authorization header, its base64 pair, each variable's value)."""
    values = [environ.get(name, "") for name in cfg.secret_env_names()]
    return redact(text, credential_values([*values, _headers(cfg, environ).get("Authorization", "")]))


def _api(cfg: ClusterPrometheus, path: str, params: dict[str, str], environ: Mapping[str, str]) -> Any:
    try:
        return _call(cfg, path, params, environ)
    except PrometheusError as e:
        raise PrometheusError(e.kind, _redacted(cfg, environ, str(e))) from None


def _call(cfg: ClusterPrometheus, path: str, params: dict[str, str], environ: Mapping[str, str]) -> Any:
    url = f"{cfg.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    req = urllib.request.Request(url, headers=_headers(cfg, environ))
    try:
        with urllib.request.urlopen(req, timeout=cfg.timeout) as r:
            body = r.read()
    except urllib.error.HTTPError as e:
        # Prometheus answers a bad query with 400 / 422 and a JSON error; anything else is the server's problem.
        try:
            doc = json.loads(e.read())
        except (ValueError, OSError):
            raise PrometheusError("unreachable", f"{cfg.url} answered HTTP {e.code} ({e.reason})") from None
        raise PrometheusError(str(doc.get("errorType", "error")), str(doc.get("error", f"HTTP {e.code}"))) from None
    except (OSError, ValueError) as e:
        reason = getattr(e, "reason", None) or e
        raise PrometheusError("unreachable", f"cannot reach {cfg.url} ({reason})") from None
    try:
        doc = json.loads(body)
    except ValueError:
        raise PrometheusError("unreachable", f"{cfg.url} answered something that is not Prometheus JSON") from None
    if not isinstance(doc, dict) or doc.get("status") != "success":
        err = doc.get("error", "no status") if isinstance(doc, dict) else "not an object"
        raise PrometheusError(str(doc.get("errorType", "error") if isinstance(doc, dict) else "error"), str(err))
    return doc.get("data")


def check_queries(
    cfg: ClusterPrometheus, environ: Mapping[str, str] | None = None, more: Mapping[str, str] | None = None
) -> list[tuple[str, str]]:
    """(field, message) per problem: the token variable unset, the Prometheus unreachable, each query it refuses.
    `more`: other queries to check, by their field (a variant's power and GPU-memory queries)."""
    env = os.environ if environ is None else environ
    unset = [name for name in cfg.secret_env_names() if not env.get(name, "").strip()]
    if unset:
        field = "bearer_token_env" if cfg.bearer_token_env else "basic_auth_env"
        return [(f"metrics.prometheus.{field}", f"environment variable {unset[0]} is not set or empty")]
    problems = []
    named = [(f"metrics.prometheus.queries.{name}", query) for name, query in cfg.queries.items()]
    for field, query in [*named, *(more or {}).items()]:
        try:
            _api(cfg, "query", {"query": query}, env)
        except PrometheusError as e:
            if e.kind == "unreachable":
                return [("metrics.prometheus.url", str(e))]
            problems.append((field, f"Prometheus refuses {query!r}: {e.kind}: {e}"))
    return problems


def _value(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _series(result: dict[str, Any]) -> dict[str, Any]:
    points = result.get("values") or []
    ts = [round(float(t), 3) for t, _ in points]
    values = [_value(v) for _, v in points]
    return {"labels": dict(result.get("metric") or {}), "t_unix_s": ts, "values": values, **series_summary(values)}


def range_series(
    cfg: ClusterPrometheus, query: str, start: float, end: float, environ: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """One query over [start, end] at the configured step (raised to keep MAX_POINTS): its series as
    `{labels, t_unix_s, values}` (a value that is not a finite number is None), in label order. Raises
    PrometheusError."""
    env = os.environ if environ is None else environ
    step = max(cfg.step, (end - start) / MAX_POINTS)
    params = {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:.3f}"}
    data = _api(cfg, "query_range", params, env)
    results = (data.get("result") if isinstance(data, dict) else None) or []
    return [_series(r) for r in sorted(results, key=lambda r: sorted((r.get("metric") or {}).items()))]


def query_window(
    cfg: ClusterPrometheus, start: float, end: float, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Every query over [start, end] (unix seconds) as report.json's `cluster_metrics`."""
    env = os.environ if environ is None else environ
    end = max(end, start)
    step = max(cfg.step, (end - start) / MAX_POINTS)
    out: dict[str, Any] = {
        "url": cfg.url,
        "start_unix_s": round(start, 3),
        "end_unix_s": round(end, 3),
        "step_s": round(step, 3),
        "note": None,
        "queries": [],
    }
    params = {"start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:.3f}"}
    for name, query in cfg.queries.items():
        entry: dict[str, Any] = {"name": name, "query": query, "error": None, "series": [], "series_left_out": 0}
        try:
            data = _api(cfg, "query_range", {"query": query, **params}, env)
        except PrometheusError as e:
            if e.kind == "unreachable":
                out["note"] = f"{e}: cluster metrics not read"
                out["queries"] = []
                return out
            entry["error"] = f"{e.kind}: {e}"
        else:
            results = (data.get("result") if isinstance(data, dict) else None) or []
            results = sorted(results, key=lambda r: sorted((r.get("metric") or {}).items()))
            entry["series"] = [_series(r) for r in results[:MAX_SERIES]]
            entry["series_left_out"] = max(0, len(results) - MAX_SERIES)
        out["queries"].append(entry)
    return out
