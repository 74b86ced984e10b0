"""The tokenizer built from the real SmolLM2 GGUF against llama.cpp's own: `/tokenize`, `/apply-template`, `usage`.

- the same token ids as the server's `/tokenize` on a few hundred varied strings (digits, unicode, code,
  whitespace runs, special-token text);
- 230 generated prompts, across every bucket of the built-in mixes, count exactly their target on `/tokenize`, and
  60 code prompts (the code mix is cut as code: indented lines of identifiers, keywords and operators) too;
- the chat template overhead computed from the GGUF's template is what the server's template adds, and a chat
  request's `usage.prompt_tokens` is target + that overhead.
"""

from __future__ import annotations

import json
import random
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from loadgen.traffic.mixes import builtin_mixes
from loadgen.traffic.sampler import RequestSampler
from loadgen.traffic.tokenizer import PromptTokenizer, load_tokenizer
from loadgen.traffic.words import WORDS

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def _post(url: str, path: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        url + path, json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as reply:
        return json.load(reply)


def _server_ids(url: str, text: str) -> list[int]:
    ids: list[int] = _post(url, "/tokenize", {"content": text})["tokens"]
    return ids


@pytest.fixture(scope="module")
def gguf_tokenizer(llama_server: str) -> PromptTokenizer:
    # The llama_server fixture installed the model (scripts/install-llama-server.sh).
    [model] = sorted((ROOT / ".cache" / "llama" / "model").glob("*.gguf"))
    tok = load_tokenizer(model)
    assert tok.kind == "gguf"
    return tok


_FIXED = [
    "",
    " ",
    "Hello, world!",
    "hello world",
    "  leading and trailing  ",
    "tabs\tand\nnewlines\r\n",
    "\n\n\n",
    "a    b      c",
    "    indented\n        more\n",
    "1234567890",
    "3.14159 2,718 1e-9 -42 +7 0x1F 1_000_000",
    "Call 555-0199 at 10:30pm on 2024-03-15.",
    "I'm sure it's fine, they're here, we've done it, you'll see, he'd go",
    "DON'T SHOUT. Don'T mIxEd CaSe",
    "café naïve résumé façade coöperate",
    "Ünïcödé ÀÉÎÕÜ ß æøå",
    "日本語のテキストです。中文文本。한국어 텍스트",
    "Привет, мир! Ελληνικά κείμενα",
    "مرحبا بالعالم שלום עולם",
    "हिन्दी पाठ ไทย",
    "emoji 🙂🚀👍🏽 👨‍👩‍👧 flags 🇫🇷",
    "math ∑∫√∞ ≤ ≥ ≠ ± × ÷ → ⇒",
    "def f(x):\n    return x ** 2  # square\n",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    'print("hello")\nif __name__ == "__main__":\n\tmain()',
    "SELECT * FROM users WHERE id = 42 AND name LIKE '%bob%';",
    '<div class="x">&amp; &lt;tag&gt;</div>',
    '{"key": [1, 2, 3], "nested": {"a": null, "b": true}}',
    "https://example.com/path?query=1&x=%20y#frag",
    "user@example.com C:\\Windows\\System32 /usr/local/bin",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>",
    "<|endoftext|>",
    "text<|im_end|>more<|im_start|>",
    "<|im_start <|im_end |> < |im_start|>",
    "<repo_name>loadgen<file_sep>main.py<filename>x",
    "!!!???...,,,;;;:::---___===+++***",
    "((()))[[[]]]{{{}}}<<<>>>",
    "`backticks` ~tilde~ ^caret^ |pipe| \\backslash\\",
    "\u00a0non-breaking\u2009thin\u3000ideographic spaces",
    "zero\u200bwidth\u200djoiner",
    "A" * 50,
    "ab" * 40,
    "The quick brown fox jumps over the lazy dog. " * 3,
]


def _varied(n: int) -> list[str]:
    rng = random.Random(2024)
    pieces = [
        *WORDS[:80],
        *[w.capitalize() for w in WORDS[80:100]],
        *[w.upper() for w in WORDS[100:110]],
        *[str(rng.randint(0, 10 ** rng.randint(1, 9))) for _ in range(20)],
        "café",
        "日本",
        "Привет",
        "🙂",
        "👍🏽",
        "→",
        "ß",
        "def",
        "return",
        "x[i]",
        "{",
        "}",
        "();",
        "==",
        "'s",
        "'re",
        "n't",
        "<|im_start|>",
        "<|im_end|>",
        "<|endoftext|>",
        "<|im_",
        "...",
        "—",
        '"',
    ]
    gaps = ["", " ", " ", " ", "  ", "   ", "\n", "\n\n", "\t", " \n ", "\r\n"]
    return ["".join(rng.choice(pieces) + rng.choice(gaps) for _ in range(rng.randint(1, 30))) for _ in range(n)]


def test_gguf_tokenizer_matches_llamacpp_tokenize(llama_server: str, gguf_tokenizer: PromptTokenizer) -> None:
    strings = _FIXED + _varied(220 - len(_FIXED))
    assert len(set(strings)) >= 200
    mismatches = []
    for text in strings:
        ours, theirs = gguf_tokenizer.encode(text), _server_ids(llama_server, text)
        if ours != theirs:
            mismatches.append((text, ours, theirs))
    assert mismatches == [], f"{len(mismatches)} of {len(strings)} differ; first: {mismatches[:3]}"


def _builtin_sampler(tok: PromptTokenizer) -> RequestSampler:
    registry = builtin_mixes()
    mixes = {name: registry.get(name) for name in registry.names()}
    return RequestSampler(mixes, dict.fromkeys(mixes, 1.0), seed=11, tokenizer=tok)


def test_generated_prompts_count_exactly_their_target(llama_server: str, gguf_tokenizer: PromptTokenizer) -> None:
    sampler = _builtin_sampler(gguf_tokenizer)
    per_bucket: Counter[tuple[str, str]] = Counter()
    specs = []
    i = 0
    while len(specs) < 230:  # 23 from each of the 10 buckets
        spec = sampler.spec_at(i)
        i += 1
        if per_bucket[spec.mix, spec.bucket] < 23:
            per_bucket[spec.mix, spec.bucket] += 1
            specs.append(spec)
    assert len(per_bucket) == 10
    system_counts: dict[str, int] = {}
    mismatches = []
    for spec in specs:
        if spec.system_prompt not in system_counts:
            system_counts[spec.system_prompt] = len(_server_ids(llama_server, spec.system_prompt))
        counted = system_counts[spec.system_prompt] + len(_server_ids(llama_server, spec.prompt))
        if counted != spec.prompt_tokens:
            mismatches.append((spec.mix, spec.bucket, spec.index, spec.prompt_tokens, counted))
    assert mismatches == [], f"{len(mismatches)} of {len(specs)} prompts miscounted: {mismatches[:5]}"


def test_chat_template_overhead_and_usage(llama_server: str, gguf_tokenizer: PromptTokenizer) -> None:
    for system in (True, False):
        messages = [{"role": "system", "content": "alpha"}] if system else []
        messages.append({"role": "user", "content": "alpha"})
        rendered = _post(llama_server, "/apply-template", {"messages": messages})["prompt"]
        served = len(_server_ids(llama_server, rendered)) - len(messages) * len(_server_ids(llama_server, "alpha"))
        assert gguf_tokenizer.chat_template_overhead(system=system) == served
    # SmolLM2's template: <|im_start|>{role}\n … <|im_end|>\n per message, then <|im_start|>assistant\n.
    assert gguf_tokenizer.chat_template_overhead(system=True) == 14
    sampler = _builtin_sampler(gguf_tokenizer)
    checked = 0
    for i in range(400):
        spec = sampler.spec_at(i)
        # Short prompts only: the server's 4 slots have 2048 tokens of context each.
        if spec.bucket != "short" or checked >= 6:
            continue
        messages = [{"role": "system", "content": spec.system_prompt}, {"role": "user", "content": spec.prompt}]
        body = {"model": "m", "messages": messages, "max_tokens": 1, "cache_prompt": False}
        usage = _post(llama_server, "/v1/chat/completions", body)["usage"]
        assert usage["prompt_tokens"] == spec.prompt_tokens + sampler.template_overhead(spec.mix), spec
        checked += 1
    assert checked == 6


def test_code_prompts_are_code_and_count_exactly_their_target(
    llama_server: str, gguf_tokenizer: PromptTokenizer
) -> None:
    # SmolLM2's vocabulary has the code pieces and indentation runs: the code mix is cut as code, not prose.
    code = builtin_mixes().get("code")
    sampler = RequestSampler({"code": code}, {"code": 1.0}, seed=23, tokenizer=gguf_tokenizer)
    assert sampler._code_blocks, "the GGUF tokenizer should cut code exactly"
    per_bucket: Counter[str] = Counter()
    mismatches = []
    system_tokens = len(_server_ids(llama_server, sampler.spec_at(0).system_prompt))
    i = 0
    while sum(per_bucket.values()) < 60:  # 20 from each of short, medium and long
        spec = sampler.spec_at(i)
        i += 1
        if per_bucket[spec.bucket] >= 20:
            continue
        per_bucket[spec.bucket] += 1
        assert spec.prompt.count("\n    ") >= 3 and " return " in spec.prompt + " " or spec.bucket == "short"
        assert any(k in spec.prompt for k in (" def ", " for ", " if ", " = ")), spec.prompt[:200]
        counted = system_tokens + len(_server_ids(llama_server, spec.prompt))
        if counted != spec.prompt_tokens:
            mismatches.append((spec.bucket, spec.index, spec.prompt_tokens, counted))
    assert set(per_bucket) == {b.name for b in code.buckets}
    assert mismatches == [], f"{len(mismatches)} of 60 code prompts miscounted: {mismatches[:5]}"
