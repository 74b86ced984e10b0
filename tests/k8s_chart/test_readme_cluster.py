"""The README's cluster block (marker `cluster`), run without a cluster: every command in it, as written, against
what stands in for one here. tests/integration/test_readme.py runs the other blocks; this is the check it names.

- `helm install RELEASE CHART -n NS -f FILE --set k=v …`: installed by the real Helm library against the stub API
  server (conftest.helm_render), with FILE (`run.yaml: scenario: {…}`, as the README's comment says) holding a
  scenario and each `--set` applied as Helm applies it; the release must install, with what the values ask for.
- `loadgen k8s run FILE -n NS --workers N …`: run by loadgen's own command line with KUBECONFIG pointing at the fake
  API server of tests/k8s (which plays the pods: tests/k8s/test_run.py's Run), so it creates the objects, follows
  the run, copies the reports and exits with the run's code, as in a cluster.

A command in the block that neither matches is a failure: add its check here.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from loadgen.cli import main
from tests.commands import CLUSTER_COMMANDS, ROOT, block_commands, readme_blocks
from tests.k8s.fake_api import fake_api
from tests.k8s.test_run import REPORTS, Run

from .conftest import helm_render, objects

# The scenario the README's run.yaml and scenario.yaml stand for: one variant served in the cluster.
SCENARIO = {"name": "readme", "variants": [{"name": "baseline", "base_url": "http://vllm.llm.svc:8000", "model": "m"}]}


def cluster_commands() -> list[str]:
    blocks = [b for b in readme_blocks((ROOT / "README.md").read_text(encoding="utf-8")) if b.kind == "cluster"]
    assert blocks, "the README has no cluster block"
    return [c for b in blocks for c in block_commands(b.code)]


def _set(values: dict[str, Any], text: str) -> None:
    """One `--set a.b=v` (comma-separated pairs too), typed as Helm types it (YAML scalars)."""
    for pair in text.split(","):
        path, _, raw = pair.partition("=")
        *parents, leaf = path.split(".")
        node = values
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = yaml.safe_load(raw)


def _helm_install(command: str, tmp: Path) -> None:
    p = argparse.ArgumentParser(prog="helm install", exit_on_error=False)
    p.add_argument("release")
    p.add_argument("chart")
    p.add_argument("-n", "--namespace", default="default")
    p.add_argument("-f", "--values", action="append", default=[])
    p.add_argument("--set", action="append", default=[])
    args = p.parse_args(shlex.split(command)[2:])
    assert (ROOT / args.chart / "Chart.yaml").exists(), f"{command!r}: {args.chart} is not the repository's chart"
    values: dict[str, Any] = {}
    for name in args.values:
        assert name == "run.yaml", f"{command!r}: no stand-in for the values file {name!r}"
        values |= {"scenario": SCENARIO}  # the README: `run.yaml: scenario: {…}`
    for text in args.set:
        _set(values, text)
    code, doc, err = helm_render(values, tmp, release=args.release, namespace=args.namespace)
    assert code == 0, f"{command!r}: {err}"
    made = {(o["kind"], o["metadata"]["name"]): o for o in objects(doc)}
    assert all(o["metadata"].get("namespace", args.namespace) == args.namespace for o in made.values())
    jobs = {name: o for (kind, name), o in made.items() if kind == "Job"}
    if values.get("mode") == "headless":  # the master and the workers as Jobs
        workers = next(o for name, o in jobs.items() if name.endswith("-worker"))
        default = yaml.safe_load((ROOT / args.chart / "values.yaml").read_text(encoding="utf-8"))["workers"]["replicas"]
        assert workers["spec"]["parallelism"] == values.get("workers", {}).get("replicas", default)
        assert any(name.endswith("-master") for name in jobs)
    image = values.get("image", {})
    if image.get("repository"):
        pods = [o["spec"]["template"]["spec"] for o in jobs.values()]
        used = {c["image"] for s in pods for c in s["containers"]}
        assert all(u.startswith((image["repository"] + ":", image["repository"] + "@")) for u in used), used


def _k8s_run(command: str, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    argv = shlex.split(command)[1:]
    file = argv[2]
    work = tmp / "work"
    work.mkdir()
    (work / file).write_text(yaml.safe_dump(SCENARIO), encoding="utf-8")
    monkeypatch.chdir(work)
    with fake_api(tmp, namespace="default") as (cluster, kubeconfig):
        Run(cluster, exit_code=0)
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))  # what `kubectl` and `loadgen k8s` read
        code = main(argv)
        posted = [c for c in cluster.calls if c.method == "POST"]
    assert code == 0, f"{command!r} exited {code}"
    jobs = {c.body["metadata"]["name"]: c.body for c in posted if c.body["kind"] == "Job"}
    if "-n" in argv:
        assert {c.body["metadata"]["namespace"] for c in posted} == {argv[argv.index("-n") + 1]}
    if "--workers" in argv:
        workers = next(j for name, j in jobs.items() if name.endswith("-worker"))
        assert workers["spec"]["parallelism"] == int(argv[argv.index("--workers") + 1])
    if "--image" in argv:
        pods = [j["spec"]["template"]["spec"] for j in jobs.values()]
        image = argv[argv.index("--image") + 1]
        used = {c["image"] for s in pods for c in s["containers"]}
        assert all(u == image or u.startswith((image + ":", image + "@")) for u in used), used
    copied = {p.name: p.read_bytes() for p in (work / "loadgen-report").iterdir()}
    assert copied == REPORTS  # the reports came back where the command line said


@pytest.mark.parametrize("command", cluster_commands())
def test_the_readme_cluster_commands_run_against_a_stand_in(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    helm, k8s_run = CLUSTER_COMMANDS
    if command.startswith(helm):
        _helm_install(command, tmp_path)
    elif command.startswith(k8s_run):
        _k8s_run(command, tmp_path, monkeypatch)
    else:
        pytest.fail(f"no check for the README's cluster command {command!r}: add one to {__file__}")
