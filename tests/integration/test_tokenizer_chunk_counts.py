"""Per-chunk token counts from the scenario's tokenizer, end to end (`loadgen run`, the recorder counts each reply),
against servers that put several tokens in a chunk and stream no counts, graded by their ground-truth logs.

The tokenizer: a tokenizer.json built here with the `tokenizers` library, a word-level vocabulary in which every
word the servers emit (the simulator's vocabulary, bench/server.py's words) and every loadgen prompt word is one
token with and without its leading space (GPT-2's byte-level pre-tokenizer, so " the" is the token "Ġthe"). Both
servers emit text as one such word per token, so this tokenizer is exactly theirs: the servers are left as they
are, and the test says what a real deployment has when the scenario names the model's own tokenizer.

- bench/server.py, 4 tokens per chunk at 10 ms per token (a chunk every 40 ms), usage only at the end: per-token
  ITL p50 ~10 ms (one token per chunk would say 40), TPOT within 1 % of the truth, every chunk counted 4.
- the simulator's `spec-decode` profile (speculative decoding: 1 to 4 tokens per chunk, varying): every chunk's
  count equals the truth's, where spreading the usage total evenly (what loadgen does without a tokenizer, tested
  in test_protocol_usage_spread.py) would not.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, models, pre_tokenizers

from loadgen.sim.framings.base import _VOCAB
from loadgen.sim.launch import start_sim_process
from loadgen.sim.truth import TruthRequest, load_truth
from loadgen.traffic.words import WORDS

from .harness import read_records, read_report, run_loadgen, serving_bench, write_scenario

_ROOT = Path(__file__).resolve().parents[2]
_K, _ITL_MS, _TOKENS = 4, 10.0, 128


def _bench_words() -> list[str]:
    sys.path.insert(0, str(_ROOT))
    try:
        from bench.server import _WORDS
    finally:
        sys.path.remove(str(_ROOT))
    return list(_WORDS)


def _write_tokenizer(path: Path) -> Path:
    words = sorted({*WORDS, *(w.strip() for w in _VOCAB), *_bench_words()})
    vocab = {"[UNK]": 0}
    for w in words:
        vocab.setdefault(w, len(vocab))
        vocab.setdefault("Ġ" + w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.save(str(path))
    return path


def _truth_tpot(tr: TruthRequest) -> float:
    return (tr.chunk_times[-1] - tr.chunk_times[0]) / (sum(tr.chunk_tokens) - tr.chunk_tokens[0])


def _finished(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["error"] is None and not r["cut_by_stop"]]


def test_tokenizer_counts_give_per_token_itl_at_4_tokens_per_chunk(tmp_path: Path) -> None:
    tokenizer = _write_tokenizer(tmp_path / "tokenizer.json")
    truth_path = tmp_path / "truth.jsonl"
    args = ("--k", str(_K), "--itl-ms", str(_ITL_MS), "--force-output-tokens", str(_TOKENS), "--no-spin")
    with serving_bench(tmp_path, *args, "--truth", str(truth_path)) as (port, _):
        variant = {"base_url": f"http://127.0.0.1:{port}", "continuous_usage_stats": False}
        scenario = write_scenario(
            tmp_path / "s.yaml", {"bench": variant}, tokenizer=str(tokenizer), load={"users": 6, "duration": "3s"}
        )
        run = run_loadgen(scenario, "--workers", "0", "--raw-records", str(tmp_path / "raw"))
    # (the server wrote its truth log at SIGTERM, on the way out)
    assert run.returncode == 0, run.stdout + run.stderr
    truth = load_truth(truth_path)
    rows = _finished(read_records(tmp_path / "raw"))
    assert len(rows) >= 12
    tpot_err = []
    for r in rows:
        tr = truth[r["id"]]
        assert tr.chunk_tokens == [_K] * (_TOKENS // _K)
        assert r["token_source"] == "tokenizer" and r["output_tokens"] == _TOKENS
        assert r["chunk_tokens"] == tr.chunk_tokens, r["id"]
        tpot_err.append(r["tpot"] / _truth_tpot(tr) - 1)
    report = read_report(tmp_path / "report")
    overall = report["variants"][0]["overall"]
    itl_p50 = overall["metrics_ms"]["itl"]["p50"]
    assert set(overall["token_count_source"]) == {"tokenizer"}
    worst = max(abs(e) for e in tpot_err)
    print(f"bench k=4: ITL p50 {itl_p50:.2f} ms, TPOT error max {worst * 100:.3f} % over {len(rows)} requests")
    assert 9.5 < itl_p50 < 10.5
    assert worst < 0.01
    md = (tmp_path / "report" / "report.md").read_text()
    assert "token counts `tokenizer`: counted by the scenario's tokenizer" in md


def test_tokenizer_counts_match_the_truth_chunk_by_chunk_with_speculative_decoding(tmp_path: Path) -> None:
    tokenizer = _write_tokenizer(tmp_path / "tokenizer.json")
    truth_path = tmp_path / "truth.jsonl"
    with start_sim_process(["spec=spec-decode"], truth_log=truth_path) as sim:
        variant = {"base_url": sim.base_url("spec"), "continuous_usage_stats": False}
        scenario = write_scenario(
            tmp_path / "s.yaml", {"spec": variant}, tokenizer=str(tokenizer), load={"users": 8, "duration": "3s"}
        )
        run = run_loadgen(scenario, "--workers", "0", "--raw-records", str(tmp_path / "raw"))
    assert run.returncode == 0, run.stdout + run.stderr
    truth = load_truth(truth_path)
    rows = _finished(read_records(tmp_path / "raw"))
    assert len(rows) >= 20
    spread_wrong = 0
    tpot_err = []
    for r in rows:
        tr = truth[r["id"]]
        assert r["token_source"] == "tokenizer"
        assert r["chunk_tokens"] == tr.chunk_tokens, r["id"]
        assert r["output_tokens"] == sum(tr.chunk_tokens)
        n, total = len(tr.chunk_tokens), sum(tr.chunk_tokens)
        base, extra = divmod(total, n)
        spread_wrong += [base + (i >= n - extra) for i in range(n)] != tr.chunk_tokens
        tpot_err.append(r["tpot"] / _truth_tpot(tr) - 1)
    assert len(set(c for r in rows for c in r["chunk_tokens"])) >= 3  # the counts vary chunk to chunk
    print(
        f"spec-decode: {len(rows)} requests counted chunk by chunk as the truth; an even spread would have "
        f"miscounted {spread_wrong}; TPOT error median {statistics.median(tpot_err) * 100:.3f} %"
    )
    assert spread_wrong > len(rows) // 2
    sources = read_report(tmp_path / "report")["variants"][0]["overall"]["token_count_source"]
    assert set(sources) == {"tokenizer"}
