"""`loadgen k8s run --image`: from the flag to every container of the objects the run creates. Without it, the chart's
default (values.yaml image.repository, tagged with the chart's appVersion: the image a release publishes), read from
the chart's packaged render, not written down a second time."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from loadgen.cli import main
from tests.k8s.fake_api import fake_api
from tests.k8s.test_run import Run

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts/loadgen"
DOC = {"variants": [{"name": "a", "base_url": "http://a:8000", "model": "m"}], "load": {"duration": "1s"}}


def _default_image() -> str:
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    assert values["image"]["tag"] == "" and values["image"]["digest"] == ""
    return f"{values['image']['repository']}:{chart['appVersion']}"


@pytest.mark.parametrize(
    ("flags", "want"),
    [
        ([], None),  # the chart's default
        (["--image", "registry.example:5000/team/loadgen"], "registry.example:5000/team/loadgen:{version}"),
        (["--image", "registry.example/loadgen:dev"], "registry.example/loadgen:dev"),
        (["--image", "registry.example/loadgen@sha256:" + "a" * 64], "registry.example/loadgen@sha256:" + "a" * 64),
    ],
)
def test_every_container_of_the_run_gets_the_image(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], want: str | None
) -> None:
    version = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))["appVersion"]
    expected = want.format(version=version) if want else _default_image()
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(DOC), encoding="utf-8")
    with fake_api(tmp_path) as (c, kubeconfig):
        Run(c, exit_code=0)  # the run's pods, as test_run.py plays them
        argv = ["k8s", "run", str(scenario), "--kubeconfig", str(kubeconfig), "--name", "img", "--interval", "0.01"]
        code = main([*argv, "--report-dir", str(tmp_path / "out"), *flags])
        jobs = [call.body for call in c.calls if call.method == "POST" and call.path.endswith("/jobs")]
    images = [
        ctr["image"]
        for job in jobs
        for ctr in [
            *job["spec"]["template"]["spec"].get("initContainers", []),
            *job["spec"]["template"]["spec"]["containers"],
        ]
    ]
    assert code == 0
    assert len(jobs) == 2 and len(images) >= 3  # master (validate + locust) and workers
    assert set(images) == {expected}
    assert f"of {expected}" in capsys.readouterr().err
