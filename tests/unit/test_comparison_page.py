"""docs/comparison.md says what bench/results/peers.json holds and nothing else: scripts/gen-docs.py renders it with
bench/comparison_page.py (tests/unit/test_docs_generated.py holds the committed page current); here, that the figures
and the gaps (a measurement a tool cannot give) come through as the file has them."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
import pytest

from bench.comparison_page import NAMES, RESULTS, render


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return orjson.loads(RESULTS.read_bytes())


def test_the_kept_file_holds_the_three_peers_and_loadgen_on_one_machine(doc: dict[str, Any]) -> None:
    res = doc["results"]
    assert set(res["tools"]) == {"loadgen", "guidellm", "inference-perf", "aiperf"}
    assert all(info["version"] not in ("", "unknown") for info in res["tools"].values())
    fidelity = [r for r in res["runs"] if r["part"] == "fidelity"]
    assert {(r["tool"], r["k"]) for r in fidelity} == {(t, k) for t in res["tools"] for k in (1, 4)}
    assert all(r["cmd"] for r in res["runs"])  # the exact command of every run
    assert doc["machine"]["cpu_model"] and set(res["load_average"]) >= {"fidelity", "capacity", "arrivals"}
    assert res["loadgen_capacity"]["best"].keys() == {"k1", "k4"}


def test_every_figure_on_the_page_is_the_files(doc: dict[str, Any]) -> None:
    page = render(doc)
    assert page == Path(__file__).resolve().parents[2].joinpath("docs", "comparison.md").read_text(encoding="utf-8")
    for tool, info in doc["results"]["tools"].items():
        assert f"| {NAMES[tool]} | {info['version']} |" in page
    for r in doc["results"]["runs"]:
        if r["part"] == "fidelity" and r.get("ok"):
            usage, p50, p99 = "yes" if r["usage"] else "no", r["added_ttft_p50"], r["added_ttft_p99"]
            assert f"| {r['k']} | {NAMES[r['tool']]} | {usage} | {p50:,.2f} / {p99:,.2f} |" in page


def test_a_measurement_a_tool_cannot_give_is_said_so(doc: dict[str, Any]) -> None:
    d = copy.deepcopy(doc)
    run = next(r for r in d["results"]["runs"] if r["part"] == "fidelity" and r["tool"] == "aiperf" and r.get("ok"))
    run["chunk_timings_kept"] = False
    failed = next(r for r in d["results"]["runs"] if r["part"] == "fidelity" and r["tool"] == "inference-perf")
    failed.update(ok=False, note="no summary (exit 1)")
    page = render(d)
    assert "not kept by the tool" in page and "failed: no summary (exit 1)" in page
    d["results"]["quiet"], d["results"]["note"] = False, "the load average was 2.5"
    assert '!!! warning "Not a quiet machine"' in render(d)
