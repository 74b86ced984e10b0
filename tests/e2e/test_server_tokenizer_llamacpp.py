"""`tokenizer: server` against the real llama.cpp server: prompts cut with its own `/tokenize` count exactly.

- the one-token words asked of `/tokenize` are the GGUF tokenizer's (the file the server loaded);
- 230 generated prompts, 23 from each of the 10 buckets of the built-in mixes, count exactly their target on
  `/tokenize` (0 mismatches);
- the chat template overhead from `/apply-template` is the 14 tokens of SmolLM2's template, with a system message.
"""

from __future__ import annotations

import json
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from loadgen.traffic.mixes import builtin_mixes
from loadgen.traffic.sampler import RequestSampler
from loadgen.traffic.server_tokenizer import server_tokenizer
from loadgen.traffic.tokenizer import load_tokenizer

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def _count(url: str, text: str) -> int:
    request = urllib.request.Request(
        url + "/tokenize", json.dumps({"content": text}).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as reply:
        return len(json.load(reply)["tokens"])


def test_prompts_cut_with_the_servers_tokenize_count_exactly(llama_server: str) -> None:
    tok = server_tokenizer(llama_server, "m")
    [model] = sorted((ROOT / ".cache" / "llama" / "model").glob("*.gguf"))
    assert tok.one_token_words() == load_tokenizer(model).one_token_words()
    registry = builtin_mixes()
    mixes = {name: registry.get(name) for name in registry.names()}
    sampler = RequestSampler(mixes, dict.fromkeys(mixes, 1.0), seed=23, tokenizer=tok)
    assert sampler.exact_lengths
    per_bucket: Counter[tuple[str, str]] = Counter()
    specs = []
    i = 0
    while len(specs) < 230:
        spec = sampler.spec_at(i)
        i += 1
        if per_bucket[spec.mix, spec.bucket] < 23:
            per_bucket[spec.mix, spec.bucket] += 1
            specs.append(spec)
    assert len(per_bucket) == 10
    systems: dict[str, int] = {}
    mismatches = []
    for spec in specs:
        if spec.system_prompt not in systems:
            systems[spec.system_prompt] = _count(llama_server, spec.system_prompt)
        counted = systems[spec.system_prompt] + _count(llama_server, spec.prompt)
        if counted != spec.prompt_tokens:
            mismatches.append((spec.mix, spec.bucket, spec.index, spec.prompt_tokens, counted))
    print(f"{len(specs) - len(mismatches)} of {len(specs)} prompts count exactly on /tokenize")
    assert mismatches == [], f"{len(mismatches)} of {len(specs)} prompts miscounted: {mismatches[:5]}"


def test_chat_template_overhead_from_apply_template(llama_server: str) -> None:
    tok = server_tokenizer(llama_server, "m")
    # SmolLM2's template: <|im_start|>{role}\n … <|im_end|>\n per message, then <|im_start|>assistant\n.
    assert tok.chat_template_overhead(system=True) == 14
    assert tok.chat_template_overhead(system=False) == load_tokenizer(
        sorted((ROOT / ".cache" / "llama" / "model").glob("*.gguf"))[0]
    ).chat_template_overhead(system=False)
