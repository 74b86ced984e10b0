"""`loadgen validate` runs in the cluster before any load: the master pod's init container (the chart's
`loadgen.validateContainer`, so `loadgen k8s run` has it too). Its command and credentials as built, and a scenario it
refuses ending `loadgen k8s run` at once with exit 2 and the refusal's words, the pod's termination message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadgen.k8s.api import connect
from loadgen.k8s.run import run_in_cluster
from loadgen.k8s.run_objects import RunSpec, build_objects
from tests.k8s.fake_api import fake_api
from tests.k8s.test_run import Run

SECRETS = {n: {"name": "keys", "key": n.lower()} for n in ("OPENAI_API_KEY", "PROM_TOKEN")}
DOC: dict[str, Any] = {
    "variants": [{"name": "a", "model": "m", "base_url": "http://vllm.llm.svc:8000", "api_key_env": "OPENAI_API_KEY"}],
    "tokenizer": "server",
    "metrics": {"prometheus": {"url": "http://prom:9090", "queries": {"q": "up"}, "bearer_token_env": "PROM_TOKEN"}},
}
REFUSAL = "/etc/loadgen/scenario.yaml:3: tokenizer: server: POST http://vllm.llm.svc:8000/tokenize answered 404"


def test_the_master_validates_the_scenario_first_with_its_own_credentials() -> None:
    objects = build_objects(RunSpec("lg", DOC, secrets=SECRETS), "ns")
    (master,) = [o for o in objects if o["kind"] == "Job" and o["metadata"]["name"] == "lg-master"]
    pod = master["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["name"] == "validate" and init["command"] == ["loadgen", "validate", "/etc/loadgen/scenario.yaml"]
    assert init["terminationMessagePolicy"] == "FallbackToLogsOnError"  # its words are the pod's failure
    assert init["image"] == pod["containers"][0]["image"]
    assert init["volumeMounts"] == pod["containers"][0]["volumeMounts"]
    # The master's credentials (the Prometheus's; the first variant's for `tokenizer: server`), not its own tokens.
    env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in init["env"]}
    assert env == {"PROM_TOKEN": SECRETS["PROM_TOKEN"], "OPENAI_API_KEY": SECRETS["OPENAI_API_KEY"]}


class Refused(Run):
    """The master pod's init container exits 2 with `loadgen validate`'s message; the master never starts."""

    def _end_master(self) -> None:
        for (coll, _, _), obj in self.c.objects.items():
            if coll == "pods" and obj["metadata"]["labels"].get("app.kubernetes.io/component") == "master":
                waiting = {"waiting": {"reason": "PodInitializing"}}
                term = {"terminated": {"exitCode": 2, "reason": "Error", "message": REFUSAL + "\n"}}
                status = {"image": "x", "imageID": "", "ready": False, "restartCount": 0}
                obj["status"] = {
                    "phase": "Failed",
                    "initContainerStatuses": [{"name": "validate", **status, "state": term}],
                    "containerStatuses": [{"name": "master", **status, "state": waiting}],
                }


def test_a_scenario_refused_in_the_pod_ends_the_run_with_2_and_its_words(tmp_path: Path) -> None:
    with fake_api(tmp_path) as (c, kubeconfig):
        Refused(c, exit_code=2, serve_after=None)
        cluster = connect(kubeconfig=str(kubeconfig))
        result = run_in_cluster(cluster, RunSpec("lg", DOC, secrets=SECRETS), tmp_path / "out", interval=0.01,
                                status=lambda s: None)  # fmt: skip
        cluster.close()
        left = dict(c.objects)
    assert result.code == 2 and result.files == []
    assert result.status == f"the master pod's validate container refused the scenario before any load: {REFUSAL}"
    assert left == {}
