"""Tokenizers in the bench: a small local tokenizer folder for the peers, and the cost of exact-length prompts.

`ensure_tokenizer`: a word-level `tokenizer.json` (whitespace split; the bench server's words and loadgen's prompt
words, everything else `[UNK]`) plus a `tokenizer_config.json`, written as plain JSON: no download, no `tokenizers`
import. Each output word of the bench server is one token, so a peer that tokenizes the streamed text counts right.

`python -m bench.tokenizer [MODEL.gguf | tokenizer.json | folder]`: what drawing one request costs on the event
loop (`RequestSampler.spec_at`, and with the openai-chat body built), µs per request at p50 / p99 / max over 20,000
requests of the built-in chat, rag and code mixes, with prompts exact in the model's tokens and, for comparison,
with the word approximation. Default model: the SmolLM2 GGUF that scripts/install-llama-server.sh installs. Also
the one-off costs (loading the tokenizer, building the sampler) and the chat template overhead. Writes
bench/results/tokenizer.json.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from pathlib import Path

import orjson

from bench.server import _WORDS
from loadgen.traffic.words import WORDS

SPECIAL = ["[UNK]", "<s>", "</s>", "[PAD]"]


def ensure_tokenizer(directory: Path) -> Path:
    tok = directory / "tokenizer.json"
    if tok.exists():
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    vocab: dict[str, int] = {}
    for w in [*SPECIAL, *_WORDS, *WORDS]:
        for form in (w, w.capitalize(), w.upper()):
            vocab.setdefault(form, len(vocab))
    added = [
        {
            "id": vocab[s],
            "content": s,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for s in SPECIAL
    ]
    doc = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"},
    }
    tok.write_bytes(orjson.dumps(doc))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": "[UNK]",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "pad_token": "[PAD]",
        "model_max_length": 1_000_000,
        "clean_up_tokenization_spaces": False,
    }
    (directory / "tokenizer_config.json").write_bytes(orjson.dumps(config, option=orjson.OPT_INDENT_2))
    (directory / "config.json").write_bytes(orjson.dumps({"model_type": "llama", "vocab_size": len(vocab)}))
    return directory


def _percentiles(samples_ns: list[int]) -> dict[str, float]:
    ordered = sorted(samples_ns)
    return {
        "p50_us": ordered[len(ordered) // 2] / 1e3,
        "p99_us": ordered[int(len(ordered) * 0.99)] / 1e3,
        "max_us": ordered[-1] / 1e3,
        "mean_us": statistics.fmean(ordered) / 1e3,
    }


def bench_exact_prompts(model: Path, n: int = 20_000) -> dict[str, object]:
    from loadgen.protocol.dialects import get_dialect
    from loadgen.traffic.mixes import builtin_mixes
    from loadgen.traffic.sampler import RequestSampler
    from loadgen.traffic.tokenizer import load_tokenizer

    t0 = time.perf_counter()
    tok = load_tokenizer(model)
    load_s = time.perf_counter() - t0
    registry = builtin_mixes()
    mixes = {name: registry.get(name) for name in registry.names()}
    weights = dict.fromkeys(mixes, 1.0)
    t0 = time.perf_counter()
    exact = RequestSampler(mixes, weights, seed=1, tokenizer=tok)  # first build: checks the words once
    first_build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    RequestSampler(mixes, weights, seed=1, tokenizer=tok)
    build_s = time.perf_counter() - t0
    approx = RequestSampler(mixes, weights, seed=1)
    dialect = get_dialect("openai-chat")
    out: dict[str, object] = {
        "tokenizer": str(model),
        "requests": n,
        "load_tokenizer_s": round(load_s, 3),
        "first_sampler_build_ms": round(first_build_s * 1e3, 2),
        "sampler_build_ms": round(build_s * 1e3, 2),
        "template_overhead": {m: exact.template_overhead(m) for m in sorted(mixes)},
    }
    for name, sampler in (("exact", exact), ("approximate", approx)):
        for with_body in (False, True):
            for i in range(2000):  # warm
                sampler.spec_at(i)
            samples = []
            clock = time.perf_counter_ns
            gc.collect()
            for i in range(n):
                t = clock()
                spec = sampler.spec_at(i)
                if with_body:
                    dialect.build_body(spec, "m", True)
                samples.append(clock() - t)
            out[f"{name}{' + body' if with_body else ''}"] = _percentiles(samples)
    # The check that the figures are for exact prompts: every one of a sample counts its target.
    miscounted = sum(
        tok.count(s.system_prompt) + tok.count(s.prompt) != s.prompt_tokens for s in map(exact.spec_at, range(300))
    )
    out["miscounted_of_300"] = miscounted
    return out


if __name__ == "__main__":
    from bench.common import REPO, machine_info, write_results

    machine = machine_info()
    if len(sys.argv) > 1:
        model = Path(sys.argv[1])
    else:
        found = sorted((REPO / ".cache" / "llama" / "model").glob("*.gguf"))
        if not found:
            sys.exit("no GGUF model in .cache/llama/model: run `bash scripts/install-llama-server.sh`, or give a path")
        model = found[0]
    result = bench_exact_prompts(model)
    for key, value in result.items():
        if isinstance(value, dict) and "p99_us" in value:
            row = f"p50 {value['p50_us']:.1f}  p99 {value['p99_us']:.1f}  max {value['max_us']:.1f}"
            print(f"{'spec_at, ' + key + ' (µs/request)':44s} {row}")
        else:
            print(f"{key:44s} {value}")
    print(f"(results: {write_results('tokenizer', result, machine)})")
