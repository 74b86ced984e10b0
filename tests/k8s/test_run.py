"""`loadgen k8s run` against the fake API server: objects created, progress followed, reports copied out, the run's
exit code returned, and clean-up after success, failure and Ctrl-C."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from loadgen.cli import main
from loadgen.k8s.api import connect
from loadgen.k8s.run import INTERRUPTED, run_in_cluster
from loadgen.k8s.run_objects import RunSpec
from tests.k8s.fake_api import FakeCluster, fake_api, pod, service


def mc_image(job: dict[str, Any]) -> str:
    return str(job["spec"]["template"]["spec"]["containers"][0]["image"])


REPORTS = {"report.json": b'{"exit_code": 1}', "report.md": b"# loadgen report\n", "report.html": b"<html></html>"}


class Run:
    """How the fake cluster plays one run: pods appear when their Jobs are created, the master's report server
    answers after ``serve_after`` probes (None: never; the master pod ends with ``exit_code`` instead)."""

    def __init__(self, c: FakeCluster, exit_code: int, serve_after: int | None = 2) -> None:
        self.c, self.exit_code, self.serve_after = c, exit_code, serve_after
        self.probes = 0
        self.done = False
        self.done_calls = 0
        c.on_create, c.proxy = self.created, self.proxy

    def created(self, c: FakeCluster, coll: str, obj: dict[str, Any]) -> None:
        if coll != "jobs":
            return
        labels = obj["spec"]["template"]["metadata"]["labels"]
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        for i in range(obj["spec"].get("parallelism", 1)):
            c.put("pods", pod(f"{name}-{i}", ns, labels))
        if labels["app.kubernetes.io/component"] == "worker":
            master = name.replace("-worker", "-master") + "-0"
            n = obj["spec"]["parallelism"]
            c.logs[(ns, master)] = (
                f"... worker-0 (index 0) reported as ready. {n} workers connected.\n"
                "loadgen: 0m04s/1m00s | users 8 | 41.0 req/s | a TTFT p50 52.1 p99 88.0 ms | errors 0 | trust ok\n"
            )

    def _end_master(self) -> None:
        for (coll, _, _), obj in self.c.objects.items():
            if coll == "pods" and obj["metadata"]["labels"].get("app.kubernetes.io/component") == "master":
                obj["status"] = {
                    "phase": "Succeeded" if self.exit_code == 0 else "Failed",
                    "containerStatuses": [
                        {
                            "name": "master",
                            "image": "x",
                            "imageID": "",
                            "ready": False,
                            "restartCount": 0,
                            "state": {"terminated": {"exitCode": self.exit_code}},
                        }
                    ],
                }

    def proxy(self, method: str, ns: str, svc: str, path: str, body: Any) -> tuple[int, str, list[bytes]]:
        assert svc.endswith("-master:8089"), svc
        if path == "":
            self.probes += 1
            if self.serve_after is None:
                if self.probes >= 2:
                    self._end_master()
                return 503, "text/plain", [b"no endpoints available"]
            if self.probes <= self.serve_after:
                return 503, "text/plain", [b"no endpoints available"]
            listing = {"exit_code": self.exit_code, "files": [*REPORTS, "../escape", "gone.csv"]}
            return 200, "application/json", [json.dumps(listing).encode()]
        if path == "done":
            self.done = True
            self.done_calls += 1
            self._end_master()
            return 200, "text/plain", [b"bye\n"]
        if path in REPORTS:
            return 200, "application/octet-stream", [REPORTS[path][:5], REPORTS[path][5:]]
        return 404, "text/plain", [b"not found"]


DOC = {
    "variants": [{"name": "a", "model": "m", "base_url": "http://vllm.llm.svc:8000", "api_key_env": "OPENAI_API_KEY"}]
}


def _spec(workers: int = 2) -> RunSpec:
    """A run as `loadgen k8s run` makes it."""
    secrets = {"OPENAI_API_KEY": {"name": "keys", "key": "openai"}}
    return RunSpec("lg-test", DOC, workers=workers, image="loadgen:test", secrets=secrets)


def test_a_run_creates_follows_copies_returns_its_code_and_cleans_up(tmp_path: Path) -> None:
    lines: list[str] = []
    with fake_api(tmp_path) as (c, kubeconfig):
        run = Run(c, exit_code=1)
        cluster = connect(kubeconfig=str(kubeconfig))
        result = run_in_cluster(cluster, _spec(), tmp_path / "out", interval=0.01, status=lines.append)
        cluster.close()
        created = [(call.path, call.body) for call in c.calls if call.method == "POST"]
        deleted = c.calls_to("DELETE", "/")
    assert result.code == 1  # the run's verdict, as the master's report server said it
    # Helm's order of kinds: the policy first, the ServiceAccount, Secret and ConfigMap before the pods using them.
    assert [p for p, _ in created] == [
        "/apis/networking.k8s.io/v1/namespaces/llm/networkpolicies",
        "/api/v1/namespaces/llm/serviceaccounts",
        "/api/v1/namespaces/llm/secrets",
        "/api/v1/namespaces/llm/configmaps",
        "/api/v1/namespaces/llm/services",
        "/apis/batch/v1/namespaces/llm/jobs",
        "/apis/batch/v1/namespaces/llm/jobs",
    ]
    posted = {(body["kind"], body["metadata"]["name"]): body for _, body in created}
    master, worker = posted[("Job", "lg-test-master")], posted[("Job", "lg-test-worker")]
    assert mc_image(master) == mc_image(worker) == "loadgen:test"
    assert master["spec"]["backoffLimit"] == 0
    mc = master["spec"]["template"]["spec"]["containers"][0]
    # the report server wraps locust: the reports outlive the run, the Job still ends with its code
    assert mc["command"][:3] == ["python", "-m", "loadgen.report.serve"] and mc["command"][-1] == "locust"
    assert mc["args"][mc["args"].index("--expect-workers") + 1] == "2"
    wc = worker["spec"]["template"]["spec"]["containers"][0]
    assert wc["args"][wc["args"].index("--master-host") + 1] == "lg-test-master"
    assert worker["spec"]["parallelism"] == 2
    assert {"name": "OPENAI_API_KEY", "valueFrom": {"secretKeyRef": {"name": "keys", "key": "openai"}}} in wc["env"]
    scenario = yaml.safe_load(posted[("ConfigMap", "lg-test-scenario")]["data"]["scenario.yaml"])
    assert scenario["variants"][0]["name"] == "a" and scenario["report_dir"] == "/reports"
    # followed: the status line saw the workers come up and connect
    assert any("workers 2 running" in s and "2 connected" in s for s in lines), lines
    # ... and, once the load ran, the master's own live status line (req/s, TTFT, errors, trust)
    assert any(
        s.endswith(
            "2 connected | 0m04s/1m00s | users 8 | 41.0 req/s | a TTFT p50 52.1 p99 88.0 ms | errors 0 | trust ok"
        )
        for s in lines
    ), lines
    # every report copied, byte for byte; a listed name outside the folder is never written
    assert result.files == list(REPORTS) and result.status == "reports copied (could not fetch gone.csv)"
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == REPORTS
    assert run.done  # GET /done let the master end
    # ... with the run's own token: the one of the Secret it created for the master, fresh per run
    secret = posted[("Secret", "lg-test-done-token")]
    token = base64.b64decode(secret["data"]["token"]).decode()
    (done,) = c.calls_to("GET", "/proxy/done")
    assert len(token) == 32 and done.query == {"token": [token]}
    menv = {e["name"]: e for e in mc["env"]}
    assert menv["LOADGEN_DONE_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "lg-test-done-token", "key": "token"}}
    assert "OPENAI_API_KEY" not in menv  # the master sends no request: it holds no key
    # clean-up: everything created is gone, pods with their Jobs
    kinds = ["configmaps", "jobs", "jobs", "networkpolicies", "secrets", "serviceaccounts", "services"]
    assert sorted(call.path.rsplit("/", 2)[-2] for call in deleted) == kinds
    assert all(call.query.get("propagationPolicy") == ["Background"] for call in deleted)
    assert c.objects == {}


@pytest.mark.parametrize(("exit_code", "code"), [(2, 2), (1, 4), (0, 4), (137, 137)])
def test_a_master_that_ends_without_reports_failed_the_run_and_is_cleaned_up(
    tmp_path: Path, exit_code: int, code: int
) -> None:
    # Its code stands when it refused its configuration (2) or was killed by signal N (128 + N); any other end
    # without reports is a failed run (4), never a verdict ("1: SLO breached", "0: met").
    with fake_api(tmp_path) as (c, kubeconfig):
        Run(c, exit_code=exit_code, serve_after=None)
        cluster = connect(kubeconfig=str(kubeconfig))
        result = run_in_cluster(cluster, _spec(), tmp_path / "out", interval=0.01, status=lambda s: None)
        cluster.close()
        left = dict(c.objects)
    assert result.code == code and result.files == []
    assert "without serving its reports" in result.status
    assert left == {}


def test_ctrl_c_stops_the_run_and_cleans_up_even_with_keep(tmp_path: Path) -> None:
    def interrupt_on_progress(line: str) -> None:
        if line.startswith("master"):
            raise KeyboardInterrupt

    with fake_api(tmp_path) as (c, kubeconfig):
        run = Run(c, exit_code=0)
        cluster = connect(kubeconfig=str(kubeconfig))
        result = run_in_cluster(cluster, _spec(), tmp_path / "out", keep=True, status=interrupt_on_progress)
        cluster.close()
        left = dict(c.objects)
    assert result.code == INTERRUPTED and not run.done
    assert left == {}  # deleting the master Job is what stops the load


def test_keep_leaves_the_objects(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with fake_api(tmp_path) as (c, kubeconfig):
        Run(c, exit_code=0)
        cluster = connect(kubeconfig=str(kubeconfig))
        result = run_in_cluster(cluster, _spec(), tmp_path / "out", keep=True, interval=0.01)
        cluster.close()
        kept = {(coll, name) for coll, _, name in c.objects if coll != "pods"}
    assert result.code == 0
    # the default status line off a terminal: plain lines, each state once however often it was polled
    err = capsys.readouterr().err.splitlines()
    progress = [line for line in err if line.startswith("loadgen: master ")]
    assert progress and len(progress) == len(set(progress)), err
    assert kept == {
        ("serviceaccounts", "lg-test"),
        ("configmaps", "lg-test-scenario"),
        ("secrets", "lg-test-done-token"),
        ("services", "lg-test-master"),
        ("networkpolicies", "lg-test"),
        ("jobs", "lg-test-master"),
        ("jobs", "lg-test-worker"),
    }


def test_a_refused_create_deletes_what_was_made(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(DOC), encoding="utf-8")
    with fake_api(tmp_path) as (c, kubeconfig):
        Run(c, exit_code=0)
        # A Job of that name already exists: the API server refuses the master Job (409).
        c.put(
            "jobs",
            {
                "metadata": {"name": "clash-master", "namespace": "llm"},
                "spec": {"template": {"metadata": {"labels": {}}}},
            },
        )
        argv = ["k8s", "run", str(scenario), "--kubeconfig", str(kubeconfig), "--name", "clash"]
        code = main([*argv, "--secret", "OPENAI_API_KEY=keys:openai"])
        left = sorted((coll, name) for coll, _, name in c.objects)
    assert code == 4  # the API server refused a call: the command failed
    assert "409" in capsys.readouterr().err
    assert left == [("jobs", "clash-master")]  # what it made is gone; the Job that was there is untouched


def test_cli_run_resolves_selectors_before_the_pods_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "s.yaml"
    doc = {"variants": [{"name": "int8", "model": "m", "selector": {"selector": "loadgen.io/variant=int8"}}]}
    scenario.write_text(yaml.safe_dump(doc), encoding="utf-8")
    with fake_api(tmp_path) as (c, kubeconfig):
        Run(c, exit_code=0)
        c.put(
            "services",
            service("vllm-int8", "llm", {"loadgen.io/variant": "int8"}, {"a": "b"}, [{"name": "http", "port": 8000}]),
        )
        argv = [
            "k8s",
            "run",
            str(scenario),
            "--kubeconfig",
            str(kubeconfig),
            "--workers",
            "3",
            "--name",
            "lg",
            "--report-dir",
            str(tmp_path / "reports"),
            "--interval",
            "0.01",
            "--duration",
            "2m",
        ]
        code = main(argv)
        cm = next(call.body for call in c.calls if call.method == "POST" and call.path.endswith("/configmaps"))
    assert code == 0
    ran = yaml.safe_load(cm["data"]["scenario.yaml"])["variants"][0]
    assert ran["base_url"] == "http://vllm-int8.llm.svc:8000" and "selector" not in ran
    assert ran["resolved_from"]["service"] == "vllm-int8"
    assert yaml.safe_load(cm["data"]["scenario.yaml"])["load"]["duration"] == "2m"  # --duration, in the scenario
    assert (tmp_path / "reports" / "report.md").read_bytes() == REPORTS["report.md"]
    assert "report.html" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["Upper", "under_score", "-lead", "trail-", "x" * 53])
def test_a_name_that_cannot_prefix_every_object_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump({"variants": [{"name": "a", "model": "m", "base_url": "http://a:1"}]}))
    assert main(["k8s", "run", str(scenario), f"--name={name}"]) == 2
    assert "--name" in capsys.readouterr().err


def test_missing_extra_is_a_usage_error(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "kubernetes", None)  # what an install without the k8s extra looks like
    assert main(["k8s", "discover"]) == 2
    assert "pip install 'llm-loadgen[k8s]'" in capsys.readouterr().err


def test_an_unreachable_api_server_is_exit_4(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with fake_api(tmp_path) as (_, kubeconfig):
        pass  # stopped: its port now refuses connections
    assert main(["k8s", "discover", "--kubeconfig", str(kubeconfig)]) == 4
    assert "cannot reach the Kubernetes API server" in capsys.readouterr().err
