"""A sequential scenario (`load.sequential`) on the chart: headless, the master runs the variants one after another
(locust_plugin/phases.py; tests/integration/test_sequential_cluster.py runs its commands); in mode ui, whose web UI
starts one run with every variant at once, the release is refused at render time, saying what to do instead — not
by a master pod exiting 2 at its start."""

from __future__ import annotations

from pathlib import Path

from tests.k8s_chart.conftest import helm_render

SCENARIO = {
    "variants": [{"name": n, "base_url": f"http://vllm-{n}:8000", "model": "m"} for n in ("a", "b")],
    "load": {"users": 1, "sequential": True, "sequential_pause": "30s"},
}


def test_headless_renders_and_ui_refuses_up_front(tmp_path: Path) -> None:
    for d in ("headless", "ui", "ui-one"):
        (tmp_path / d).mkdir()
    code, out, err = helm_render({"mode": "headless", "scenario": SCENARIO}, tmp_path / "headless")
    assert code == 0, err
    kinds = {o["kind"] for o in out["created"]}
    assert {"Job", "ConfigMap"} <= kinds
    code, _, err = helm_render({"mode": "ui", "scenario": SCENARIO}, tmp_path / "ui")
    assert code != 0 and "scenario load.sequential: mode ui (the web UI)" in err and "mode: headless" in err, err
    # One variant has nothing to run one after another: the web UI runs it.
    one = {**SCENARIO, "variants": SCENARIO["variants"][:1]}
    code, _, err = helm_render({"mode": "ui", "scenario": one}, tmp_path / "ui-one")
    assert code == 0, err
