"""The release pipeline (.github/workflows/) and the image the chart pulls: actionlint finds nothing in any workflow;
every action is pinned to a commit; each job holds only the permissions it uses; what release.yml publishes is what
the chart and `loadgen k8s run` pull by default; the tag must match the versions (scripts/release-check.py); and the
chart renders with the published image by default, with `--set image.repository=…`, and says in NOTES when the
image it runs may not exist."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.k8s_chart.conftest import CHART, ROOT, helm_render, objects

WORKFLOWS = sorted((ROOT / ".github/workflows").glob("*.y*ml"))
RELEASE = ROOT / ".github/workflows/release.yml"
CHECK = ROOT / "scripts/release-check.py"
# `uses: owner/repo@<40 hex> # vX.Y.Z`: a tag can be moved, a commit cannot; the comment says which release it is.
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40} # v\d+(\.\d+)*$")


def _workflow(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    doc["on"] = doc.pop(True, doc.get("on"))  # YAML 1.1 reads the key `on` as true
    return dict(doc)


def _chart() -> dict[str, Any]:
    return dict(yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8")))


def _values() -> dict[str, Any]:
    return dict(yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8")))


def _owner() -> str:
    """The GitHub owner the project lives under: the chart's `home` (github.com/<owner>/<repo>)."""
    m = re.fullmatch(r"https://github\.com/([\w-]+)/[\w.-]+", _chart()["home"])
    assert m, _chart()["home"]
    return m.group(1)


def _bin(name: str) -> str:
    """A tool the dev extra installs beside this Python (pip's console scripts), else on PATH."""
    here = Path(sys.executable).parent / name
    exe = str(here) if here.exists() else shutil.which(name)
    assert exe, f"{name} not found: the dev extra installs it (.ci/run does)"
    return exe


def test_the_workflows_are_there() -> None:
    assert {"ci.yml", "release.yml"} <= {p.name for p in WORKFLOWS}  # every one of them is linted below


def test_actionlint_finds_nothing_in_any_workflow() -> None:
    """actionlint (with shellcheck on every `run:` script, the dev extra's own, so every machine checks alike)."""
    cmd = [_bin("actionlint"), f"-shellcheck={_bin('shellcheck')}", "-pyflakes=", "-no-color"]
    r = subprocess.run([*cmd, *map(str, WORKFLOWS)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert (r.returncode, r.stdout + r.stderr) == (0, "")


def test_actionlint_does_report_a_broken_workflow(tmp_path: Path) -> None:
    """The check above can fail: an unknown job key, an undefined `needs` and a shell quoting bug are each found."""
    bad = tmp_path / "bad.yml"
    bad.write_text(
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-24.04\n    needs: nothere\n    step: []\n"
        "    steps:\n      - run: echo $GITHUB_REF_NAME\n",
        encoding="utf-8",
    )
    cmd = [_bin("actionlint"), f"-shellcheck={_bin('shellcheck')}", "-pyflakes=", "-no-color", str(bad)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "nothere" in r.stdout and '"step"' in r.stdout and "SC2086" in r.stdout


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_actions_are_pinned_to_commits_and_jobs_hold_their_own_permissions(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    uses = [m.group(1).strip() for m in re.finditer(r"^\s*(?:- )?uses: (.+)$", text, re.M)]
    assert uses
    assert [u for u in uses if not (u.startswith("./") or PINNED.match(u))] == []
    doc = _workflow(path)
    assert "permissions" in doc
    for name, job in doc["jobs"].items():
        assert "permissions" in job or doc["permissions"] == {"contents": "read"}, name


def test_release_jobs_get_only_what_they_publish_with() -> None:
    doc = _workflow(RELEASE)
    assert doc["on"] == {"push": {"tags": ["v*"]}}
    assert doc["permissions"] == {}
    perms = {name: job["permissions"] for name, job in doc["jobs"].items()}
    writes = {name: {k for k, v in p.items() if v == "write"} for name, p in perms.items()}
    assert {n: w for n, w in writes.items() if w} == {
        "image": {"packages"},
        "chart": {"packages"},
        "pypi": {"id-token"},  # trusted publishing: PyPI trusts the OIDC token, no secret
        "pages": {"pages", "id-token"},
    }
    jobs = doc["jobs"]
    assert jobs["pypi"]["environment"]["name"] == "pypi"
    assert jobs["pages"]["environment"]["name"] == "github-pages"
    assert any(s.get("uses", "").startswith("pypa/gh-action-pypi-publish@") for s in jobs["pypi"]["steps"])
    assert [s for s in jobs["pypi"]["steps"] if "run" in s] == []  # the job with the token runs no script


def _needs(jobs: dict[str, Any], name: str) -> set[str]:
    """Every job ``name`` waits for, directly or not."""
    direct = jobs[name].get("needs", [])
    direct = [direct] if isinstance(direct, str) else direct
    return set(direct).union(*(_needs(jobs, d) for d in direct))


def test_nothing_is_published_before_ci_and_the_version_check_pass() -> None:
    jobs = _workflow(RELEASE)["jobs"]
    assert jobs["test"]["uses"] == "./.github/workflows/ci.yml"
    assert "workflow_call" in _workflow(ROOT / ".github/workflows/ci.yml")["on"]
    (check,) = [s["run"] for s in jobs["version"]["steps"] if "release-check.py version" in s.get("run", "")]
    assert check == 'python scripts/release-check.py version "$GITHUB_REF_NAME" >> "$GITHUB_OUTPUT"'
    for publisher in ("image", "chart", "pypi", "pages"):
        assert {"version", "test"} <= _needs(jobs, publisher), publisher
    assert "dists" in _needs(jobs, "image")  # nothing is pushed before every part has built
    assert "image" in _needs(jobs, "chart") and {"image", "chart", "dists"} <= _needs(jobs, "pypi")
    assert any("release-check.py dists" in s.get("run", "") for s in jobs["dists"]["steps"])


def _names_step(jobs: dict[str, Any]) -> dict[str, str]:
    """The registry names the version job writes, for this project's owner."""
    (script,) = [s["run"] for s in jobs["version"]["steps"] if s.get("id") == "names"]
    out = {}
    for m in re.finditer(r'echo "(\w+)=(.+)" >> "\$GITHUB_OUTPUT"', script):
        out[m.group(1)] = m.group(2).replace("$owner", _owner())
    assert 'owner="${GITHUB_REPOSITORY_OWNER,,}"' in script  # lowercased: registry paths are
    return out


def test_the_release_publishes_the_image_and_chart_the_chart_and_k8s_run_pull() -> None:
    jobs = _workflow(RELEASE)["jobs"]
    names = _names_step(jobs)
    assert names["image"] == _values()["image"]["repository"] == f"ghcr.io/{_owner()}/loadgen"
    assert names["charts"] == f"oci://ghcr.io/{_owner()}/charts"
    steps = {s.get("id"): s for s in jobs["image"]["steps"]}
    assert steps["meta"]["with"]["images"] == "${{ needs.version.outputs.image }}"
    assert steps["meta"]["with"]["tags"] == "type=raw,value=${{ needs.version.outputs.version }}"
    assert steps["build"]["with"]["platforms"] == "linux/amd64,linux/arm64"
    assert steps["build"]["with"]["file"] == "Dockerfile" and steps["build"]["with"]["push"] is True
    assert jobs["image"]["outputs"]["digest"] == "${{ steps.build.outputs.digest }}"
    (chart_run,) = [s["run"] for s in jobs["chart"]["steps"] if "helm push" in s.get("run", "")]
    assert 'helm push "dist/loadgen-$VERSION.tgz" "$CHARTS"' in chart_run
    # The chart's name and `loadgen k8s run`'s default image (from the chart's packaged render) follow.
    from loadgen.k8s.run_objects import rendered

    assert _chart()["name"] == "loadgen"
    assert rendered()["chart_image"] == f"{names['image']}:{_chart()['appVersion']}"
    assert _values()["image"]["tag"] == "" and _values()["image"]["digest"] == ""


def _check(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(CHECK), *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_the_tag_must_be_the_packages_and_the_charts_version() -> None:
    version = _chart()["appVersion"]
    r = _check("version", f"v{version}")
    assert (r.returncode, r.stdout) == (0, f"version={version}\n")
    r = _check("version", "v99.0.0")
    assert r.returncode == 1
    assert "pyproject.toml version" in r.stderr and "Chart.yaml appVersion" in r.stderr
    assert _check("version", version).returncode == 1  # no leading v


def test_a_chart_whose_app_version_lags_is_refused(tmp_path: Path) -> None:
    (tmp_path / "charts/loadgen").mkdir(parents=True)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    chart = _chart() | {"appVersion": "0.0.1"}
    (tmp_path / "charts/loadgen/Chart.yaml").write_text(yaml.safe_dump(chart), encoding="utf-8")
    spec = importlib.util.spec_from_file_location("release_check", CHECK)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.check_version(f"v{_chart()['version']}", tmp_path) == [
        f"Chart.yaml appVersion is '0.0.1', the tag says '{_chart()['version']}'"
    ]


def _wheel(folder: Path, name: str, files: list[str]) -> None:
    with zipfile.ZipFile(folder / name, "w") as z:
        for f in files:
            z.writestr(f, b"")


def test_dists_without_the_compiled_halves_are_refused(tmp_path: Path) -> None:
    v = _chart()["appVersion"]
    (tmp_path / f"llm_loadgen-{v}.tar.gz").write_bytes(b"")
    so = "cpython-311-x86_64-linux-gnu.so"
    spec = importlib.util.spec_from_file_location("release_check", CHECK)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # Every compiled half the check asks for (the first, _wire, is the one the refusal below leaves out).
    assert module.EXTENSIONS[0] == "loadgen/protocol/_wire." and len(module.EXTENSIONS) >= 4
    good = [f"{half}{so}" for half in module.EXTENSIONS] + ["loadgen/__init__.py"]
    _wheel(tmp_path, f"llm_loadgen-{v}-cp311-cp311-manylinux_2_17_x86_64.whl", good)
    assert _check("dists", str(tmp_path), v).returncode == 0
    _wheel(tmp_path, f"llm_loadgen-{v}-cp312-cp312-manylinux_2_17_aarch64.whl", good[1:])
    r = _check("dists", str(tmp_path), v)
    assert r.returncode == 1 and "aarch64.whl: no loadgen/protocol/_wire.*.so" in r.stderr
    assert "_hist_walk" not in r.stderr
    r = _check("dists", str(tmp_path), "9.9.9")
    assert r.returncode == 1 and "want one sdist llm_loadgen-9.9.9.tar.gz" in r.stderr


# --- the chart's image, as Helm renders it ---------------------------------------------------------------------------


def _images(objs: list[dict[str, Any]]) -> set[str]:
    out = set()
    for o in objs:
        spec = (o.get("spec") or {}).get("template", {}).get("spec") or (o["spec"] if o["kind"] == "Pod" else {})
        out |= {c["image"] for c in [*spec.get("initContainers", []), *spec.get("containers", [])]}
    return out


@pytest.mark.parametrize(
    ("values", "image"),
    [
        ({}, "ghcr.io/loadgen/loadgen:{v}"),
        ({"mode": "headless"}, "ghcr.io/loadgen/loadgen:{v}"),
        ({"image": {"repository": "registry.example:5000/team/loadgen"}}, "registry.example:5000/team/loadgen:{v}"),
        ({"mode": "headless", "image": {"repository": "registry.example/lg"}}, "registry.example/lg:{v}"),
    ],
    ids=["default-ui", "default-headless", "repository-ui", "repository-headless"],
)
def test_every_pod_runs_the_published_image_or_the_one_set(tmp_path: Path, values: dict[str, Any], image: str) -> None:
    code, doc, err = helm_render(values, tmp_path)
    assert code == 0, err
    objs = objects(doc)
    assert len([o for o in objs if o["kind"] in ("Deployment", "Job", "Pod")]) >= 3
    assert _images(objs) == {image.format(v=_chart()["appVersion"])}
    own_build = "image" in values
    # NOTES: the default image of a chart from a source tree may not exist yet; one set is the user's.
    notes = doc["notes"]
    assert ("scripts/build-image" in notes) is not own_build
    if not own_build:
        assert f"ghcr.io/loadgen/loadgen:{_chart()['appVersion']} is published by the release of loadgen v" in notes
        assert "--set image.repository=REGISTRY/loadgen" in notes and "ImagePullBackOff" in notes


def test_notes_name_the_docs_placeholder(tmp_path: Path) -> None:
    code, doc, err = helm_render({"image": {"repository": "REGISTRY/loadgen"}}, tmp_path)
    assert code == 0, err
    assert "names the docs' placeholder REGISTRY: the pods cannot pull it" in doc["notes"]


def test_the_chart_a_release_pushes_says_nothing_of_building_an_image(tmp_path: Path) -> None:
    """The release job's own edit of Chart.yaml (its `sed` and `grep` lines, run here on a copy) marks the image
    published, and that chart's NOTES no longer tell the user to build one."""
    chart = tmp_path / "loadgen"
    shutil.copytree(CHART, chart)
    jobs = _workflow(RELEASE)["jobs"]
    (script,) = [s["run"] for s in jobs["chart"]["steps"] if "helm push" in s.get("run", "")]
    edit = [line for line in script.splitlines() if line.startswith(("sed -i", "grep -qx"))]
    assert len(edit) == 2
    for line in edit:
        cmd = line.replace("charts/loadgen/Chart.yaml", str(chart / "Chart.yaml"))
        subprocess.run(["bash", "-ec", cmd], check=True, timeout=30)
    (tmp_path / "values.yaml").write_text("{}\n", encoding="utf-8")
    out = tmp_path / "out.json"
    env = {**os.environ, "HELM_DRIVER": "memory"}
    cmd = [sys.executable, "-m", "tests.k8s_chart.render", str(chart), str(tmp_path / "values.yaml"), str(out)]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    notes = yaml.safe_load(out.read_text(encoding="utf-8"))["notes"]
    assert notes.startswith("loadgen ") and "scripts/build-image" not in notes and "Image " not in notes
