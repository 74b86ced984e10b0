"""Selector variants resolved at run start: each `selector` becomes the base URL of the one Service it matches.

The resolved scenario is a copy of the file with `base_url` and `resolved_from` in place of each `selector`, which
is what the Locust processes load (they never talk to the cluster) and what the report records.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import yaml

from loadgen.k8s.api import Cluster, K8sError
from loadgen.k8s.discover import picks_pod, selector_matches, serving_port

__all__ = ["has_selectors", "resolve_doc", "resolve_scenario_file", "resolve_selector"]


def has_selectors(doc: Any) -> bool:
    variants = doc.get("variants") if isinstance(doc, dict) else None
    return isinstance(variants, list) and any(isinstance(v, dict) and v.get("selector") for v in variants)


def resolve_selector(cluster: Cluster, variant: str, sel: dict[str, Any]) -> dict[str, Any]:
    """The `resolved_from` record of one variant's selector: exactly one Service must match (by its own labels,
    else by the labels of the pods it selects: llm-d and production-stack label pods, not Services)."""
    ns = sel.get("namespace") or cluster.namespace
    selector = str(sel["selector"])
    services = cluster.core.list_namespaced_service(ns).items
    matched = [s for s in services if selector_matches(selector, dict(s.metadata.labels or {}))]
    if not matched:
        pods = cluster.core.list_namespaced_pod(ns, label_selector=selector).items
        matched = [s for s in services if s.spec.selector and any(picks_pod(s.spec.selector, p) for p in pods)]
    if len(matched) != 1:
        names = ", ".join(sorted(s.metadata.name for s in matched)) or "none"
        raise K8sError(
            f"variant {variant!r}: selector {selector!r} in namespace {ns!r} must match exactly one Service, "
            f"matched {names}"
        )
    svc = matched[0]
    want = sel.get("port")
    ports = list(svc.spec.ports or [])
    if want is None:
        port = serving_port(svc)
    else:
        port = next((int(p.port) for p in ports if p.port == want or (p.name and p.name == want)), None)
    if port is None:
        have = ", ".join(f"{p.name or '-'}:{p.port}" for p in ports) or "none"
        raise K8sError(f"variant {variant!r}: Service {ns}/{svc.metadata.name} has no port {want!r} (ports: {have})")
    scheme = sel.get("scheme") or "http"
    return {
        "selector": selector,
        "namespace": ns,
        "service": svc.metadata.name,
        "port": port,
        "base_url": f"{scheme}://{svc.metadata.name}.{ns}.svc:{port}",
    }


def resolve_doc(cluster: Cluster, doc: dict[str, Any]) -> dict[str, Any]:
    """A copy of the scenario document with every selector variant resolved."""
    out = dict(doc)
    out["variants"] = []
    for v in doc["variants"]:
        if isinstance(v, dict) and v.get("selector"):
            v = dict(v)
            rec = resolve_selector(cluster, str(v.get("name")), v.pop("selector"))
            v["base_url"] = rec["base_url"]
            v["resolved_from"] = rec
        out["variants"].append(v)
    return out


def resolve_scenario_file(path: Path, connect_kwargs: dict[str, Any] | None = None) -> Path | None:
    """None when the scenario names no selector (the cluster is never asked); else the path of a resolved copy
    (in a temporary directory: a scenario mounted from a ConfigMap is read-only). Raises K8sError."""
    from loadgen.k8s.api import connect

    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None  # the loader reports it with its line
    if not has_selectors(doc):
        return None
    cluster = connect(**(connect_kwargs or {}))
    try:
        resolved = resolve_doc(cluster, doc)
    finally:
        cluster.close()
    out = Path(tempfile.mkdtemp(prefix="loadgen-resolved-")) / path.name
    out.write_text(yaml.safe_dump(resolved, sort_keys=False), encoding="utf-8")
    return out
