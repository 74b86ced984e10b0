"""The target model's own tokenizer, loaded from a ``tokenizer.json``, a local Hugging Face model folder or a GGUF file.

``load_tokenizer(path)`` returns a ``PromptTokenizer``: counting text in the model's tokens, and the tokens a chat
template adds around the messages (``chat_template_overhead``), so the prompt tokens a server counts are
``text tokens + overhead``. The `tokenizers` and `gguf` packages (the ``tokenizer`` extra) are imported here, on
first use only: a scenario without a tokenizer never needs them.

Loading is slow (a GGUF header takes seconds), so each path is loaded once per process and kept; the sampler
tokenizes only when it is built, never per request.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from loadgen.traffic.words import WORDS

__all__ = [
    "INSTALL_HINT",
    "SERVER_TOKENIZER",
    "PromptTokenizer",
    "TokenizerError",
    "load_tokenizer",
    "use_server_tokenizer",
]

INSTALL_HINT = "pip install 'llm-loadgen[tokenizer]'"
# `tokenizer: server`: the target's own /tokenize endpoint instead of a local file (traffic/server_tokenizer.py).
SERVER_TOKENIZER = "server"


class TokenizerError(ValueError):
    """A tokenizer that cannot be used: the message says why and what to give instead."""


@dataclass(frozen=True, slots=True, eq=False)
class PromptTokenizer:
    """A loaded tokenizer: ``count(text)`` in the model's tokens, as the server's ``/tokenize`` counts them."""

    source: str  # the path it was loaded from
    kind: str  # "tokenizer.json" | "model folder" | "gguf"
    backend: Any  # tokenizers.Tokenizer
    add_bos: bool  # the server adds a BOS token when it tokenizes a whole prompt
    bos_token: str | None
    chat_template: str | None
    _overheads: dict[bool, int | None] = field(default_factory=dict)
    _words: list[tuple[str, ...]] = field(default_factory=list)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` alone: special-token text matched, no BOS added."""
        ids: list[int] = self.backend.encode(text, add_special_tokens=False).ids
        return ids

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def token_ends(self, text: str) -> list[int]:
        """Where each token of ``text`` ends, in characters (exclusive): how the recorder gives a streamed
        reply's tokens to the chunks that carried them (measure/token_counts.py). Character offsets, as the
        `tokenizers` library gives them: the bytes of one character split over several tokens all end with it."""
        return [end for _, end in self.backend.encode(text, add_special_tokens=False).offsets]

    def one_token_words(self) -> tuple[str, ...]:
        """loadgen's prompt words (``WORDS``) that are exactly one token here, alone and after a space, so a
        text of N of them joined by single spaces is N tokens; checked on a long text of them, once.

        Raises ``TokenizerError`` if too few words qualify or the tokenizer merges across the spaces."""
        if not self._words:
            self._words.append(self._check_words())
        return self._words[0]

    def _check_words(self) -> tuple[str, ...]:
        words = tuple(w for w in WORDS if self.count(w) == 1 and self.count(f" {w}") == 1)
        if len(words) < 64:
            raise TokenizerError(
                f"only {len(words)} of loadgen's {len(WORDS)} prompt words are one token in this tokenizer; "
                "exact prompt lengths need at least 64"
            )
        # The rule the sampler's windows rely on: no token spans the space between two words.
        probe = random.Random(len(words)).choices(words, k=4096)
        if self.count(" ".join(probe)) != len(probe):
            raise TokenizerError(
                "this tokenizer merges across the spaces between words, so loadgen cannot cut prompts to an exact "
                "length with it"
            )
        return words

    def chat_template_overhead(self, system: bool = True) -> int | None:
        """Prompt tokens a chat request costs beyond its messages' own text: the template's role markers and
        separators (plus its default system prompt, where the template adds one to requests without a system
        message), plus a BOS the server adds. None when the tokenizer comes without a chat template or the
        template cannot be rendered here (jinja2 missing, or it needs more than messages)."""
        if system not in self._overheads:
            self._overheads[system] = self._measure_overhead(system)
        return self._overheads[system]

    def _measure_overhead(self, system: bool) -> int | None:
        if not self.chat_template:
            return None
        try:
            from jinja2.sandbox import ImmutableSandboxedEnvironment
        except ImportError:
            return None
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        try:
            template = env.from_string(self.chat_template)
        except Exception:
            return None
        found: set[int] = set()
        # Two sets of contents: the overhead must not depend on them (contents are cut at token boundaries).
        for text in ("hello", "apple banana cherry"):
            messages = [{"role": "system", "content": text}] if system else []
            messages.append({"role": "user", "content": text})
            try:
                rendered = template.render(
                    messages=messages, add_generation_prompt=True, bos_token=self.bos_token or "", eos_token=""
                )
            except Exception:
                return None
            bos = 1 if self.add_bos and not (self.bos_token and rendered.startswith(self.bos_token)) else 0
            found.add(bos + self.count(rendered) - self.count(text) * len(messages))
        return found.pop() if len(found) == 1 else None


_CACHE: dict[tuple[str, int, int], PromptTokenizer] = {}
# `tokenizer: server` in this process: the one the scenario's validation resolved (server_tokenizer.py puts it here).
_SERVER: list[PromptTokenizer] = []


def use_server_tokenizer(tok: PromptTokenizer) -> None:
    """What `load_tokenizer("server")` returns from now on in this process."""
    _SERVER[:] = [tok]


_LOCK = threading.Lock()


def load_tokenizer(path: str | Path) -> PromptTokenizer:
    """The tokenizer at ``path`` (a tokenizer.json, a folder holding one, or a .gguf file), loaded once per process.

    Raises ``TokenizerError`` with a message fit for the user: missing file, unknown format, missing packages.
    ``"server"`` (`SERVER_TOKENIZER`) is the target's `/tokenize`, resolved when the scenario was validated
    (traffic/server_tokenizer.py).
    """
    if str(path) == SERVER_TOKENIZER:
        if not _SERVER:
            raise TokenizerError("tokenizer: server is resolved against the first variant when the scenario loads")
        return _SERVER[0]
    p = Path(path).expanduser()
    try:
        stat = p.stat()
    except FileNotFoundError:
        raise TokenizerError(f"{str(path)!r} does not exist") from None
    except OSError as exc:
        raise TokenizerError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
    key = (str(p.resolve()), stat.st_mtime_ns, stat.st_size)
    with _LOCK:
        found = _CACHE.get(key)
        if found is None:
            found = _CACHE[key] = _load(p, str(path))
    return found


def _require_packages(gguf: bool) -> None:
    missing = []
    for name in ("tokenizers", *(("gguf",) if gguf else ())):
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise TokenizerError(f"loading a tokenizer needs the {' and '.join(missing)} package(s): {INSTALL_HINT}")


def _load(p: Path, source: str) -> PromptTokenizer:
    if p.is_dir():
        tokenizer_json = p / "tokenizer.json"
        if not tokenizer_json.is_file():
            ggufs = sorted(p.glob("*.gguf"))
            hint = f"; for a GGUF model give the file itself, e.g. {str(ggufs[0])!r}" if ggufs else ""
            raise TokenizerError(f"folder {source!r} has no tokenizer.json{hint}")
        return _from_json(tokenizer_json, source, "model folder", _read_config(p / "tokenizer_config.json"))
    if p.suffix.lower() == ".gguf":
        _require_packages(gguf=True)
        from loadgen.traffic.gguf_tokenizer import tokenizer_from_gguf

        try:
            built = tokenizer_from_gguf(p)
        except ValueError as exc:
            raise TokenizerError(str(exc)) from None
        return PromptTokenizer(source, "gguf", built.tokenizer, built.add_bos, built.bos_token, built.chat_template)
    if p.suffix.lower() == ".json":
        return _from_json(p, source, "tokenizer.json", _read_config(p.with_name("tokenizer_config.json")))
    raise TokenizerError(f"{source!r} is not a tokenizer.json, a model folder holding one, or a .gguf file")


def _read_config(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        config = orjson.loads(path.read_bytes())
    except (orjson.JSONDecodeError, OSError) as exc:
        raise TokenizerError(f"cannot read {str(path)!r}: {exc}") from None
    return config if isinstance(config, dict) else {}


def _token_text(value: Any) -> str | None:
    # tokenizer_config.json spells special tokens as a string or as {"content": ...}.
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _from_json(path: Path, source: str, kind: str, config: dict[str, Any]) -> PromptTokenizer:
    _require_packages(gguf=False)
    from tokenizers import Tokenizer

    try:
        backend = Tokenizer.from_file(str(path))
    except Exception as exc:  # the library raises a bare Exception for malformed files
        raise TokenizerError(f"{source!r} is not a tokenizer the tokenizers library can load: {exc}") from None
    template = config.get("chat_template")
    if isinstance(template, list):  # several named templates: the default one
        template = next((t.get("template") for t in template if t.get("name") == "default"), None)
    # A tokenizer.json adds BOS through its post-processor: see whether encoding with special tokens adds any.
    with_specials = len(backend.encode("a", add_special_tokens=True).ids)
    without = len(backend.encode("a", add_special_tokens=False).ids)
    return PromptTokenizer(
        source,
        kind,
        backend,
        add_bos=with_specials > without,
        bos_token=_token_text(config.get("bos_token")),
        chat_template=template if isinstance(template, str) else None,
    )
