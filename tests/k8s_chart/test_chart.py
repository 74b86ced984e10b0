"""The Helm chart, rendered by the real Helm v4 library (helm-sdkpy) against a loopback stub API server."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from loadgen.config.scenario import Scenario, load_scenario
from tests.k8s_chart.conftest import CHART, CI_VALUES, K8S_VERSIONS, ROOT, helm_render

CRD_KINDS = {"ServiceMonitor", "PodMonitor"}  # prometheus-operator's: no schema in kubernetes-validate


def _by(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def _pods(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    specs = [o["spec"]["template"]["spec"] for o in objs if o["kind"] in ("Deployment", "Job")]
    return specs + [o["spec"] for o in objs if o["kind"] == "Pod"]


def test_lint_is_clean() -> None:
    from helm_sdkpy import Configuration, Lint

    result = asyncio.run(Lint(Configuration()).run(str(CHART)))
    assert result["TotalChartsLinted"] == 1
    assert result["Errors"] is None
    # Severity: 1 info (the chart has no icon), 2 warning, 3 error.
    assert [m for m in result["Messages"] if m["Severity"] > 1] == []


def test_ci_values_cover_both_modes_and_every_option() -> None:
    modes = {yaml.safe_load(p.read_text(encoding="utf-8")).get("mode") for p in CI_VALUES}
    assert modes == {"ui", "headless"}


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_rendered_object_validates_strictly(rendered: dict[str, list[dict[str, Any]]], version: str) -> None:
    checked = 0
    for objs in rendered.values():
        for o in objs:
            if o["kind"] in CRD_KINDS:
                continue
            kubernetes_validate.validate(o, version, strict=True)
            checked += 1
    assert checked >= 20
    assert {o["kind"] for o in rendered["full-values"]} >= {"Ingress", "Role", "RoleBinding", *CRD_KINDS}


def test_headless_master_is_a_job_that_ends_with_the_verdict(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objs = rendered["headless-values"]
    assert not [o for o in objs if o["kind"] == "Deployment"]
    master = _by(objs, "Job", "rel-loadgen-master")["spec"]
    assert master["backoffLimit"] == 0
    assert master["ttlSecondsAfterFinished"] == 86400
    assert master["activeDeadlineSeconds"] == 3600
    rules = master["podFailurePolicy"]["rules"]
    # An evicted pod first (it is run again); then every exit but 0 ends the Job: a verdict (1, 2, 3) or a failed
    # run (4, 128 + N), never retried.
    assert rules[0]["action"] == "Ignore"
    assert rules[1] == {
        "action": "FailJob",
        "onExitCodes": {"containerName": "master", "operator": "NotIn", "values": [0]},
    }
    pod = master["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (c,) = pod["containers"]
    # The report server wraps locust and hands back its code after serving /reports on the web port.
    assert c["command"] == ["python", "-m", "loadgen.report.serve", "--dir", "/reports", "--for", "15m"] + [
        "--port",
        "8089",
        "--host",
        "0.0.0.0",
        "--",
        "locust",
    ]
    args = c["args"]
    assert args[args.index("--expect-workers") + 1] == "4"
    assert args[args.index("--loadgen-duration") + 1] == "2m"
    assert args[args.index("--metrics-port") + 1] == "9646"
    assert "--headless" in args and "--master" in args
    workers = _by(objs, "Job", "rel-loadgen-worker")["spec"]
    assert (workers["completions"], workers["parallelism"]) == (4, 4)
    wargs = workers["template"]["spec"]["containers"][0]["args"]
    assert wargs[wargs.index("--master-host") + 1] == "rel-loadgen-master"


def test_ui_mode_is_two_deployments_with_the_web_ui(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objs = rendered["ui-values"]
    assert not [o for o in objs if o["kind"] == "Job"]
    master = _by(objs, "Deployment", "rel-loadgen-master")["spec"]["template"]["spec"]["containers"][0]
    assert master["command"] == ["locust"]
    assert master["args"][master["args"].index("--web-port") + 1] == "8089"
    assert "--web-login" in master["args"]  # on by default (test_chart_security.py: the password's Secret)
    assert "--headless" not in master["args"] and "--metrics-port" not in master["args"]
    assert master["readinessProbe"]["httpGet"]["port"] == "web"
    assert _by(objs, "Deployment", "rel-loadgen-worker")["spec"]["replicas"] == 2
    svc = _by(objs, "Service", "rel-loadgen-master")["spec"]
    assert [(p["name"], p["port"]) for p in svc["ports"]] == [("web", 8089), ("zmq", 5557)]


def test_selectors_are_fixed_labels_that_select_their_pods(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for objs in rendered.values():
        for o in objs:
            if o["kind"] not in ("Deployment", "Job"):
                continue
            comp = "master" if o["metadata"]["name"].endswith("-master") else "worker"
            labels = o["spec"]["template"]["metadata"]["labels"]
            want = {"app.kubernetes.io/name": "loadgen", "app.kubernetes.io/instance": "rel"}
            want["app.kubernetes.io/component"] = comp
            assert want.items() <= labels.items()
            if o["kind"] == "Deployment":
                assert o["spec"]["selector"]["matchLabels"] == want
        svc = _by(objs, "Service", "rel-loadgen-master")
        for o in objs:
            if o["kind"] in ("Deployment", "Job") and o["metadata"]["name"] == "rel-loadgen-master":
                assert svc["spec"]["selector"].items() <= o["spec"]["template"]["metadata"]["labels"].items()


def test_pods_are_locked_down(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for name, objs in rendered.items():
        for pod in _pods(objs):
            psc = pod["securityContext"]
            assert psc["runAsNonRoot"] is True and psc["seccompProfile"] == {"type": "RuntimeDefault"}
            for c in pod["containers"]:
                sc = c["securityContext"]
                assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
                assert sc["capabilities"] == {"drop": ["ALL"]}
                assert c["resources"]["limits"] and c["resources"]["requests"]
            # A token only in the master, only when rbac.podMetrics is on (full-values).
            token = pod["automountServiceAccountToken"]
            is_master = any(c["name"] == "master" for c in pod["containers"])
            assert token is (name == "full-values" and is_master)


def test_rbac_only_when_asked_and_only_in_the_target_namespace(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for name in ("ui-values", "headless-values"):
        assert not [o for o in rendered[name] if o["kind"] in ("Role", "RoleBinding", "ClusterRole")]
    role = _by(rendered["full-values"], "Role", "rel-loadgen")
    assert role["metadata"]["namespace"] == "inference"
    # rbac.podMetrics: the master lists the variants' EndpointSlices, and nothing else (tests/k8s_chart/
    # test_chart_security.py holds this against the API calls of the code that runs in the pods).
    assert role["rules"] == [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list"]}]
    binding = _by(rendered["full-values"], "RoleBinding", "rel-loadgen")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "rel-loadgen", "namespace": "loadtest"}]


def test_workers_spread_over_nodes(rendered: dict[str, list[dict[str, Any]]]) -> None:
    pod = _by(rendered["headless-values"], "Job", "rel-loadgen-worker")["spec"]["template"]["spec"]
    (tsc,) = pod["topologySpreadConstraints"]
    assert tsc["topologyKey"] == "kubernetes.io/hostname"
    assert tsc["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "worker"


def test_scenario_configmap_is_a_valid_scenario_and_its_checksum_is_on_the_pods(
    rendered: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    objs = rendered["headless-values"]
    text = _by(objs, "ConfigMap", "rel-loadgen-scenario")["data"]["scenario.yaml"]
    path = tmp_path / "scenario.yaml"
    path.write_text(text, encoding="utf-8")
    sc = load_scenario(path)
    assert [v.name for v in sc.variants] == ["baseline", "fp8"] and sc.report_dir == "/reports"
    sums = {o["spec"]["template"]["metadata"]["annotations"]["checksum/config"] for o in objs if o["kind"] == "Job"}
    assert len(sums) == 1 and len(sums.pop()) == 64
    # The key goes to the workers, which send the requests; the master holds only its report window's token.
    key = {"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": {"name": "vllm-api-key", "key": "token"}}}
    assert _by(objs, "Job", "rel-loadgen-worker")["spec"]["template"]["spec"]["containers"][0]["env"] == [key]
    env = _by(objs, "Job", "rel-loadgen-master")["spec"]["template"]["spec"]["containers"][0]["env"]
    ref = {"secretKeyRef": {"name": "rel-loadgen-done-token", "key": "token"}}
    assert env == [{"name": "LOADGEN_DONE_TOKEN", "valueFrom": ref}]


def test_a_changed_scenario_changes_the_checksum(tmp_path: Path) -> None:
    def checksum(users: int) -> str:
        variants = [{"name": "a", "base_url": "http://a:8000", "model": "m"}]
        values = {"scenario": {"variants": variants, "load": {"users": users}}}
        code, doc, err = helm_render(values, tmp_path)
        assert code == 0, err
        master = _by(doc["created"], "Deployment", "rel-loadgen-master")
        return str(master["spec"]["template"]["metadata"]["annotations"]["checksum/config"])

    assert checksum(4) != checksum(5)


def test_a_users_scenario_inherits_nothing_but_variants_from_the_default(tmp_path: Path) -> None:
    code, doc, err = helm_render({"scenario": {"name": "mine", "load": {"users": 3}}}, tmp_path)
    assert code == 0, err
    sc = yaml.safe_load(_by(doc["created"], "ConfigMap", "rel-loadgen-scenario")["data"]["scenario.yaml"])
    assert sc == {
        "name": "mine",
        "load": {"users": 3},
        "variants": [{"name": "baseline", "base_url": "http://vllm-baseline:8000", "model": "llama-3.1-8b"}],
        "report_dir": "/reports",
    }


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"bogus": 1}, "bogus"),
        ({"workers": {"replica": 2}}, "replica"),
        ({"mode": "batch"}, "mode"),
        ({"scenario": {"variants": [{"name": "a", "base_url": "http://a", "modle": "m"}]}}, "modle"),
        (
            {"scenario": {"variants": [{"name": "a", "base_url": "http://a", "model": "m", "api_key_env": "KEY"}]}},
            "apiKeySecrets.KEY",
        ),
    ],
)
def test_bad_values_are_refused(tmp_path: Path, values: dict[str, Any], message: str) -> None:
    code, _, err = helm_render(values, tmp_path)
    assert code == 1
    assert message in err


def test_helm_test_pod_gets_the_master_web_port(rendered: dict[str, list[dict[str, Any]]]) -> None:
    pod = _by(rendered["full-values"], "Pod", "rel-loadgen-test")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    (c,) = pod["spec"]["containers"]
    assert c["image"] == "ghcr.io/loadgen/loadgen@sha256:" + "0" * 64
    assert c["args"][-1] == "http://rel-loadgen-master:8089/"


def test_notes_say_how_to_follow_and_fetch_a_headless_run(tmp_path: Path) -> None:
    code, doc, err = helm_render({"mode": "headless"}, tmp_path)
    assert code == 0, err
    notes = doc["notes"]
    assert "kubectl -n loadtest logs -f job/rel-loadgen-master" in notes
    assert "kubectl -n loadtest port-forward job/rel-loadgen-master 8089:8089" in notes
    assert "http://127.0.0.1:8089/done" in notes and "report.json" in notes
    assert "get secret rel-loadgen-done-token -o jsonpath='{.data.token}'" in notes
    assert "X-Loadgen-Done-Token: $TOKEN" in notes
    # The real install path ran against the stub: discovery first, then one POST per object.
    posts = [path for verb, path in doc["requests"] if verb == "POST"]
    assert len(posts) == len(doc["created"]) and doc["requests"][0] == ["GET", "/version"]


def test_committed_schema_and_readme_match_the_model_and_values() -> None:
    r = subprocess.run(
        [sys.executable, "scripts/gen-chart-docs.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    # The model's, but for the pattern of an environment variable's NAME, which Helm's error would quote (maybe a
    # key pasted in its place): the templates check it without quoting it (test_chart_refusals.py).
    model = Scenario.model_json_schema()
    api_key_env = model["$defs"]["Variant"]["properties"]["api_key_env"]
    assert api_key_env.pop("pattern") == "^[A-Za-z_][A-Za-z0-9_]*$"
    assert schema["$defs"] == model["$defs"]
    assert schema["properties"]["scenario"]["properties"] == model["properties"]
    assert schema["additionalProperties"] is False
    assert "^[A-Za-z_][A-Za-z0-9_]*$" not in json.dumps(schema["$defs"])


def test_every_value_is_described() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_chart_docs", ROOT / "scripts" / "gen-chart-docs.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    text = (CHART / "values.yaml").read_text(encoding="utf-8")
    assert mod.undocumented(yaml.safe_load(text), mod.descriptions(text)) == []
    # And the check can fail: a key without its comment is reported.
    bare = text.replace("# workers.replicas -- ", "# ")
    assert mod.undocumented(yaml.safe_load(bare), mod.descriptions(bare)) == ["workers.replicas"]
    readme = (CHART / "README.md").read_text(encoding="utf-8")
    assert '| `headless.serveReports` | `"15m"` |' in readme
