"""Quality beside speed against the simulator: `int8` perturbs a known share of its greedy replies' tokens
(`perturb_share`, drawn per request from the seed), and the agreement the report measures from the replies it kept
must hold the true share, counted from the simulator's own truth log over the same first k positions; the accuracy
against a dataset's reference answers must be the count of replies the truth log left unperturbed."""

from __future__ import annotations

import json
from pathlib import Path

from loadgen.sim.framings import greedy_offset, token_text
from loadgen.sim.launch import start_sim_process
from loadgen.sim.truth import load_truth

from .harness import read_records, read_report, run_loadgen, write_scenario

FIRST_K = 32


def test_measured_agreement_holds_the_simulator_s_true_share(tmp_path: Path) -> None:
    truth_log = tmp_path / "truth.jsonl"
    greedy = {"temperature": 0, "seed": 1}
    with start_sim_process(
        ["baseline=baseline", "int8=int8"], truth_log=truth_log, profile_changes={"int8": {"perturb_share": "0.05"}}
    ) as sim:
        scenario = write_scenario(
            tmp_path / "s.yaml",
            {n: {"base_url": sim.base_url(n), "extra_body": greedy} for n in ("baseline", "int8")},
            load={"users": 48, "duration": "4s", "warmup": "1s"},
            quality={"first_k": FIRST_K},
        )
        proc = run_loadgen(scenario, "--workers", "1", "--raw-records", str(tmp_path / "raw"))
    assert proc.returncode in (0, 3), proc.stdout + proc.stderr
    report = read_report(tmp_path / "report")
    q = report["quality"]
    assert q["method"]["tokens"] == "whitespace" and q["method"]["first_k"] == FIRST_K
    entry = next(e for e in q["entries"] if e["variant"] == "int8" and e["mix"] == "*")
    # The truth: of the first k positions of every greedy reply int8 finished, the share it did not perturb.
    perturbed = compared = 0
    for t in load_truth(truth_log, "int8").values():
        if t.greedy and t.finish is not None and not t.aborted:
            n = min(FIRST_K, t.output_tokens)
            compared += n
            perturbed += sum(1 for i in t.perturbed if i < n)
    assert compared > 1000, compared
    true_agreement = 1.0 - perturbed / compared
    assert abs(true_agreement - 0.95) < 0.02  # the knob, up to the draw
    a = entry["agreement"]
    assert entry["pairs"] >= 100, entry
    assert a["ci_low"] <= true_agreement <= a["ci_high"], (a, true_agreement)
    assert a["ci_high"] - a["ci_low"] < 0.03, a
    # Exactly: the pairs kept (all of them, under the sample's cap) are the requests both variants completed in the
    # window, and their truth is the measured figure to the report's rounding.
    rows = [
        r for r in read_records(tmp_path / "raw") if r["error"] is None and not r["warmup"] and not r["cut_by_stop"]
    ]
    keys = {
        v: {r["id"].split(f"-{v}-", 1)[1]: r["id"] for r in rows if r["variant"] == v} for v in ("baseline", "int8")
    }
    common = keys["baseline"].keys() & keys["int8"].keys()
    assert entry["pairs"] == len(common) < 500
    truth = load_truth(truth_log, "int8")
    sample = [truth[keys["int8"][k]] for k in common]
    n_of = [min(FIRST_K, t.output_tokens) for t in sample]
    exact = 1.0 - sum(sum(1 for i in t.perturbed if i < n) for t, n in zip(sample, n_of, strict=True)) / sum(n_of)
    assert a["value"] == round(exact, 4) and entry["positions"] == sum(n_of)
    # Unperturbed replies are the baseline's exactly, so exact matches are the replies with no perturbed position.
    assert 0.0 < entry["exact_match"]["value"] < 1.0
    speed = entry["speedup_e2e_p50"]
    assert speed is not None and speed > 1.2  # int8's steps cost x0.6
    assert entry["headline"].startswith(f"int8: {speed:.2f}× faster")
    md = (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    assert entry["headline"] in md


def test_accuracy_against_reference_answers_is_the_truth_log_s(tmp_path: Path) -> None:
    # Each row's reference is the simulator's greedy reply to its prompt (a function of the prompt: the baseline
    # answers every row right); int8 perturbs a fifth of its tokens, so its reply is right exactly when the truth
    # log records no perturbed position in it.
    rows, n_tokens = [], 4
    for k in range(30):
        prompt = f"question {k} " + " ".join(["about"] * (k % 7 + 3))
        reply = token_text(greedy_offset(prompt.split())[0], 0, n_tokens)
        rows.append({"prompt": prompt, "output_tokens": n_tokens, "expected": reply, "match": "exact"})
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    truth_log = tmp_path / "truth.jsonl"
    variant = {"dialect": "openai-completions", "extra_body": {"temperature": 0}}
    with start_sim_process(
        ["baseline=baseline", "int8=int8"], truth_log=truth_log, profile_changes={"int8": {"perturb_share": "0.2"}}
    ) as sim:
        scenario = write_scenario(
            tmp_path / "s.yaml",
            {n: {"base_url": sim.base_url(n), **variant} for n in ("baseline", "int8")},
            traffic={"mixes": [{"name": "dataset"}], "dataset": {"path": str(tmp_path / "rows.jsonl")}},
            load={"users": 8, "duration": "3s"},
            quality={},
        )
        proc = run_loadgen(scenario, "--workers", "0", "--raw-records", str(tmp_path / "raw"))
    assert proc.returncode in (0, 3), proc.stdout + proc.stderr
    report = read_report(tmp_path / "report")
    by = {(e["variant"], e["mix"]): e for e in report["quality"]["accuracy"]}
    assert set(by) == {(v, m) for v in ("baseline", "int8") for m in ("*", "dataset")}
    judged = [r for r in read_records(tmp_path / "raw") if r["error"] is None and not r["cut_by_stop"]]
    base = by[("baseline", "*")]
    assert base["judged"] == base["right"] == sum(r["variant"] == "baseline" for r in judged) > 20
    assert base["accuracy"]["value"] == 1.0
    truth = load_truth(truth_log, "int8")
    mine = [truth[r["id"]] for r in judged if r["variant"] == "int8"]
    e = by[("int8", "*")]
    assert e["judged"] == len(mine) and e["right"] == sum(not t.perturbed for t in mine)
    assert 0.0 < e["accuracy"]["value"] < 1.0 and e["accuracy"]["ci_low"] < e["accuracy"]["value"]
