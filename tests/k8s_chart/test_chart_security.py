"""The chart's security, on objects rendered by the real Helm library: the ui login and its Secret, the report
window's token, the NetworkPolicy port by port, each pod's credential variables (the master holds no variant key),
literal credentials refused, and RBAC equal to the Kubernetes API calls of the code that runs in the pods."""

from __future__ import annotations

import ast
import base64
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from loadgen.config.classes import is_credential_header
from tests.k8s_chart.conftest import ROOT, helm_render

VARIANTS = [
    {"name": "a", "base_url": "http://a:8000", "model": "m", "api_key_env": "A_KEY"},
    {
        "name": "b",
        "base_url": "http://b:8000",
        "model": "m",
        "headers_from_env": {"api-key": "B_APIM", "X-Org": "B_ORG"},
    },
]
PROMETHEUS = {
    "url": "http://prometheus.monitoring:9090",
    "queries": {"gpu": "avg(DCGM_FI_DEV_GPU_UTIL)"},
    "basic_auth_env": {"username": "PROM_USER", "password": "PROM_PASS"},
}
REFS = {n: {"name": f"s-{n.lower()}", "key": "k"} for n in ("A_KEY", "B_APIM", "B_ORG", "PROM_USER", "PROM_PASS")}


def _render(tmp_path: Path, values: dict[str, Any]) -> dict[str, Any]:
    code, doc, err = helm_render(values, tmp_path)
    assert code == 0, err
    return doc


def _one(doc: dict[str, Any], kind: str, name: str) -> dict[str, Any]:
    (o,) = [o for o in doc["created"] if o["kind"] == kind and o["metadata"]["name"] == name]
    return o


def _rendered(doc: dict[str, Any], kind: str, name: str) -> dict[str, Any]:
    """From the release's manifest (an object Helm adopted is not POSTed)."""
    objs = [o for o in yaml.safe_load_all(doc["manifest"]) if o]
    (o,) = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    return dict(o)


def _container(doc: dict[str, Any], name: str) -> dict[str, Any]:
    (o,) = [o for o in doc["created"] if o["kind"] in ("Deployment", "Job") and o["metadata"]["name"] == name]
    return dict(o["spec"]["template"]["spec"]["containers"][0])


def _env(c: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("valueFrom", e.get("value")) for e in c.get("env", [])}


def test_ui_mode_logs_in_with_a_generated_password_by_default(tmp_path: Path) -> None:
    doc = _render(tmp_path, {})
    master = _container(doc, "rel-loadgen-master")
    assert "--web-login" in master["args"]
    env = _env(master)
    assert env["LOADGEN_WEB_USERNAME"] == "loadgen"
    assert env["LOADGEN_WEB_PASSWORD"] == {"secretKeyRef": {"name": "rel-loadgen-web-login", "key": "password"}}
    secret = _one(doc, "Secret", "rel-loadgen-web-login")
    password = base64.b64decode(secret["data"]["password"]).decode()
    assert re.fullmatch(r"[A-Za-z0-9]{32}", password)
    assert "LOADGEN_WEB_PASSWORD" not in _env(_container(doc, "rel-loadgen-worker"))
    # The chart renders into a cluster that has no such Secret yet (the stub answers 404): `lookup` asked for it.
    assert ["GET", "/api/v1/namespaces/loadtest/secrets/rel-loadgen-web-login"] in doc["requests"]
    notes = doc["notes"]
    assert "kubectl -n loadtest get secret rel-loadgen-web-login -o jsonpath='{.data.password}' | base64 -d" in notes
    assert 'Log in as "loadgen"' in notes


def test_the_generated_password_and_token_survive_an_upgrade(tmp_path: Path) -> None:
    """What `lookup` finds in the cluster is kept: the same password (and token) after `helm upgrade`."""
    kept = base64.b64encode(b"the-password-from-the-first-install").decode()
    cases = [({}, "rel-loadgen-web-login", "password"), ({"mode": "headless"}, "rel-loadgen-done-token", "token")]
    for values, name, key in cases:
        path = f"/api/v1/namespaces/loadtest/secrets/{name}"
        # The release's own Secret, as an earlier install left it (Helm adopts it: its ownership marks).
        meta = {
            "name": name,
            "namespace": "loadtest",
            "labels": {"app.kubernetes.io/managed-by": "Helm"},
            "annotations": {"meta.helm.sh/release-name": "rel", "meta.helm.sh/release-namespace": "loadtest"},
        }
        there = {"apiVersion": "v1", "kind": "Secret", "metadata": meta}
        code, doc, err = helm_render(values, tmp_path, existing={path: {**there, "data": {key: kept}}})
        assert code == 0, err
        assert _rendered(doc, "Secret", name)["data"] == {key: kept}
        # A Secret there without the key gets a fresh value.
        code, doc, err = helm_render(values, tmp_path, existing={path: {**there, "data": {}}})
        assert code == 0, err
        assert _rendered(doc, "Secret", name)["data"][key] != kept


def test_an_existing_secret_is_used_and_none_is_made(tmp_path: Path) -> None:
    doc = _render(tmp_path, {"webAuth": {"existingSecret": "ui-login", "username": "ops"}})
    env = _env(_container(doc, "rel-loadgen-master"))
    assert env["LOADGEN_WEB_PASSWORD"] == {"secretKeyRef": {"name": "ui-login", "key": "password"}}
    assert env["LOADGEN_WEB_USERNAME"] == "ops"
    assert not [o for o in doc["created"] if o["kind"] == "Secret"]


def test_login_off_is_said_out_loud(tmp_path: Path) -> None:
    doc = _render(tmp_path, {"webAuth": {"enabled": False}})
    master = _container(doc, "rel-loadgen-master")
    assert "--web-login" not in master["args"] and "env" not in master
    assert not [o for o in doc["created"] if o["kind"] == "Secret"]
    assert "anyone who reaches the web port can start a run" in doc["notes"]


def test_headless_report_window_has_a_token_and_binds_every_interface(tmp_path: Path) -> None:
    doc = _render(tmp_path, {"mode": "headless"})
    master = _container(doc, "rel-loadgen-master")
    assert master["command"][master["command"].index("--host") + 1] == "0.0.0.0"
    assert _env(master) == {"LOADGEN_DONE_TOKEN": {"secretKeyRef": {"name": "rel-loadgen-done-token", "key": "token"}}}
    token = base64.b64decode(_one(doc, "Secret", "rel-loadgen-done-token")["data"]["token"]).decode()
    assert re.fullmatch(r"[A-Za-z0-9]{32}", token)
    # No window, no token.
    doc = _render(tmp_path, {"mode": "headless", "headless": {"serveReports": ""}})
    assert not [o for o in doc["created"] if o["kind"] == "Secret"]
    assert "env" not in _container(doc, "rel-loadgen-master")


def _policy(doc: dict[str, Any]) -> dict[str, Any]:
    return dict(_one(doc, "NetworkPolicy", "rel-loadgen")["spec"])


RELEASE = {"app.kubernetes.io/name": "loadgen", "app.kubernetes.io/instance": "rel"}
WORKERS = {**RELEASE, "app.kubernetes.io/component": "worker"}
MONITORING = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}


def test_network_policy_admits_each_port_from_its_peers_only(tmp_path: Path) -> None:
    spec = _policy(_render(tmp_path, {}))
    assert spec["podSelector"] == {"matchLabels": RELEASE} and spec["policyTypes"] == ["Ingress"]
    # Every rule names its peers and its ports: none opens a port to the whole cluster.
    assert all(rule.get("from") and rule.get("ports") for rule in spec["ingress"])
    rules = {tuple(p["port"] for p in rule["ports"]): rule["from"] for rule in spec["ingress"]}
    assert rules == {
        ("web",): [{"podSelector": {"matchLabels": RELEASE}}],
        ("zmq",): [{"podSelector": {"matchLabels": WORKERS}}],
    }

    ingress_ns = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}
    spec = _policy(_render(tmp_path, {"metrics": {"enabled": True}, "networkPolicy": {"webFrom": [ingress_ns]}}))
    rules = {tuple(p["port"] for p in rule["ports"]): rule["from"] for rule in spec["ingress"]}
    assert rules[("web",)] == [{"podSelector": {"matchLabels": RELEASE}}, ingress_ns]
    assert rules[("metrics",)] == [MONITORING]  # the default monitoring namespace
    assert rules[("zmq",)] == [{"podSelector": {"matchLabels": WORKERS}}]

    # No metrics peers: the metrics port is closed, not opened to all.
    spec = _policy(_render(tmp_path, {"metrics": {"enabled": True}, "networkPolicy": {"metricsFrom": []}}))
    assert [tuple(p["port"] for p in r["ports"]) for r in spec["ingress"]] == [("web",), ("zmq",)]


def test_each_pod_gets_the_credentials_it_uses(tmp_path: Path) -> None:
    values = {"scenario": {"variants": VARIANTS, "metrics": {"prometheus": PROMETHEUS}}, "apiKeySecrets": REFS}
    doc = _render(tmp_path, values)
    worker, master = _env(_container(doc, "rel-loadgen-worker")), _env(_container(doc, "rel-loadgen-master"))
    assert sorted(worker) == ["A_KEY", "B_APIM", "B_ORG"]  # the workers send the requests
    assert worker["B_APIM"] == {"secretKeyRef": {"name": "s-b_apim", "key": "k"}}
    # The master queries the Prometheus and sends no request to a target: no variant's key or header.
    assert sorted(master) == ["LOADGEN_WEB_PASSWORD", "LOADGEN_WEB_USERNAME", "PROM_PASS", "PROM_USER"]
    # tokenizer: server — the scenario's check POSTs /tokenize to the first variant from every process.
    values["scenario"] = {"variants": VARIANTS[::-1], "tokenizer": "server"}
    master = _env(_container(_render(tmp_path, values), "rel-loadgen-master"))
    assert sorted(master) == ["B_APIM", "B_ORG", "LOADGEN_WEB_PASSWORD", "LOADGEN_WEB_USERNAME"]


@pytest.mark.parametrize(
    ("scenario", "message"),
    [
        ({"variants": VARIANTS[1:]}, "variants[0].headers_from_env.X-Org names environment variable B_ORG"),
        (
            {"variants": VARIANTS[:1], "metrics": {"prometheus": PROMETHEUS}},
            "metrics.prometheus.basic_auth_env.password names environment variable PROM_PASS, which has no "
            "apiKeySecrets.PROM_PASS",
        ),
        (
            {
                "variants": VARIANTS[:1],
                "metrics": {"prometheus": {**PROMETHEUS, "basic_auth_env": None, "bearer_token_env": "PROM_TOKEN"}},
            },
            "apiKeySecrets.PROM_TOKEN",
        ),  # fmt: skip
    ],
)
def test_a_credential_variable_without_a_secret_fails_rendering(
    tmp_path: Path, scenario: dict[str, Any], message: str
) -> None:
    refs = {k: v for k, v in REFS.items() if k not in ("B_ORG", "PROM_PASS")}
    code, _, err = helm_render({"scenario": scenario, "apiKeySecrets": refs}, tmp_path)
    assert code == 1 and message in err, err


@pytest.mark.parametrize(
    "header",
    ["api-key", "X-Auth-Token", "Cookie", "Ocp-Apim-Subscription-Key", "X-Client-Secret", "X-Route", "Accept-Language"],
)
def test_a_literal_credential_header_is_refused_as_loadgen_refuses_it(tmp_path: Path, header: str) -> None:
    variants = [{"name": "a", "base_url": "http://a:8000", "model": "m", "headers": {header: "SECRET-abc123"}}]
    code, doc, err = helm_render({"scenario": {"variants": variants}}, tmp_path)
    assert (code == 1) is is_credential_header(header), err
    if code == 1:
        assert f"scenario variants[0].headers.{header} looks like a credential" in err
        assert "SECRET-abc123" not in err


def test_a_priority_class_credential_header_is_refused(tmp_path: Path) -> None:
    classes = [{"name": "paid", "share": 1.0, "headers": {"X-Tenant-Token": "t0k"}}]
    code, _, err = helm_render({"scenario": {"variants": VARIANTS[:1], "traffic": {"classes": classes}}}, tmp_path)
    assert code == 1 and "traffic.classes[0].headers.X-Tenant-Token looks like a credential" in err


# --- RBAC against the Kubernetes API calls of the code that runs in the pods -----------------------------------------

# kubernetes client method resource → (API group, resource) in RBAC terms.
_RESOURCES = {
    "endpoint_slice": ("discovery.k8s.io", "endpointslices"),
    "endpoints": ("", "endpoints"),
    "service": ("", "services"),
    "pod": ("", "pods"),
    "pod_log": ("", "pods/log"),
    "deployment": ("apps", "deployments"),
    "deployment_scale": ("apps", "deployments/scale"),
}
_METHOD = re.compile(
    r"^(list|read|create|patch|replace|delete|watch)_namespaced_([a-z_]+?)$|^(list)_([a-z_]+?)_for_all_namespaces$"
)


def _in_cluster_modules() -> set[Path]:
    """loadgen's modules a Locust process imports (from the locustfile, statically): the code that runs in the pods."""
    seen: set[Path] = set()
    todo = [ROOT / "loadgen/locust_plugin/locustfile.py"]
    while todo:
        path = todo.pop()
        if path in seen or not path.exists():
            continue
        seen.add(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("loadgen"):
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.startswith("loadgen")]
            for name in names:
                base = ROOT / name.replace(".", "/")
                todo += [base.with_suffix(".py"), base / "__init__.py"]
    return seen


def _api_calls(paths: set[Path]) -> set[tuple[str, str, str]]:
    calls = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute):
                m = _METHOD.match(node.attr)
                if m:
                    verb, res = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
                    assert res in _RESOURCES, f"{path}: {node.attr}: add its RBAC resource to _RESOURCES"
                    calls.add((*_RESOURCES[res], verb))
    return calls


def test_the_role_grants_what_the_in_cluster_code_calls(tmp_path: Path) -> None:
    """The Role is exactly the in-cluster master's API calls: what loadgen/k8s/pod_metrics.py declares
    (`IN_CLUSTER_CALLS`), and what a scan of every module a Locust process imports finds. The scan leaves out
    loadgen/k8s/discover.py, which pod_metrics calls only off the cluster (with the user's kubeconfig; its own test
    records the requests of the in-cluster path)."""
    from loadgen.k8s.pod_metrics import IN_CLUSTER_CALLS

    modules = _in_cluster_modules()
    assert {ROOT / "loadgen/locust_plugin/plugin.py", ROOT / "loadgen/k8s/pod_metrics.py"} <= modules
    calls = _api_calls(modules - {ROOT / "loadgen/k8s/discover.py"})
    doc = _render(tmp_path, {"rbac": {"podMetrics": True, "targetNamespace": "inference"}})
    (role,) = [o for o in doc["created"] if o["kind"] == "Role"]
    granted = {
        (g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]
    }
    assert granted == set(IN_CLUSTER_CALLS) == calls == {("discovery.k8s.io", "endpointslices", "list")}
    assert role["metadata"]["namespace"] == "inference"
    # The scan finds calls where there are some: the client-side discovery has them (and the pods never run it).
    assert ("", "services", "list") in _api_calls({ROOT / "loadgen/k8s/discover.py"})
    pods = [o["spec"]["template"]["spec"] for o in doc["created"] if o["kind"] in ("Deployment", "Job")]
    tokens = {c["containers"][0]["name"]: c["automountServiceAccountToken"] for c in pods}
    assert tokens == {"master": True, "worker": False}
    # Off: no Role, no token anywhere.
    doc = _render(tmp_path, {})
    assert not [o for o in doc["created"] if o["kind"] in ("Role", "RoleBinding", "ClusterRole")]
    pods = [o["spec"]["template"]["spec"] for o in doc["created"] if o["kind"] in ("Deployment", "Job")]
    assert {p["automountServiceAccountToken"] for p in pods} == {False}
