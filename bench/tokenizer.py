"""A small local tokenizer folder for the peers (they need one to build prompts and count tokens), made offline.

A word-level `tokenizer.json` (whitespace split; the bench server's words and loadgen's prompt words, everything
else `[UNK]`) plus a `tokenizer_config.json`, written as plain JSON: no download, no `tokenizers` import here.
Each output word of the bench server is one token, so a peer that tokenizes the streamed text counts right.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from bench.server import _WORDS
from loadgen.traffic.sampler import WORDS

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
