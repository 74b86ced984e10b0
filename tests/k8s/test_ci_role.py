"""The Role docs/nightly-ci.md gives a CI job grants every call `loadgen k8s run` makes, and nothing a run does not
use: a whole `loadgen k8s run` (the CLI, as the page runs it) against the fake API server, each recorded HTTP call
turned into the RBAC (API group, resource, verb) the API server would check."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from loadgen.cli import main
from tests.k8s.fake_api import fake_api
from tests.k8s.test_run import Run

PAGE = Path(__file__).resolve().parents[2] / "docs" / "nightly-ci.md"
_VERBS = {"POST": "create", "DELETE": "delete", "PATCH": "patch", "PUT": "update"}


def page_role() -> set[tuple[str, str, str]]:
    blocks = re.findall(r"```yaml\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.DOTALL)
    roles = [d for b in blocks for d in yaml.safe_load_all(b) if isinstance(d, dict) and d.get("kind") == "Role"]
    assert len(roles) == 1, roles
    rules = roles[0]["rules"]
    return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


def rbac(method: str, path: str) -> tuple[str, str, str]:
    """(API group, resource[/subresource], verb) of one namespaced REST call, as the API server authorizes it."""
    parts = [p for p in path.split("/") if p]
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    assert rest[0] == "namespaces", path  # `k8s run` works in its namespace only
    resource, named = rest[2], len(rest) > 3
    sub = rest[4] if len(rest) > 4 else None
    if sub:
        resource = f"{resource}/{sub}"
    return group, resource, ("get" if named else "list") if method == "GET" else _VERBS[method]


def test_rbac_reads_paths_as_the_api_server_does() -> None:
    assert rbac("GET", "/api/v1/namespaces/ns/services/lg-master:8089/proxy/report.json") == (
        "",
        "services/proxy",
        "get",
    )
    assert rbac("POST", "/apis/batch/v1/namespaces/ns/jobs") == ("batch", "jobs", "create")
    assert rbac("GET", "/api/v1/namespaces/ns/pods") == ("", "pods", "list")
    assert rbac("GET", "/api/v1/namespaces/ns/pods/p-0/log") == ("", "pods/log", "get")


def test_the_pages_role_grants_every_call_of_a_run_and_no_more(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "nightly.yaml"
    doc = {
        "variants": [{"name": "a", "model": "m", "base_url": "http://vllm-a.inference.svc:8000", "api_key_env": "K"}]
    }
    scenario.write_text(yaml.safe_dump(doc), encoding="utf-8")
    with fake_api(tmp_path, namespace="loadtest") as (c, kubeconfig):
        run = Run(c, exit_code=0)
        argv = ["k8s", "run", str(scenario), "-n", "loadtest", "--workers", "4", "--kubeconfig", str(kubeconfig)]
        code = main(
            [*argv, "--secret", "K=vllm-key:token", "--report-dir", str(tmp_path / "out"), "--interval", "0.01"]
        )
        calls = {rbac(call.method, call.path) for call in c.calls}
    assert code == 0 and run.done, capsys.readouterr().err
    role = page_role()
    assert calls - role == set(), "calls the page's Role does not grant"
    assert role - calls == set(), "grants the page's Role gives that a run does not use"
