"""Variant discovery: which Services serve a model, by the labels of the serving stacks people deploy.

A Service belongs to a variant when it, or the pods its selector picks, carry one of the known label families.
Services give base URLs (cluster DNS name and port); their pods give the metrics endpoints (pod IP, the container
port named ``metrics`` or else the serving port, ``/metrics``), which is what a scraper should read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

__all__ = [
    "FAMILIES",
    "Found",
    "discover",
    "family_of",
    "render_table",
    "render_yaml",
    "picks_pod",
    "selector_matches",
    "service_pod_metrics",
    "serving_port",
]

# (family, label that names the variant, label that names the model or None)
FAMILIES: tuple[tuple[str, str, str | None], ...] = (
    ("loadgen", "loadgen.io/variant", None),
    ("llm-d", "llm-d.ai/inference-serving", "llm-d.ai/model"),
    ("kserve", "serving.kserve.io/inferenceservice", None),
    ("production-stack", "model", "model"),
)
_BAD_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass
class Found:
    """One discovered variant: a Service and what its pods expose."""

    name: str
    family: str
    selector: str  # the label selector that finds it again (what `--yaml` writes)
    namespace: str
    service: str
    port: int
    model: str | None
    pods_ready: int = 0
    pods: int = 0
    metrics: list[str] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://{self.service}.{self.namespace}.svc:{self.port}"


def family_of(labels: dict[str, str]) -> tuple[str, str, str | None, str] | None:
    """(family, variant name, model, selector) for a set of labels, or None when no family's label is there."""
    for family, key, model_key in FAMILIES:
        if key not in labels:
            continue
        model = labels.get(model_key) if model_key else None
        if family == "llm-d":
            # llm-d marks every serving pod `inference-serving: "true"`; the model (and the role, for
            # disaggregated prefill / decode) tell the variants apart.
            name = labels.get("llm-d.ai/model") or "llm-d"
            sel = f"{key}={labels[key]}" + (f",llm-d.ai/model={model}" if model else "")
            if labels.get("llm-d.ai/role"):
                name += f"-{labels['llm-d.ai/role']}"
                sel += f",llm-d.ai/role={labels['llm-d.ai/role']}"
            return family, _clean(name), model, sel
        return family, _clean(labels[key]), model, f"{key}={labels[key]}"
    return None


def _clean(name: str) -> str:
    return _BAD_NAME.sub("-", name).strip("-.")[:63] or "variant"


def selector_matches(selector: str, labels: dict[str, str]) -> bool:
    """Equality-based label selectors (`k=v`, `k==v`, `k!=v`, `k`, `!k`), what discovery and resolution use."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "=" in term:
            k, v = term.replace("==", "=").split("=", 1)
            if labels.get(k.strip()) != v.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def serving_port(svc: Any) -> int | None:
    ports = list(svc.spec.ports or [])
    named = [p for p in ports if (p.name or "") in ("http", "openai", "serve", "predictor")]
    chosen = (named or [p for p in ports if (p.name or "") != "metrics"] or ports)[:1]
    return int(chosen[0].port) if chosen else None


def _metrics_endpoints(pod: Any, fallback_port: int | None) -> list[str]:
    if not pod.status or not pod.status.pod_ip:
        return []
    ports = [p for c in pod.spec.containers or [] for p in (c.ports or [])]
    metrics = [p.container_port for p in ports if (p.name or "") == "metrics"]
    chosen = metrics or [p.container_port for p in ports][:1] or ([fallback_port] if fallback_port else [])
    return [f"http://{pod.status.pod_ip}:{port}/metrics" for port in chosen[:1]]


def picks_pod(picks: dict[str, str], pod: Any) -> bool:
    """Whether a Service's ``spec.selector`` selects ``pod``."""
    return all((pod.metadata.labels or {}).get(k) == v for k, v in picks.items())


def _ready(pod: Any) -> bool:
    conditions = (pod.status.conditions or []) if pod.status else []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def service_pod_metrics(cluster: Any, namespace: str, service: str) -> list[str]:
    """The /metrics endpoint of each Ready pod the Service ``namespace/service`` selects (what a scraper reads one
    by one; through the Service each scrape would land on a random pod). Reads the Service and lists its pods: a
    kubeconfig's rights, not the in-cluster master's (k8s/pod_metrics.py lists EndpointSlices there)."""
    svc = cluster.core.read_namespaced_service(service, namespace, _request_timeout=10)
    picks = dict(svc.spec.selector or {})
    if not picks:
        return []  # a Service without a selector: its endpoints are not pods loadgen can find by labels
    selector = ",".join(f"{k}={v}" for k, v in sorted(picks.items()))
    pods = cluster.core.list_namespaced_pod(namespace, label_selector=selector, _request_timeout=10).items
    port = serving_port(svc)
    targets = [_target_port(svc, port)] if port is not None else []
    return [m for p in pods if _ready(p) for m in _metrics_endpoints(p, targets[0] if targets else None)]


def _target_port(svc: Any, port: int) -> int:
    """The container port behind a Service port (its numeric targetPort, else the port itself)."""
    for p in svc.spec.ports or []:
        if int(p.port) == port and isinstance(p.target_port, int):
            return int(p.target_port)
    return port


def discover(cluster: Any, namespace: str | None, selector: str | None = None) -> list[Found]:
    """Every variant in ``namespace`` (None: all namespaces) whose Service or pods carry a known family's labels
    (and match ``selector``, when given)."""
    core = cluster.core
    if namespace is None:
        services = core.list_service_for_all_namespaces().items
        pods = core.list_pod_for_all_namespaces().items
    else:
        services = core.list_namespaced_service(namespace).items
        pods = core.list_namespaced_pod(namespace).items
    found = []
    for svc in services:
        ns = svc.metadata.namespace or namespace or "default"
        picks = svc.spec.selector or {}
        members = [p for p in pods if (p.metadata.namespace or ns) == ns and picks and picks_pod(picks, p)]
        labels = dict(svc.metadata.labels or {})
        fam = family_of(labels)
        if fam is None:  # llm-d and production-stack label the pods; the Service may carry none of it
            fam = next((f for f in (family_of(dict(p.metadata.labels or {})) for p in members) if f), None)
        if fam is None:
            continue
        pod_labels = [dict(p.metadata.labels or {}) for p in members]
        if selector and not (
            selector_matches(selector, labels) or any(selector_matches(selector, pl) for pl in pod_labels)
        ):
            continue
        port = serving_port(svc)
        if port is None:
            continue
        family, name, model, sel = fam
        found.append(
            Found(
                name=name,
                family=family,
                selector=sel,
                namespace=ns,
                service=svc.metadata.name,
                port=port,
                model=model,
                pods_ready=sum(_ready(p) for p in members),
                pods=len(members),
                metrics=[m for p in members for m in _metrics_endpoints(p, port)],
            )
        )
    return sorted(found, key=lambda f: (f.namespace, f.name, f.service))


def render_table(found: list[Found]) -> str:
    if not found:
        return "no variants found (labels looked for: " + ", ".join(k for _, k, _ in FAMILIES) + ")"
    rows = [("VARIANT", "FAMILY", "NAMESPACE", "SERVICE", "BASE URL", "MODEL", "PODS", "METRICS")]
    for f in found:
        metrics = ", ".join(f.metrics) or "-"
        pods = f"{f.pods_ready}/{f.pods}"
        rows.append((f.name, f.family, f.namespace, f.service, f.base_url, f.model or "-", pods, metrics))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1] for r in rows)


def render_yaml(found: list[Found]) -> str:
    """A scenario `variants:` block: each variant by its selector, resolved again when a run starts. A model the
    labels do not name is left out for the user to fill in (a scenario without it does not validate)."""
    variants = []
    for f in found:
        doc: dict[str, Any] = {"name": f.name}
        if f.model:
            doc["model"] = f.model
        doc["selector"] = {"selector": f.selector, "namespace": f.namespace, "port": f.port}
        variants.append(doc)
    return yaml.safe_dump({"variants": variants}, sort_keys=False)
