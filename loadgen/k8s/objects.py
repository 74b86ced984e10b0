"""The objects of one loadgen release on Kubernetes, built in Python from the Helm chart's own values.

`loadgen k8s run` creates exactly what ``helm install`` of charts/loadgen renders for the same values (a test
renders the chart with the real Helm library and compares kinds, names, labels, commands, args, env, ports and pod
settings). ``values`` has the chart's shape (charts/loadgen/values.yaml); ``DEFAULTS`` is the part of it this
builder reads, held to the chart's file by the same test. Not built: the optional ServiceMonitor / PodMonitor /
Ingress, the RBAC Role (a client-driven run resolves selectors itself; its pods need no API access) and the
`helm test` hook.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import yaml

__all__ = ["CHART_APP_VERSION", "DEFAULTS", "build_objects", "fullname", "merge_values", "selector_labels"]

CHART_APP_VERSION = "0.1.0"  # charts/loadgen/Chart.yaml appVersion: the image tag when none is given
SCENARIO_PATH = "/etc/loadgen/scenario.yaml"
REPORTS_DIR = "/reports"

DEFAULTS: dict[str, Any] = {
    "mode": "ui",
    "nameOverride": "",
    "fullnameOverride": "",
    "image": {"repository": "ghcr.io/loadgen/loadgen", "tag": "", "digest": "", "pullPolicy": "IfNotPresent"},
    "imagePullSecrets": [],
    "locustfile": "/opt/venv/lib/python3.11/site-packages/loadgen/locust_plugin/locustfile.py",
    "scenario": {},
    "apiKeySecrets": {},
    "extraEnv": [],
    "master": {
        "extraArgs": [],
        "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
        "nodeSelector": {},
        "tolerations": [],
        "affinity": {},
        "podAnnotations": {},
        "podLabels": {},
    },
    "workers": {
        "replicas": 2,
        "extraArgs": [],
        "resources": {"requests": {"cpu": "1", "memory": "512Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
        "nodeSelector": {},
        "tolerations": [],
        "affinity": {},
        "podAnnotations": {},
        "podLabels": {},
        "topologySpread": {
            "enabled": True,
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
        },
    },
    "headless": {
        "duration": "",
        "expectWorkersMaxWait": 300,
        "serveReports": "15m",
        "ttlSecondsAfterFinished": 86400,
        "activeDeadlineSeconds": 0,
    },
    "service": {"type": "ClusterIP", "webPort": 8089, "zmqPort": 5557, "annotations": {}},
    "metrics": {"enabled": False, "port": 9646},
    "serviceAccount": {"create": True, "name": "", "annotations": {}},
    "rbac": {"discovery": False},
    "podSecurityContext": {
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "runAsGroup": 10001,
        "fsGroup": 10001,
        "seccompProfile": {"type": "RuntimeDefault"},
    },
    "securityContext": {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
    },
    "reportsSizeLimit": "1Gi",
    "networkPolicy": {"enabled": True},
}


def merge_values(values: dict[str, Any], base: dict[str, Any] | None = None) -> dict[str, Any]:
    """Helm's coalescing: mappings merge key by key, anything else (lists included) replaces."""
    out = copy.deepcopy(DEFAULTS if base is None else base)
    for key, value in values.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and key != "scenario":
            out[key] = merge_values(value, out[key])
        else:
            out[key] = copy.deepcopy(value)
    return out


def _name(v: dict[str, Any]) -> str:
    return (v["nameOverride"] or "loadgen")[:63].rstrip("-")


def fullname(v: dict[str, Any], release: str) -> str:
    """The chart's `loadgen.fullname`: the release name when it contains the chart's, else `<release>-loadgen`."""
    if v["fullnameOverride"]:
        return str(v["fullnameOverride"])[:52].rstrip("-")
    name = v["nameOverride"] or "loadgen"
    return (release if name in release else f"{release}-{name}")[:52].rstrip("-")


def _labels(v: dict[str, Any], release: str) -> dict[str, str]:
    # The chart's labels minus the two that say who made the object (helm.sh/chart, managed-by: Helm).
    return {
        "app.kubernetes.io/name": _name(v),
        "app.kubernetes.io/instance": release,
        "app.kubernetes.io/version": CHART_APP_VERSION,
        "app.kubernetes.io/managed-by": "loadgen",
        "app.kubernetes.io/part-of": "loadgen",
    }


def selector_labels(v: dict[str, Any], release: str, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": _name(v),
        "app.kubernetes.io/instance": release,
        "app.kubernetes.io/component": component,
    }


def _image(v: dict[str, Any]) -> str:
    img = v["image"]
    return (
        f"{img['repository']}@{img['digest']}"
        if img["digest"]
        else f"{img['repository']}:{img['tag'] or CHART_APP_VERSION}"
    )


def scenario_text(v: dict[str, Any]) -> str:
    """The scenario as mounted: report_dir pointing at the reports emptyDir (keys sorted, like Helm's toYaml)."""
    doc = {k: val for k, val in v["scenario"].items() if k != "report_dir"}
    return yaml.safe_dump({**doc, "report_dir": REPORTS_DIR}, sort_keys=True)


def _env(v: dict[str, Any]) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = []
    for variant in v["scenario"].get("variants") or []:
        key = variant.get("api_key_env")
        if not key or any(e["name"] == key for e in env):
            continue
        ref = v["apiKeySecrets"].get(key) or {}
        if not (ref.get("name") and ref.get("key")):
            raise ValueError(f"scenario variant api_key_env {key} has no apiKeySecrets.{key} {{name, key}}")
        env.append({"name": key, "valueFrom": {"secretKeyRef": {"name": ref["name"], "key": ref["key"]}}})
    return env + list(v["extraEnv"])


def _mounts() -> list[dict[str, Any]]:
    return [
        {"name": "scenario", "mountPath": "/etc/loadgen", "readOnly": True},
        {"name": "reports", "mountPath": REPORTS_DIR},
        {"name": "tmp", "mountPath": "/tmp"},
    ]


def _pod_common(v: dict[str, Any], release: str, pod: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "serviceAccountName": fullname(v, release) if v["serviceAccount"]["create"] else "default",
        "automountServiceAccountToken": bool(v["rbac"]["discovery"] and pod == "master"),
        "enableServiceLinks": False,
        "securityContext": v["podSecurityContext"],
    }
    if v["imagePullSecrets"]:
        spec["imagePullSecrets"] = v["imagePullSecrets"]
    for key in ("nodeSelector", "tolerations", "affinity"):
        if v[pod][key]:
            spec[key] = v[pod][key]
    spec["volumes"] = [
        {"name": "scenario", "configMap": {"name": f"{fullname(v, release)}-scenario"}},
        {"name": "reports", "emptyDir": {"sizeLimit": v["reportsSizeLimit"]}},
        {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}},
    ]
    return spec


def _template(v: dict[str, Any], release: str, pod: str, component: str, spec: dict[str, Any]) -> dict[str, Any]:
    checksum = hashlib.sha256(scenario_text(v).encode()).hexdigest()
    return {
        "metadata": {
            "labels": {**_labels(v, release), "app.kubernetes.io/component": component, **v[pod]["podLabels"]},
            "annotations": {"checksum/config": checksum, **v[pod]["podAnnotations"]},
        },
        "spec": spec,
    }


def _with_env(c: dict[str, Any], env: list[dict[str, Any]]) -> dict[str, Any]:
    return {**c, "env": env} if env else c


def _worker_spec(v: dict[str, Any], release: str) -> dict[str, Any]:
    spec = _pod_common(v, release, "workers")
    ts = v["workers"]["topologySpread"]
    if ts["enabled"]:
        # Workers on different nodes: one node's NIC, conntrack table and source IP are what a generator runs out of.
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": ts["maxSkew"],
                "topologyKey": ts["topologyKey"],
                "whenUnsatisfiable": ts["whenUnsatisfiable"],
                "labelSelector": {"matchLabels": selector_labels(v, release, "worker")},
            }
        ]
    args = ["-f", v["locustfile"], "--scenario", SCENARIO_PATH, "--report-dir", REPORTS_DIR, "--worker"]
    args += ["--master-host", f"{fullname(v, release)}-master", "--master-port", str(v["service"]["zmqPort"])]
    container = {
        "name": "worker",
        "image": _image(v),
        "imagePullPolicy": v["image"]["pullPolicy"],
        "command": ["locust"],
    }
    container["args"] = args + [str(a) for a in v["workers"]["extraArgs"]]
    container = _with_env(container, _env(v))
    container |= {
        "securityContext": v["securityContext"],
        "resources": v["workers"]["resources"],
        "volumeMounts": _mounts(),
    }
    spec["containers"] = [container]
    return spec


def _master_container(v: dict[str, Any]) -> dict[str, Any]:
    headless = v["mode"] == "headless"
    svc, h = v["service"], v["headless"]
    c: dict[str, Any] = {"name": "master", "image": _image(v), "imagePullPolicy": v["image"]["pullPolicy"]}
    if headless and h["serveReports"]:
        # The report server runs locust, then serves /reports until GET /done or the time is up (its exit code).
        c["command"] = ["python", "-m", "loadgen.report.serve", "--dir", REPORTS_DIR, "--for", str(h["serveReports"])]
        c["command"] += ["--port", str(svc["webPort"]), "--", "locust"]
    else:
        c["command"] = ["locust"]
    args = ["-f", v["locustfile"], "--scenario", SCENARIO_PATH, "--report-dir", REPORTS_DIR, "--master"]
    args += ["--master-bind-port", str(svc["zmqPort"])]
    if headless:
        args += ["--headless", "--only-summary", "--expect-workers", str(v["workers"]["replicas"])]
        args += ["--expect-workers-max-wait", str(h["expectWorkersMaxWait"])]
        if h["duration"]:
            args += ["--loadgen-duration", str(h["duration"])]
    else:
        args += ["--web-port", str(svc["webPort"])]
    if v["metrics"]["enabled"]:
        args += ["--metrics-port", str(v["metrics"]["port"])]
    c["args"] = args + [str(a) for a in v["master"]["extraArgs"]]
    c["ports"] = [{"name": "web", "containerPort": svc["webPort"]}, {"name": "zmq", "containerPort": svc["zmqPort"]}]
    if v["metrics"]["enabled"]:
        c["ports"].append({"name": "metrics", "containerPort": v["metrics"]["port"]})
    c = _with_env(c, _env(v))
    if not headless:
        c["readinessProbe"] = {"httpGet": {"path": "/", "port": "web"}, "periodSeconds": 10}
        c["livenessProbe"] = {"tcpSocket": {"port": "web"}, "initialDelaySeconds": 15, "periodSeconds": 20}
    return c | {
        "securityContext": v["securityContext"],
        "resources": v["master"]["resources"],
        "volumeMounts": _mounts(),
    }


def _meta(v: dict[str, Any], release: str, ns: str, name: str, component: str | None) -> dict[str, Any]:
    labels = _labels(v, release) | ({"app.kubernetes.io/component": component} if component else {})
    return {"name": name, "namespace": ns, "labels": labels}


def build_objects(values: dict[str, Any], release: str, namespace: str) -> list[dict[str, Any]]:
    """What `helm install RELEASE charts/loadgen -n NAMESPACE -f values` creates (see the module doc), in an order
    that works: the ServiceAccount and ConfigMap before the pods that use them."""
    v = merge_values(values)
    if v["mode"] not in ("headless", "ui"):
        raise ValueError(f"mode: expected headless or ui, got {v['mode']!r}")
    full, ns, headless = fullname(v, release), namespace, v["mode"] == "headless"
    out: list[dict[str, Any]] = []
    if v["serviceAccount"]["create"]:
        sa: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": _meta(v, release, ns, v["serviceAccount"]["name"] or full, None),
        }
        if v["serviceAccount"]["annotations"]:
            sa["metadata"]["annotations"] = v["serviceAccount"]["annotations"]
        out.append(sa | {"automountServiceAccountToken": False})
    out.append(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta(v, release, ns, f"{full}-scenario", None),
            "data": {"scenario.yaml": scenario_text(v)},
        }
    )
    ports = [
        {"name": "web", "port": v["service"]["webPort"], "targetPort": "web"},
        {"name": "zmq", "port": v["service"]["zmqPort"], "targetPort": "zmq"},
    ]
    if v["metrics"]["enabled"]:
        ports.append({"name": "metrics", "port": v["metrics"]["port"], "targetPort": "metrics"})
    svc_meta = _meta(v, release, ns, f"{full}-master", "master")
    if v["service"]["annotations"]:
        svc_meta["annotations"] = v["service"]["annotations"]
    spec = {"type": v["service"]["type"], "selector": selector_labels(v, release, "master"), "ports": ports}
    out.append({"apiVersion": "v1", "kind": "Service", "metadata": svc_meta, "spec": spec})
    if v["networkPolicy"]["enabled"]:
        # Ingress from the release's own pods (workers' ZMQ), web and metrics ports from anywhere; egress open.
        pods = {"app.kubernetes.io/name": _name(v), "app.kubernetes.io/instance": release}
        open_ports = [{"port": "web"}] + ([{"port": "metrics"}] if v["metrics"]["enabled"] else [])
        np_spec = {
            "podSelector": {"matchLabels": pods},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": pods}}]}, {"ports": open_ports}],
        }
        meta = _meta(v, release, ns, full, None)
        out.append({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta, "spec": np_spec})
    master_spec = _pod_common(v, release, "master") | {"containers": [_master_container(v)]}
    workers = int(v["workers"]["replicas"])
    h = v["headless"]
    if headless:
        job: dict[str, Any] = {"backoffLimit": 0, "ttlSecondsAfterFinished": h["ttlSecondsAfterFinished"]}
        if h["activeDeadlineSeconds"]:
            job["activeDeadlineSeconds"] = h["activeDeadlineSeconds"]
        # Never rerun a verdict (1 breached, 2 bad config, 3 untrustworthy) nor a failed run (4, or 128 + N for a
        # master killed by signal N): any exit but 0. An evicted pod (it exits 4 on SIGTERM) is no verdict: first.
        job["podFailurePolicy"] = {
            "rules": [
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                {
                    "action": "FailJob",
                    "onExitCodes": {"containerName": "master", "operator": "NotIn", "values": [0]},
                },
            ]
        }
        job["template"] = _template(v, release, "master", "master", {"restartPolicy": "Never", **master_spec})
        out.append(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": _meta(v, release, ns, f"{full}-master", "master"),
                "spec": job,
            }
        )
        wjob: dict[str, Any] = {"completions": workers, "parallelism": workers, "backoffLimit": 0}
        wjob["ttlSecondsAfterFinished"] = h["ttlSecondsAfterFinished"]
        if h["activeDeadlineSeconds"]:
            wjob["activeDeadlineSeconds"] = h["activeDeadlineSeconds"]
        wjob["template"] = _template(
            v, release, "workers", "worker", {"restartPolicy": "Never", **_worker_spec(v, release)}
        )
        out.append(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": _meta(v, release, ns, f"{full}-worker", "worker"),
                "spec": wjob,
            }
        )
        return out
    mdep = {
        "replicas": 1,
        "strategy": {"type": "Recreate"},
        "selector": {"matchLabels": selector_labels(v, release, "master")},
        "template": _template(v, release, "master", "master", master_spec),
    }
    out.append(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _meta(v, release, ns, f"{full}-master", "master"),
            "spec": mdep,
        }
    )
    wdep = {
        "replicas": workers,
        "selector": {"matchLabels": selector_labels(v, release, "worker")},
        "template": _template(v, release, "workers", "worker", _worker_spec(v, release)),
    }
    out.append(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _meta(v, release, ns, f"{full}-worker", "worker"),
            "spec": wdep,
        }
    )
    return out
