"""Every example scenario's own commands (its opening comment: tests/commands.py reads them), run as written.

From a folder where `loadgen/examples/…` resolves as in a clone, with `loadgen` this checkout's:

- `loadgen sim …`: started as written (a terminal of its own), until every `--variant` port serves `/v1/models`;
- `loadgen run loadgen/examples/X.yaml …` (an environment prefix included): run against it, shortened by the flags
  the `loadgen` shim appends (RUN_ARGS: 1 s, no warm-up, 2 s to finish what is in flight, one process, no printed
  report, looser run-trust bounds); a verdict (0 or 1: a 1 s run may breach an SLO the example breaches by design),
  with requests sent to every variant of the example;
- `loadgen validate loadgen/examples/X.yaml`: exit 0;
- `pip install -e ".[extra]"`: the extra exists and what it installs imports here;
- `docker run … -p 4318:4318 …` (an OTLP receiver): stood in for by the tests' loopback receiver on that port, which
  must then have received the run's summary;
- `vllm serve …`: not run: it needs a GPU and the model's weights; the simulator command beside it is run instead.

Any other command fails: add what stands in for it. ~80 s for the ten on 2 cores.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.commands import DIST, LOOSE_TRUST, ROOT, comment_commands, shell_env
from tests.otlp_receiver import otlp_receiver
from tests.serving import serving_process

EXAMPLES = sorted((ROOT / "loadgen" / "examples").glob("*.yaml"))
RUN_ARGS = f"--duration 1s --set load.warmup=0s --set load.drain=2s --workers 0 --quiet {LOOSE_TRUST}"
_ENV = r"""(\w+=(?:'[^']*'|"[^"]*"|\S+) )*"""  # VAR=value before a command
NOT_RUN = {"vllm serve ": "needs a GPU and the model's weights (the simulator stands in, as the example says)"}


def _ports(sim: str) -> list[int]:
    return [int(v.rsplit(":", 1)[1]) for v in re.findall(r"--variant (\S+)", sim)]


def _serves(port: int) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as r:
        return bool(r.status == 200)


def _check_extra(cmd: str) -> None:
    from importlib import metadata

    m = re.fullmatch(r'pip install -e "\.\[(\w+)\]"', cmd)
    assert m, f'{cmd!r}: an extra is installed as `pip install -e ".[name]"`'
    assert m.group(1) in (metadata.metadata(DIST).get_all("Provides-Extra") or []), cmd


def _run(cmd: str, work: Path, env: dict[str, str], name: str) -> None:
    proc = subprocess.run(["bash", "-c", cmd], cwd=work, env=env, capture_output=True, text=True, timeout=180)
    out = proc.stdout[-3000:] + proc.stderr[-3000:]
    if " validate " in cmd:
        assert proc.returncode == 0, f"{name}: {cmd!r} exited {proc.returncode}\n{out}"
        return
    assert proc.returncode in (0, 1), f"{name}: {cmd!r} exited {proc.returncode}\n{out}"
    scenario = yaml.safe_load((ROOT / cmd.split("loadgen run ", 1)[1].split()[0]).read_text(encoding="utf-8"))
    report_dir = work / scenario.get("report_dir", "loadgen-report")
    report = json.loads((report_dir / "report.json").read_text(encoding="utf-8"))
    assert [v["name"] for v in report["variants"]] == [v["name"] for v in scenario["variants"]], (name, out)
    counts = ("requests", "cut_by_stop", "cancelled")
    sent = {v["name"]: sum(v["overall"][k] for k in counts) for v in report["variants"]}
    assert all(sent.values()), (name, sent)


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_the_examples_commands_run_as_written(example: Path, tmp_path: Path) -> None:
    commands = comment_commands(example.read_text(encoding="utf-8"))
    assert any(re.match(rf"{_ENV}loadgen (run|validate) loadgen/examples/{example.name}\b", c) for c in commands)
    work = tmp_path / "work"
    work.mkdir()
    (work / "loadgen").symlink_to(ROOT / "loadgen")  # `loadgen/examples/…` as from the root of a clone
    env = shell_env(tmp_path, test_args=RUN_ARGS)
    sims = [c for c in commands if c.startswith("loadgen sim ")]
    receiver = next((c for c in commands if c.startswith("docker run ")), None)
    others = [c for c in commands if c not in sims and c != receiver]
    assert len(sims) <= 1, sims
    for cmd in others:
        if cmd.startswith("pip install "):
            _check_extra(cmd)
    runs = [c for c in others if not c.startswith(("pip install ", *NOT_RUN))]
    assert runs and all(re.match(rf"{_ENV}loadgen (run|validate) ", c) for c in runs), runs
    if receiver is not None:
        assert "4318:4318" in receiver, f"{receiver!r}: only an OTLP/HTTP receiver on :4318 is stood in for"
    with (
        otlp_receiver(4318) if receiver else _nothing() as otlp,
        serving_process(
            ["bash", "-c", f"exec {sims[0]}"], tmp_path / "sim.log",
            lambda: all(_serves(p) for p in _ports(sims[0])), f"{example.name}: {sims[0]!r}", env=env,
        ) if sims else _nothing(),
    ):  # fmt: skip
        for cmd in runs:
            _run(cmd, work, env, example.name)
    if receiver is not None:
        _, received = otlp
        # The run's summary always; spans only for the sampled tenth of a 1 s run's few requests, maybe none.
        assert received.points, f"{example.name}: nothing reached the OTLP receiver"


class _nothing:  # noqa: N801 (a stand-in for a context manager: nothing to start)
    def __enter__(self) -> tuple[None, None]:
        return None, None

    def __exit__(self, *_: object) -> None:
        return None


def test_the_commands_of_a_comment_are_read_as_written() -> None:
    text = (
        "# Title\n#\n#   loadgen sim --variant a:8001 \\\n#     --set a:max_num_seqs=4\n#   loadgen run x.yaml"
        "   # a comment\n#\n# prose `loadgen run y.yaml`\nname: x\n#   loadgen run after.yaml\n"
    )
    assert comment_commands(text) == ["loadgen sim --variant a:8001 --set a:max_num_seqs=4", "loadgen run x.yaml"]
    assert shlex.split(comment_commands(text)[0])[:2] == ["loadgen", "sim"]
