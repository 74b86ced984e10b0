"""Code prompts (traffic/code_text.py, the built-in `code` mix): they look like code, and keep the sampler's length
rule — about one token per unit without a tokenizer, exactly one with it (or prose when the tokenizer cannot)."""

from __future__ import annotations

import io
import random
import re
import tokenize
from pathlib import Path

import pytest

pytest.importorskip("tokenizers")

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402

from loadgen.config.scenario import Bucket, MixDef  # noqa: E402
from loadgen.traffic.code_text import code_block, count_units  # noqa: E402
from loadgen.traffic.mixes import builtin_mixes  # noqa: E402
from loadgen.traffic.sampler import RequestSampler  # noqa: E402
from loadgen.traffic.tokenizer import load_tokenizer  # noqa: E402
from loadgen.traffic.words import WORDS  # noqa: E402


def _code_sampler(**kw: object) -> RequestSampler:
    return RequestSampler({"code": builtin_mixes().get("code")}, {"code": 1.0}, seed=3, **kw)  # type: ignore[arg-type]


def test_code_prompts_look_like_code() -> None:
    s = _code_sampler()
    specs = [s.spec_at(i) for i in range(200)]
    for spec in specs:
        # The question after the tag: lines of 4-space indentation levels, pieces separated by single spaces.
        body = spec.prompt.split(" ", 1)[1] if " " in spec.prompt else ""
        for line in spec.prompt.split("\n")[1:]:
            indent = len(line) - len(line.lstrip(" "))
            assert indent % 4 == 0 and indent >= 4, repr(line)
            assert "  " not in line.strip(" "), repr(line)
        assert not spec.prompt.endswith((" ", "\n"))
        assert body
    text = "\n".join(spec.prompt for spec in specs)
    for needle in (" def ", " return ", " ( ", " ) :", " = ", " for ", " in ", " self ", " if ", " . "):
        assert needle in text, needle
    assert text.count("\n") > 200 * 3  # many lines per prompt
    # The system prompt stays an instruction in words.
    assert set(specs[0].system_prompt.split()) <= set(WORDS)


def test_the_block_is_python_tokens_with_consistent_indentation() -> None:
    block = code_block(2048, 0x10AD6E4)
    assert block is not None
    # The block's lines all sit one level deep or more: wrapped in one opener, it is valid Python to tokenize
    # (INDENT / DEDENT included: every dedent returns to a level opened before).
    source = "if True:\n   " + block.text + "\n"
    kinds = {tok.type for tok in tokenize.generate_tokens(io.StringIO(source).readline)}
    assert {tokenize.NAME, tokenize.OP, tokenize.INDENT, tokenize.DEDENT, tokenize.NEWLINE} <= kinds
    assert tokenize.ERRORTOKEN not in kinds


def test_without_a_tokenizer_a_code_prompt_is_its_target_count_of_units() -> None:
    s = _code_sampler()
    for i in range(500):
        spec = s.spec_at(i)
        assert len(spec.system_prompt.split()) + count_units(spec.prompt) == spec.prompt_tokens
    block = code_block(2048, 0x10AD6E4)
    assert block is not None
    rng = random.Random(4)
    for _ in range(300):  # windows that wrap around the block, and ones that would end on a line break
        first, n = rng.randrange(2048), rng.randrange(1, 5000)
        assert count_units(block.window(first, n)) == n
    ends_on_break = next(i for i in range(2048) if block.breaks[i])
    assert block.window(0, ends_on_break + 1).endswith(" pass")


def _prose() -> list[str]:
    # Every prompt word with and without its leading space, so the prose pool is whole either way.
    return [" ".join(random.Random(k).sample(WORDS, len(WORDS))) for k in range(30)] + ["\n".join(WORDS)] * 30


def _trained_on(lines: list[str]) -> Tokenizer:
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=4000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tk.train_from_iterator(lines, trainer)
    return tk


@pytest.fixture(scope="module")
def code_tokenizer_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # A vocabulary that has learnt code (as real models' have): the pieces and indentation runs are tokens.
    block = code_block(2048, 7)
    assert block is not None
    path = tmp_path_factory.mktemp("code-tok") / "tokenizer.json"
    _trained_on([block.text] * 20 + _prose()).save(str(path))
    return path


def test_with_a_tokenizer_code_prompts_are_exactly_their_target(code_tokenizer_path: Path) -> None:
    tok = load_tokenizer(code_tokenizer_path)
    s = _code_sampler(tokenizer=tok)
    assert s.exact_lengths and s._code_blocks, "this tokenizer has the code pieces: code, not the prose fallback"
    mix = builtin_mixes().get("code")
    seen = set()
    for i in range(150):
        spec = s.spec_at(i)
        seen.add(spec.bucket)
        assert "\n" in spec.prompt and " def " in f" {spec.prompt}" or spec.prompt_tokens < 400
        assert tok.count(spec.system_prompt) + tok.count(spec.prompt) == spec.prompt_tokens, (i, spec.bucket)
        assert tok.count(f"{spec.system_prompt} {spec.prompt}") == spec.prompt_tokens  # completions dialects
    assert seen == {b.name for b in mix.buckets}
    # Every length from 1 to 400 tokens, in a one-bucket code mix.
    for n in range(1, 400, 7):
        one = MixDef(buckets=[Bucket(name="b", prompt_tokens=(n, n))], output_tokens=(1, 1), text="code")
        spec = RequestSampler({"m": one}, {"m": 1.0}, seed=n, tokenizer=tok).spec_at(0)
        assert tok.count(spec.prompt) == n, (n, spec.prompt)


def test_a_tokenizer_without_code_pieces_keeps_code_mixes_in_prose(tmp_path: Path) -> None:
    # Learnt from prose only: most code pieces are several tokens, so code cannot be cut exactly with it.
    path = tmp_path / "tokenizer.json"
    _trained_on(_prose()).save(str(path))
    tok = load_tokenizer(path)
    assert code_block(2048, 0x10AD6E4, tok) is None
    s = _code_sampler(tokenizer=tok)
    for i in range(50):
        spec = s.spec_at(i)
        assert "\n" not in spec.prompt and re.fullmatch(r"\S+( \S+)*", spec.prompt)
        assert tok.count(spec.system_prompt) + tok.count(spec.prompt) == spec.prompt_tokens
