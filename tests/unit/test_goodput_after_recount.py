"""Goodput is judged after the scenario's tokenizer recounts a reply's chunks: TPOT (and so a TPOT bound) depends
on the per-chunk counts. Runs the worker's real `Runtime.record` (it imports Locust: a fresh interpreter) with a
stand-in tokenizer that reads one token per character."""

from __future__ import annotations

from tests.fresh_interpreter import run_fresh

_CHECK = r"""
import json, math
from array import array
from types import SimpleNamespace

from loadgen.config.scenario import parse_scenario
from loadgen.locust_plugin.runtime import Runtime
from loadgen.measure.records import RequestRecord, TokenSource

SC = parse_scenario(
    "name: g\nvariants: [{name: a, base_url: 'http://127.0.0.1:1', model: m}]\ngoodput: {tpot_ms: 50}\nslos: []\n"
)
rt = Runtime(SimpleNamespace(runner=None), SC, None)
rt.started, rt.warmup_end, rt.run = True, -math.inf, 1
rt._tokenizer = SimpleNamespace(token_ends=lambda text: list(range(1, len(text) + 1)))
# Three chunks of four characters 100 ms apart; no counts from the server, per chunk or in total.
rec = RequestRecord("a-1", "a", "chat", sent=10.0)
rec.chunk_times, rec.chunk_tokens = array("d", [10.1, 10.2, 10.3]), array("l", [1, 1, 1])
rec.output_text, rec.chunk_text_ends = "aaaabbbbcccc", array("q", [4, 8, 12])
rec.done, rec.token_source = 10.3, TokenSource.ONE_PER_CHUNK
rt.record(rec)
g = rt.aggregate.groups[("a", "chat")]
print(json.dumps({"tpot_ms": rec.tpot * 1e3, "source": rec.token_source, "misses": rec.goodput_misses,
                  "good": g.goodput_ok}))
"""


def test_a_tpot_bound_is_judged_on_the_recounted_chunks() -> None:
    out = run_fresh(_CHECK)
    # Recounted: 8 tokens after the first chunk's 4 in 200 ms, 25 ms each (one per chunk would say 100 ms, a miss).
    assert out["source"] == "tokenizer" and abs(out["tpot_ms"] - 25.0) < 1e-6
    assert out["misses"] == [] and out["good"] == 1
