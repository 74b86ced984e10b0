"""The task pages' command blocks, run as a reader pastes them: docs/sweep.md, docs/cost.md, docs/nightly-ci.md and
docs/agents.md (docs/web-ui.md's: test_web_ui_page.py). Each page in one folder, its blocks in order, each in
`bash -e` (every command must exit 0), with `loadgen`, `locust` and `python` this checkout's (tests/commands.py).
The marker above a block (`<!-- page-test: KIND[, given PATH …] -->`; tests/unit/test_task_pages.py holds every
block to one) says how:

- `run`: from a clone of the repository (`loadgen/examples/…` resolves as there). A `loadgen sim … &` in it serves
  the ports it names (checked free first); whatever the block leaves running is stopped when it ends.
- `cluster`: the same, with KUBECONFIG pointing at the fake API server of tests/k8s, whose Jobs run as processes
  here (tests/k8s/local_pods.py: the chart's master, workers and `validate` commands, against the simulator). So
  `loadgen k8s run` creates its objects, follows the run, copies the reports out and deletes the objects as in a
  cluster, and `loadgen compare` gates the report it copied. `cluster-setup` (the one-time setup): run before the
  page's other blocks, with the real kubectl against the same server, which then refuses objects in a namespace
  that was not created (`strict_namespaces`) and gives the pods their `--secret` from the Secret kubectl made.
- `given PATH …`: a file of the reader's own that the block names, stood in for (`_given`): `scenario.yaml` and
  `perf/nightly.yaml`, a short scenario of the simulator this test starts (`_stand_in`: sweep.md's one deployment,
  cost.md's two priced as the page's example, nightly-ci.md's two with their key); `perf/baseline.json`, the
  report of the block's own `loadgen k8s run` run once before it, as the page says to make one.

The one change made to a command: flags the `loadgen` shim appends (RUN_ARGS, `_sweep_args`), each a documented
flag. They shorten the run and loosen the run-trust bounds (tests/commands.py's LOOSE_TRUST says why):

- `loadgen run`: `--duration 8s --set load.warmup=2s` (demo.yaml: 60 s with a 10 s warm-up; agents.yaml: 20 s,
  RUN_BY_FILE says why);
- `loadgen sweep`: `--step-duration 3s --set load.warmup=0.5s --workers 0` (one process per step), and for a search
  (`--search`, `--concurrency-search`) `--max-steps 2`. demo.yaml's steps are 6 s and start its senders at 128/s
  (BY_FILE says why). The simulator block's sweep of demo.yaml is then 3 variants × 2 steps of 6 s (1 and 8 req/s)
  instead of up to 3 × 4 of 20 s: ~75 s, each step ~13 s with the drain of its requests (up to 400 tokens, ~4 s)
  and a process's start and report; the stand-ins' sweeps ~15 s (2 steps, 3 for the concurrency ladder, which
  stops after two saturated steps) and ~35 s (4 rates × 2 variants);
- `loadgen k8s run`: nothing: the stand-in scenario is 6 s long (1 s warm-up), and it sets the loose bounds.

What the blocks leave is checked too: each sweep's sweep.json (every variant's knee, the shortened plan), the cost
run's Cost and energy figures, the cluster run's reports and pods, the comparison. ~3-3.5 min for the three pages
on this 2-core VM: sweep.md ~100-110 s, cost.md ~55 s, nightly-ci.md ~30-55 s (two cluster runs of 12-23 s: the
baseline's and the block's, each a master, four workers and `validate` started here).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from loadgen.sim.launch import start_sim_process
from tests.commands import LOOSE_TRUST, ROOT, Block, block_commands, readme_blocks, shell_env
from tests.k8s.fake_api import FakeCluster, fake_api
from tests.k8s.local_pods import LocalPods

PAGES = ("sweep.md", "cost.md", "nightly-ci.md", "agents.md")
MARKER = "page-test"
KINDS = ("run", "cluster", "cluster-setup")
RUN_ARGS = f"--duration 8s --set load.warmup=2s {LOOSE_TRUST}"
# agents.yaml's tasks take ~5-15 s on the simulator: a window of 8 s would hold no task opened in it (every user's
# first task opens in the warm-up), so its run keeps 20 s; the drain then lets its tasks end (~10 s more).
RUN_BY_FILE = {"loadgen/examples/agents.yaml": f"--duration 20s --set load.warmup=2s {LOOSE_TRUST}"}
SWEEP_ARGS = f"--set load.warmup=0.5s --workers 0 {LOOSE_TRUST}"
SEARCH_ARGS = "--max-steps 2"
# Each step's length: 3 s for the stand-ins' short requests (~0.3 s). demo.yaml's take up to ~5 s (up to 400 output
# tokens): 6 s, and its 64 senders (the page's --set load.users=64) started at 128/s, not 12/s: the window opens once
# they all run, 5.3 s into a step at 12/s (the page's 20 s steps have room for that; 6 s ones would measure 1 s).
BY_FILE = {"loadgen/examples/demo.yaml": "--step-duration 6s --set load.spawn_rate=128"}
DEFAULT = "--step-duration 3s"
API_KEY = "sk-page-test-0123"  # the CI's $VLLM_API_KEY (nightly-ci.md's kubectl block puts it in a Secret)
# The simulator's variants the stand-ins send to: each holds 8 sequences at once (max_num_seqs), so that the sweeps
# find a knee in few steps (about 23 req/s of these short requests; 16 users already queue).
SIM = ["sweep=baseline", "baseline", "int8"]
SIM_SEQS = {name.split("=")[0]: {"max_num_seqs": "8"} for name in SIM}

_SHORT = {
    "mixes": [{"name": "short", "weight": 1}],
    "custom_mixes": {
        "short": {"buckets": [{"name": "s", "prompt_tokens": [50, 200], "weight": 1}], "output_tokens": [24, 40]}
    },
}
_TRUST = {"loop_lag_p99_ms": 500, "schedule_slip_p99_ms": 500, "cpu_percent_p90": 100}


def _variant(name: str, url: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "base_url": url, "model": "loadgen-sim", "continuous_usage_stats": True} | fields


def _stand_in(page: str, path: str, urls: dict[str, str]) -> dict[str, Any]:
    """The reader's own scenario the page's block names, for the simulator at ``urls``."""
    if (page, path) == ("sweep.md", "scenario.yaml"):  # one deployment, its SLOs, senders for open and closed loop
        return {
            "name": "my-service",
            "seed": 7,
            "variants": [_variant("vllm", urls["sweep"])],
            "traffic": _SHORT,
            "load": {"users": 32, "spawn_rate": 1024, "duration": "60s", "warmup": "5s"},
            "slos": [
                {"metric": "ttft", "stat": "p99", "max_ms": 2000},
                {"metric": "e2e", "stat": "p99", "max_ms": 2000},
            ],
        }
    if (page, path) == ("cost.md", "scenario.yaml"):  # the page's example: 2 GPUs against 1, at $2.5 each
        return {
            "name": "int8-cost",
            "seed": 7,
            "variants": [
                _variant("baseline", urls["baseline"], baseline=True, cost={"usd_per_gpu_hour": 2.5, "gpus": 2}),
                _variant("int8", urls["int8"], cost={"usd_per_gpu_hour": 2.5, "gpus": 1}),
            ],
            "traffic": _SHORT,
            "load": {"users": 32, "spawn_rate": 64, "duration": "60s", "warmup": "5s"},
            "slos": [{"metric": "e2e", "stat": "p99", "max_ms": 2000}],
            "goodput": {"ttft_ms": 500, "tpot_ms": 50},
        }
    if (page, path) == ("nightly-ci.md", "perf/nightly.yaml"):  # in-cluster variants with their key; a 6 s night
        return {
            "name": "nightly",
            "seed": 42,
            "variants": [_variant(n, urls[n], api_key_env="VLLM_API_KEY") for n in ("baseline", "int8")],
            "traffic": _SHORT,
            "load": {
                "users": 16,
                "spawn_rate": 64,
                "duration": "6s",
                "warmup": "1s",
                "arrival": {"kind": "poisson", "rate": 8},
            },
            "run_trust": _TRUST,
        }
    if (page, path) == ("agents.md", "my-agents.yaml"):  # short agent tasks (~0.5 s) and a session SLO
        agent = {
            "steps": [2, 3],
            "tool_result_tokens": [20, 60],
            "tool_latency": ["0.05s", "0.1s"],
            "output_tokens": [10, 20],
            "subagents": {"share": 0.2, "count": [1, 1], "steps": [2, 2]},
            "compaction": None,
        }
        return {
            "name": "my-agents",
            "seed": 7,
            "variants": [_variant("vllm", urls["sweep"])],
            "traffic": {"mixes": [{"name": "short", "agent": agent}], "custom_mixes": _SHORT["custom_mixes"]},
            "load": {"users": 4, "spawn_rate": 1024, "duration": "60s", "warmup": "5s", "drain": "5s"},
            "slos": [{"metric": "session_duration", "stat": "p95", "max_ms": 5000}],
        }
    raise AssertionError(f"{page}: no stand-in for {path!r}: add one to {__file__}")


def _blocks(page: str) -> list[Block]:
    blocks = readme_blocks((ROOT / "docs" / page).read_text(encoding="utf-8"), MARKER)
    unknown = [(b.line, b.kind) for b in blocks if b.kind not in KINDS]
    assert blocks and unknown == [], f"{page}: blocks without a known `<!-- {MARKER}: … -->` marker: {unknown}"
    return blocks


def _given(b: Block) -> list[str]:
    if not b.arg:
        return []
    assert b.arg.startswith("given "), f"line {b.line}: {b.arg!r}"
    return b.arg.removeprefix("given ").split()


def _sweep_args(b: Block) -> str:
    """What the `loadgen` shim appends to the block's `loadgen sweep` (a block runs one sweep at most)."""
    sweeps = [c for c in block_commands(b.code) if c.startswith("loadgen sweep ")]
    assert len(sweeps) <= 1, f"line {b.line}: one sweep per block, or say here how each is shortened"
    if not sweeps:
        return ""
    search = re.search(r"--(concurrency-)?search\b", sweeps[0])
    return f"{BY_FILE.get(_file_of(sweeps[0]), DEFAULT)} {SWEEP_ARGS}" + (f" {SEARCH_ARGS}" if search else "")


def _run_args(b: Block) -> str:
    """What the `loadgen` shim appends to the block's `loadgen run` (RUN_ARGS, or its file's own)."""
    runs = [c for c in block_commands(b.code) if c.startswith("loadgen run ")]
    return RUN_BY_FILE.get(_file_of(runs[0]), RUN_ARGS) if runs else RUN_ARGS


def _sim_ports(code: str) -> list[int]:
    sims = [c for c in block_commands(code) if c.startswith("loadgen sim ")]
    return [int(v.rsplit(":", 1)[1]) for c in sims for v in re.findall(r"--variant (\S+)", c)]


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def _run_block(b: Block, page: str, work: Path, env: dict[str, str], log: Path) -> float:
    """Runs the block in `bash -e` in `work`, in a process group of its own: what it leaves running (a simulator
    it started with `&` and did not stop) is stopped after it. Returns its wall time."""
    for port in _sim_ports(b.code):
        deadline = time.monotonic() + 30  # the page's previous block's simulator may still be closing its ports
        while not _port_free(port):
            assert time.monotonic() < deadline, f"{page} line {b.line}: port {port} is taken; free it and run again"
            time.sleep(0.2)
    started = time.monotonic()
    with log.open("w", encoding="utf-8") as out:
        proc = subprocess.Popen(
            ["bash", "-e", "-o", "pipefail", "-c", b.code], cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT,
            text=True, start_new_session=True,
        )  # fmt: skip
        try:
            code = proc.wait(timeout=600)
        finally:
            _stop_group(proc.pid)
    took = time.monotonic() - started
    text = log.read_text(encoding="utf-8", errors="replace")
    assert code == 0, f"{page} line {b.line} exited {code}:\n{b.code}\n{text[-6000:]}"
    print(f"{page} line {b.line}: ran in {took:.1f} s")
    return took


def _stop_group(pgid: int) -> None:
    for sig, wait in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


def _file_of(command: str) -> str:
    return shlex.split(command)[2]


def _check_sweep(command: str, page: str, work: Path, since: float) -> None:
    """sweep.json of this block: every variant of the scenario with its knee, the steps as shortened (an agent
    scenario's steps with their sessions)."""
    doc = json.loads((work / "loadgen-report" / "sweep.json").read_text(encoding="utf-8"))
    assert (work / "loadgen-report" / "sweep.json").stat().st_mtime >= since, f"{page}: {command!r} wrote no sweep.json"
    scenario = yaml.safe_load((work / _file_of(command)).read_text(encoding="utf-8"))
    scenario_names = [v["name"] for v in scenario["variants"]]
    assert [v["name"] for v in doc["variants"]] == scenario_names, command
    key = "knee_concurrency" if doc["plan"]["by"] == "concurrency" else "knee_rate_per_s"
    assert all(v[key] is not None for v in doc["variants"]), (command, doc["variants"])
    step = re.search(r"--step-duration (\d+)s", BY_FILE.get(_file_of(command), DEFAULT))
    assert step and doc["step_duration_s"] == float(step.group(1)) and doc["exit_code"] == 0, command
    if "search" in doc["plan"]["kind"]:
        assert all(len(v["steps"]) <= 2 for v in doc["variants"]), command
    if any(m.get("agent") is not None for m in scenario["traffic"]["mixes"]):
        assert all(s.get("sessions") for v in doc["variants"] for s in v["steps"]), command
    if "--required-rate" in command:  # the cheapest variant for that rate, priced from the steps around it
        assert doc["cost"]["serving"] and doc["cost"]["cheapest"] in scenario_names, (command, doc["cost"])
    for name in ("sweep.md", "sweep.html"):
        assert (work / "loadgen-report" / name).stat().st_mtime >= since, f"{page}: {command!r} wrote no {name}"


def _check_run(command: str, page: str, work: Path) -> None:
    """The run's report: every variant with a price has its Cost and energy figures, good tokens with `goodput`."""
    report = json.loads((work / "loadgen-report" / "report.json").read_text(encoding="utf-8"))
    scenario = yaml.safe_load((work / _file_of(command)).read_text(encoding="utf-8"))
    assert report["exit_code"] == 0 and report["scenario"] == scenario["name"], command
    priced = {v["name"] for v in scenario["variants"] if "cost" in v}
    costs = {
        v["name"]: (v.get("cost_energy") or {}).get("cost") or {} for v in report["variants"] if v["name"] in priced
    }
    assert all(c.get("usd_per_1m_output_tokens") for c in costs.values()), (command, costs)
    if "goodput=" in command:
        assert all(c.get("usd_per_1m_good_tokens") is not None for c in costs.values()), (command, costs)
    assert "Cost and energy" in (work / "loadgen-report" / "report.md").read_text(encoding="utf-8"), command
    agent_mixes = [
        m["name"] for m in scenario["traffic"]["mixes"] if m.get("agent") is not None or m["name"] == "agent"
    ]
    for v in report["variants"] if agent_mixes else ():  # an agent scenario: its tasks judged, none cut
        sessions = v["sessions"][agent_mixes[0]]
        assert sessions["completed"] > 0 and "cut" not in sessions["fates"], (command, v["name"], sessions)


@contextmanager
def _cluster(tmp: Path, env: dict[str, str]) -> Iterator[tuple[FakeCluster, LocalPods]]:
    tmp.mkdir()
    with fake_api(tmp, namespace="default") as (cluster, kubeconfig):
        cluster.strict_namespaces = True
        pods = LocalPods(cluster, tmp / "pods")
        env["KUBECONFIG"] = str(kubeconfig)  # what the CI runner holds, and all it holds of the cluster
        try:
            yield cluster, pods
        finally:
            pods.close()


@dataclass
class _Before:
    """What the fake cluster held and had run before a `loadgen k8s run`."""

    objects: set[tuple[str, str, str]]
    pods: int

    @classmethod
    def of(cls, cluster: FakeCluster | None, pods: LocalPods | None) -> _Before:
        return cls(set(cluster.objects) if cluster else set(), len(pods.pods) if pods else 0)


def _check_k8s_run(command: str, work: Path, cluster: FakeCluster, pods: LocalPods, before: _Before) -> None:
    """The run's pods ran the chart's commands here and ended well, the workers with the key of the Secret the
    page's setup made; the reports came out; the run's objects are gone, what was there before is not."""
    argv = shlex.split(command)
    ns, workers = argv[argv.index("-n") + 1], int(argv[argv.index("--workers") + 1])
    out = work / argv[argv.index("--report-dir") + 1]
    ran = pods.pods[before.pods :]
    assert pods.errors == [], pods.errors
    pods.wait(ran)  # the workers end with their master
    assert sorted(p.job.rsplit("-", 1)[1] for p in ran) == ["master"] + ["worker"] * workers, [p.name for p in ran]
    assert all(p.ns == ns and set(p.exit_codes.values()) == {0} for p in ran), [(p.name, p.exit_codes) for p in ran]
    for spec in (argv[i + 1] for i, word in enumerate(argv) if word == "--secret"):
        var = spec.split("=", 1)[0]
        assert {p.env["worker"].get(var) for p in ran if p.job.endswith("-worker")} == {API_KEY}, spec
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["exit_code"] == 0 and {"report.md", "report.html"} <= {p.name for p in out.iterdir()}
    assert len(report["run"]["workers"]) == workers, report["run"]["workers"]
    left = {key for key in cluster.objects if key[0] != "pods"}
    assert left == before.objects, sorted(left ^ before.objects)


@pytest.mark.parametrize("page", PAGES)
def test_every_block_of_the_task_page_runs_as_pasted(page: str, tmp_path: Path) -> None:
    blocks = _blocks(page)
    # One-time setup first, then the page's order.
    blocks = [b for b in blocks if b.kind == "cluster-setup"] + [b for b in blocks if b.kind != "cluster-setup"]
    work = tmp_path / "work"
    work.mkdir()
    (work / "loadgen").symlink_to(ROOT / "loadgen")  # `loadgen/examples/…` as from the root of a clone
    env = shell_env(tmp_path, test_args={"run": RUN_ARGS})
    env["VLLM_API_KEY"] = API_KEY
    took: dict[int, float] = {}
    with ExitStack() as stack:
        sim = None
        if any(_given(b) for b in blocks):
            sim = stack.enter_context(start_sim_process(SIM, profile_changes=SIM_SEQS))
        cluster = pods = None
        if any(b.kind.startswith("cluster") for b in blocks):
            cluster, pods = stack.enter_context(_cluster(tmp_path / "cluster", env))
        for i, b in enumerate(blocks):
            block_env = env | {"LOADGEN_TEST_ARGS_sweep": _sweep_args(b), "LOADGEN_TEST_ARGS_run": _run_args(b)}
            commands = block_commands(b.code)
            for path in _given(b):
                target = work / path
                target.parent.mkdir(parents=True, exist_ok=True)
                if path.endswith(".json"):  # a report the reader committed: the block's own run's, once first
                    (first,) = [c for c in commands if c.startswith("loadgen k8s run ")]
                    before = _Before.of(cluster, pods)
                    _run_block(Block(b.kind, "", first, b.line), page, work, block_env, tmp_path / f"given-{i}.log")
                    assert cluster is not None and pods is not None
                    _check_k8s_run(first, work, cluster, pods, before)
                    out = work / shlex.split(first)[shlex.split(first).index("--report-dir") + 1]
                    shutil.copy(out / "report.json", target)
                    shutil.rmtree(out)
                else:
                    assert sim is not None
                    urls = {name: sim.base_url(name) for name in sim.ports}
                    target.write_text(yaml.safe_dump(_stand_in(page, path, urls), sort_keys=False), encoding="utf-8")
            before = _Before.of(cluster, pods)
            since = time.time()
            took[b.line] = _run_block(b, page, work, block_env, tmp_path / f"block-{i}-line-{b.line}.log")
            for command in commands:
                if command.startswith("loadgen sweep "):
                    _check_sweep(command, page, work, since)
                elif command.startswith("loadgen run "):
                    _check_run(command, page, work)
                elif command.startswith("loadgen k8s run "):
                    assert cluster is not None and pods is not None
                    _check_k8s_run(command, work, cluster, pods, before)
                elif command.startswith("kubectl -n ") and " create secret generic " in command:
                    assert cluster is not None
                    ns, name = shlex.split(command)[2], shlex.split(command)[6]
                    secret = cluster.objects[("secrets", ns, name)]  # --from-literal=token="$VLLM_API_KEY"
                    assert {k: base64.b64decode(v).decode() for k, v in secret["data"].items()} == {"token": API_KEY}
    assert sorted(took) == sorted(b.line for b in blocks)
    print(f"{page}: {sum(took.values()):.1f} s in all")
