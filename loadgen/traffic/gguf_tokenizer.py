"""A `tokenizers` Tokenizer built from a GGUF file's metadata, tokenizing as llama.cpp does.

llama.cpp keeps the whole vocabulary in the GGUF header: ``tokenizer.ggml.model`` (``gpt2`` = byte-level BPE),
``tokens``, ``merges``, ``token_type`` (control and user-defined tokens), ``pre`` (which pre-tokenizer regexes
split the text before BPE) and ``add_bos_token``. This rebuilds the same tokenizer with the `tokenizers` library, so
prompts can be cut to an exact length in the served model's own tokens without shipping its ``tokenizer.json``.

Only what can be checked is supported: byte-level BPE with the GPT-2 regex, with or without digits split one by
one (``tokenizer.ggml.pre`` below). For SmolLM2 (``smollm``) the e2e tier checks it against llama.cpp's
``/tokenize`` on a few hundred strings. Anything else is refused with a pointer to the model's ``tokenizer.json``,
which loads directly.

Reading the header with the `gguf` package costs about 3-4 s for a 49k-token vocabulary (it builds a numpy view per
string), and a run reads it in every process (the command's preflight, the master, each worker). The rebuilt
tokenizer is therefore kept as JSON (`tokenizers`' own serialisation) in a cache folder — ``$LOADGEN_CACHE_DIR``,
else ``$XDG_CACHE_HOME/loadgen``, else ``~/.cache/loadgen`` — keyed by the file's path, size and modification time,
the `tokenizers` version and this rebuild's format: later loads take ~0.2 s. A cache that cannot be written (a
read-only home in a pod) is no error: the next load rebuilds.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

__all__ = ["GGUFTokenizer", "cache_file", "tokenizer_from_gguf"]

# Bump when the rebuild below changes what it makes: older cache entries are then never read.
_FORMAT = 1

# tokenizer.ggml.pre -> split digits one by one before the GPT-2 regex? llama.cpp (llama-vocab.cpp) gives these
# pre-types the regexes "\p{N}" then the GPT-2 pattern; "gpt-2" and its kin use the GPT-2 pattern alone.
_PRE_TYPES: dict[str, bool] = {
    "smollm": True,
    "starcoder": True,
    "refact": True,
    "command-r": True,
    "codeshell": True,
    "exaone": True,
    "minerva-7b": True,
    "gpt-2": False,
    "phi-2": False,
    "jina-es": False,
    "jina-de": False,
    "gpt3-finnish": False,
    "jina-v1-en": False,
    "jina-v2-es": False,
    "jina-v2-de": False,
}

# llama.cpp's token types (llama_token_type): 3 = control, 4 = user-defined.
_CONTROL, _USER_DEFINED = 3, 4


@dataclass(frozen=True, slots=True)
class GGUFTokenizer:
    """What a GGUF file says about tokenizing for its model."""

    tokenizer: Any  # tokenizers.Tokenizer
    add_bos: bool
    bos_token: str | None
    chat_template: str | None
    pre: str


def _field(reader: Any, key: str) -> Any:
    return reader.fields.get(key)


def _scalar(reader: Any, key: str) -> Any:
    field = _field(reader, key)
    if field is None:
        return None
    part = field.parts[field.data[0]]
    if field.types and field.types[0].name == "STRING":
        return bytes(part).decode("utf-8")
    return part[0].item()


def _strings(reader: Any, key: str) -> list[str]:
    field = _field(reader, key)
    if field is None:
        return []
    # Read through parts/data (not ReaderField.contents(), which older gguf releases lack).
    return [bytes(field.parts[i]).decode("utf-8") for i in field.data]


def _ints(reader: Any, key: str) -> list[int]:
    field = _field(reader, key)
    if field is None:
        return []
    return [int(field.parts[i][0]) for i in field.data]


def cache_file(path: str | Path) -> Path | None:
    """Where the tokenizer rebuilt from the GGUF file at ``path`` is kept (None: the file cannot be read)."""
    import tokenizers

    try:
        resolved = Path(path).resolve()
        st = resolved.stat()
    except OSError:
        return None
    root = os.environ.get("LOADGEN_CACHE_DIR") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "loadgen"
    )
    key = f"{_FORMAT}|{resolved}|{st.st_size}|{st.st_mtime_ns}|{tokenizers.__version__}"
    return Path(root) / "gguf-tokenizers" / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"


def tokenizer_from_gguf(path: str | Path) -> GGUFTokenizer:
    """The tokenizer of the GGUF model at ``path``, from the cache when it holds this very file's (see the module
    docstring); raises ``ValueError`` saying what is unsupported."""
    from tokenizers import Tokenizer

    cached = cache_file(path)
    if cached is not None:
        try:
            doc = orjson.loads(cached.read_bytes())
            return GGUFTokenizer(
                tokenizer=Tokenizer.from_str(doc["tokenizer"]),
                add_bos=doc["add_bos"],
                bos_token=doc["bos_token"],
                chat_template=doc["chat_template"],
                pre=doc["pre"],
            )
        except Exception:  # noqa: BLE001 - an entry unreadable for any reason (tokenizers raises Exception): rebuild
            pass
    tok = _rebuild(path)
    if cached is not None:
        doc = {
            "tokenizer": tok.tokenizer.to_str(),
            "add_bos": tok.add_bos,
            "bos_token": tok.bos_token,
            "chat_template": tok.chat_template,
            "pre": tok.pre,
        }
        try:  # atomically: a concurrent reader (another worker) sees the whole entry or none
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp = cached.with_name(f"{cached.name}.{os.getpid()}.tmp")
            tmp.write_bytes(orjson.dumps(doc))
            os.replace(tmp, cached)
        except OSError:
            pass
    return tok


def _rebuild(path: str | Path) -> GGUFTokenizer:
    """Build the tokenizer of the GGUF model at ``path`` from its header."""
    from gguf import GGUFReader
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    try:
        reader = GGUFReader(str(path), "r")
    except (ValueError, OSError) as exc:
        raise ValueError(f"cannot read {path} as GGUF: {exc}") from None
    model = _scalar(reader, "tokenizer.ggml.model")
    if model != "gpt2":
        raise ValueError(
            f"tokenizer.ggml.model is {model!r}; only byte-level BPE ('gpt2') GGUF tokenizers are rebuilt; "
            "give the model's tokenizer.json (or its Hugging Face folder) instead"
        )
    pre = _scalar(reader, "tokenizer.ggml.pre") or "default"
    if pre not in _PRE_TYPES:
        raise ValueError(
            f"tokenizer.ggml.pre is {pre!r}, whose pre-tokenizer loadgen does not rebuild (it knows "
            f"{', '.join(sorted(_PRE_TYPES))}); give the model's tokenizer.json (or its Hugging Face folder) instead"
        )
    tokens = _strings(reader, "tokenizer.ggml.tokens")
    types = _ints(reader, "tokenizer.ggml.token_type")
    merges_text = _strings(reader, "tokenizer.ggml.merges")
    if not tokens or not merges_text:
        raise ValueError("the GGUF file has no tokenizer.ggml.tokens or tokenizer.ggml.merges")
    vocab: dict[str, int] = {}
    for i, token in enumerate(tokens):
        vocab[token] = i  # llama.cpp's token_to_id keeps the last id of a duplicated text too
    merges: list[tuple[str, str]] = []
    for merge in merges_text:
        # As llama.cpp splits them: at the first space after the first character.
        cut = merge.find(" ", 1)
        if cut < 0:
            raise ValueError(f"malformed merge {merge!r} in tokenizer.ggml.merges")
        merges.append((merge[:cut], merge[cut + 1 :]))
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if _PRE_TYPES[pre]:
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    else:
        tokenizer.pre_tokenizer = byte_level
    tokenizer.decoder = decoders.ByteLevel()
    # Control tokens are matched in text as llama.cpp's /tokenize does (parse_special); user-defined ones always.
    specials = [t for t, k in zip(tokens, types, strict=False) if k == _CONTROL]
    user_defined = [t for t, k in zip(tokens, types, strict=False) if k == _USER_DEFINED]
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    if user_defined:
        tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in user_defined])
    bos_id = _scalar(reader, "tokenizer.ggml.bos_token_id")
    add_bos = _scalar(reader, "tokenizer.ggml.add_bos_token")
    return GGUFTokenizer(
        tokenizer=tokenizer,
        # Without the key: no BOS, llama.cpp's default for most BPE pre-types (llama3's adds one; unsupported here).
        add_bos=bool(add_bos) if add_bos is not None else False,
        bos_token=tokens[bos_id] if isinstance(bos_id, int) and 0 <= bos_id < len(tokens) else None,
        chat_template=_scalar(reader, "tokenizer.chat_template"),
        pre=pre,
    )
