"""Tokenizer-exact prompts: the loader (tokenizer.json, model folder, GGUF), exact lengths, config errors.

The tokenizers are small byte-level BPEs trained here in memory (no download); the GGUF one is written with the
`gguf` package from such a BPE, so the GGUF path is checked against the `tokenizers` original.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import orjson
import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("gguf")

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402

from loadgen.config.errors import ConfigError  # noqa: E402
from loadgen.config.scenario import Bucket, MixDef, parse_scenario  # noqa: E402
from loadgen.exit_codes import ExitCode  # noqa: E402
from loadgen.preflight import parse_checked  # noqa: E402
from loadgen.traffic import tokenizer as tokenizer_module  # noqa: E402
from loadgen.traffic.mixes import builtin_mixes  # noqa: E402
from loadgen.traffic.sampler import RequestSampler, sampler_for  # noqa: E402
from loadgen.traffic.tokenizer import INSTALL_HINT, PromptTokenizer, TokenizerError, load_tokenizer  # noqa: E402
from loadgen.traffic.words import WORDS  # noqa: E402

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + "
    "'\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _corpus() -> list[str]:
    rng = random.Random(1)
    # Few words: a vocabulary too small to hold every prompt word whole, so some words stay split.
    lines = [" ".join(rng.sample(WORDS[:300], 300)) for _ in range(30)] + ["\n".join(WORDS[:300])] * 30
    lines += ["def f(x):\n    return x * 2  # 12345", "naïve café 日本語 🙂 it's we're", "user\nsystem\nassistant\n"]
    return lines


def _trained(vocab_size: int = 2400) -> Tokenizer:
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tk.train_from_iterator(_corpus(), trainer)
    return tk


@pytest.fixture(scope="module")
def trained() -> Tokenizer:
    return _trained()


@pytest.fixture()
def folder(tmp_path: Path, trained: Tokenizer) -> Path:
    trained.save(str(tmp_path / "tokenizer.json"))
    config = {"chat_template": CHATML, "bos_token": None, "eos_token": "<|im_end|>"}
    (tmp_path / "tokenizer_config.json").write_bytes(orjson.dumps(config))
    return tmp_path


def _write_gguf(path: Path, tk: Tokenizer, pre: str = "smollm", model: str = "gpt2") -> Path:
    import gguf

    doc = orjson.loads(tk.to_str())
    vocab: dict[str, int] = doc["model"]["vocab"]
    tokens = sorted(vocab, key=vocab.__getitem__)
    merges = [m if isinstance(m, str) else " ".join(m) for m in doc["model"]["merges"]]
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model(model)
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in SPECIALS else 1 for t in tokens])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(vocab["<|endoftext|>"])
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _varied(n: int, seed: int = 3) -> list[str]:
    rng = random.Random(seed)
    pieces = [
        *WORDS[:50],
        "12345",
        "3.14159",
        "  ",
        "\n\n",
        "\t",
        "def f(x):",
        "    return",
        "it's",
        "we're",
        "café",
        "日本語",
        "🙂",
        "<|im_start|>",
        "<|im_end|>",
        "<|im_",
        "{}[]()",
        "ÀÉÎ",
        "x**2",
    ]
    return [
        "".join(rng.choice(pieces) + rng.choice(["", " ", "  ", "\n"]) for _ in range(rng.randint(1, 12)))
        for _ in range(n)
    ]


# --- the loader --------------------------------------------------------------------------------------------


def test_tokenizer_json_file_and_folder_load(folder: Path, trained: Tokenizer) -> None:
    for path in (folder / "tokenizer.json", folder):
        tok = load_tokenizer(path)
        assert isinstance(tok, PromptTokenizer)
        assert tok.encode("the of and 12") == trained.encode("the of and 12", add_special_tokens=False).ids
    assert load_tokenizer(folder).kind == "model folder"
    assert load_tokenizer(folder / "tokenizer.json").kind == "tokenizer.json"
    assert load_tokenizer(folder) is load_tokenizer(folder)  # once per process


def test_gguf_tokenizer_matches_the_tokenizers_original(tmp_path: Path, trained: Tokenizer) -> None:
    tok = load_tokenizer(_write_gguf(tmp_path / "m.gguf", trained))
    assert tok.kind == "gguf" and not tok.add_bos and tok.chat_template == CHATML
    strings = _varied(300)
    mismatches = [s for s in strings if tok.encode(s) != trained.encode(s, add_special_tokens=False).ids]
    assert mismatches == []
    # Control tokens are matched in text, one token each.
    start = trained.token_to_id("<|im_start|>")
    assert tok.encode("<|im_start|>user")[0] == start


def test_gguf_digits_split_by_pre_type(tmp_path: Path, trained: Tokenizer) -> None:
    smollm = load_tokenizer(_write_gguf(tmp_path / "a.gguf", trained, pre="smollm"))
    gpt2 = load_tokenizer(_write_gguf(tmp_path / "b.gguf", trained, pre="gpt-2"))
    assert smollm.count("12345") == 5
    assert gpt2.backend.pre_tokenizer.pre_tokenize_str("12345") == [("12345", (0, 5))]


@pytest.mark.parametrize(
    ("pre", "model", "fragment"),
    [("llama-bpe", "gpt2", "tokenizer.ggml.pre is 'llama-bpe'"), ("smollm", "llama", "tokenizer.ggml.model")],
)
def test_gguf_unsupported_tokenizers_are_refused(
    tmp_path: Path, trained: Tokenizer, pre: str, model: str, fragment: str
) -> None:
    path = _write_gguf(tmp_path / "x.gguf", trained, pre=pre, model=model)
    with pytest.raises(TokenizerError, match=fragment) as err:
        load_tokenizer(path)
    assert "tokenizer.json" in str(err.value)


def test_loader_errors_say_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match="does not exist"):
        load_tokenizer(tmp_path / "nope.json")
    with pytest.raises(TokenizerError, match="has no tokenizer.json"):
        load_tokenizer(tmp_path)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(TokenizerError, match="tokenizers library can load"):
        load_tokenizer(tmp_path / "bad.json")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(TokenizerError, match="is not a tokenizer.json"):
        load_tokenizer(tmp_path / "notes.txt")
    (tmp_path / "junk.gguf").write_bytes(b"not a gguf file at all")
    with pytest.raises(TokenizerError, match="GGUF"):
        load_tokenizer(tmp_path / "junk.gguf")


def test_chat_template_overhead(folder: Path) -> None:
    tok = load_tokenizer(folder)
    # <|im_start|> system \n … <|im_end|> \n, the same for user, then <|im_start|> assistant \n.
    expected_system = tok.count("<|im_start|>system\n<|im_end|>\n")
    per_user = tok.count("<|im_start|>user\n<|im_end|>\n")
    tail = tok.count("<|im_start|>assistant\n")
    assert tok.chat_template_overhead(system=True) == expected_system + per_user + tail
    assert tok.chat_template_overhead(system=False) == per_user + tail


def test_too_few_one_token_words_is_refused(tmp_path: Path) -> None:
    tiny = _trained(vocab_size=300)  # bytes and a few merges: hardly any word is whole
    tiny.save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(TokenizerError, match="one token"):
        load_tokenizer(tmp_path / "tokenizer.json").one_token_words()


def test_a_tokenizer_that_merges_across_spaces_is_refused(tmp_path: Path) -> None:
    # Every word is one token, but the pre-tokenizer keeps spaces inside pieces, so BPE merges "a b" pairs.
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.Split(pattern="\n", behavior="isolated")
    trainer = trainers.BpeTrainer(vocab_size=6000, show_progress=False)
    rng = random.Random(2)
    tk.train_from_iterator([" ".join(rng.choices(WORDS, k=400)) for _ in range(50)], trainer)
    tk.save(str(tmp_path / "tokenizer.json"))
    tok = load_tokenizer(tmp_path / "tokenizer.json")
    with pytest.raises(TokenizerError):
        tok.one_token_words()


# --- exact prompts ------------------------------------------------------------------------------------------


def _mixes() -> dict[str, MixDef]:
    registry = builtin_mixes()
    mixes = {name: registry.get(name) for name in registry.names()}
    # Every length from 1 to 320, with and without a system prompt, so the tag's short cases are covered.
    mixes["every"] = MixDef(buckets=[Bucket(name="all", prompt_tokens=(1, 320))], output_tokens=(1, 1))
    mixes["sys"] = MixDef(
        buckets=[Bucket(name="all", prompt_tokens=(6, 400))], output_tokens=(1, 1), system_prompt_tokens=5
    )
    return mixes


@pytest.mark.parametrize("kind", ["tokenizer.json", "gguf"])
def test_prompts_are_exactly_their_target_length(kind: str, folder: Path, tmp_path: Path, trained: Tokenizer) -> None:
    path = folder if kind == "tokenizer.json" else _write_gguf(tmp_path / "m.gguf", trained)
    tok = load_tokenizer(path)
    weights = {"chat": 1.0, "rag": 1.0, "code": 1.0, "every": 3.0, "sys": 1.0}
    sampler = RequestSampler(_mixes(), weights, seed=5, tokenizer=tok)
    assert sampler.exact_lengths
    seen: set[tuple[str, str]] = set()
    lengths = set()
    for i in range(600):
        spec = sampler.spec_at(i)
        seen.add((spec.mix, spec.bucket))
        lengths.add(spec.prompt_tokens)
        text = tok.count(spec.system_prompt) + tok.count(spec.prompt)
        assert text == spec.prompt_tokens, (i, spec.mix, spec.bucket)
        if spec.system_prompt:  # the completions dialects join them with a space: still exact
            assert tok.count(f"{spec.system_prompt} {spec.prompt}") == spec.prompt_tokens
        assert not spec.prompt.startswith(" ") and not spec.prompt.endswith(" ")
    assert len(seen) == 11
    assert len(lengths) > 200


@pytest.mark.parametrize("system", [0, 4])
def test_every_length_is_exact(system: int, folder: Path) -> None:
    tok = load_tokenizer(folder)
    for n in range(system + 1, 330):  # the shortest ones have a tag shorter than 3 words
        mix = MixDef(
            buckets=[Bucket(name="b", prompt_tokens=(n, n))], output_tokens=(1, 1), system_prompt_tokens=system
        )
        sampler = RequestSampler({"m": mix}, {"m": 1.0}, seed=n, tokenizer=tok)
        for i in range(3):
            spec = sampler.spec_at(i)
            assert (tok.count(spec.system_prompt), tok.count(spec.prompt)) == (system, n - system), (n, i)


def test_exact_stream_is_seeded_and_shared_by_streams(folder: Path) -> None:
    tok = load_tokenizer(folder)
    a = RequestSampler(_mixes(), {"chat": 1.0}, seed=9, tokenizer=tok)
    b = RequestSampler(_mixes(), {"chat": 1.0}, seed=9, tokenizer=tok)
    assert [a.next() for _ in range(30)] == [b.next() for _ in range(30)]
    assert a.with_stream(2).spec_at(4) == RequestSampler(_mixes(), {"chat": 1.0}, 9, 2, tok).spec_at(4)
    prompts = [a.spec_at(i).prompt for i in range(300)]
    # Tags differ, so unrelated requests share no cacheable prefix beyond the system prompt.
    assert len({tuple(p.split(" ", 3)[:3]) for p in prompts}) == 300
    assert a.template_overhead("chat") == tok.chat_template_overhead(system=True)


def test_without_tokenizer_lengths_stay_approximate() -> None:
    sampler = RequestSampler(_mixes(), {"chat": 1.0}, seed=1)
    assert not sampler.exact_lengths and sampler.template_overhead("chat") is None


# --- the scenario field -------------------------------------------------------------------------------------

_SCENARIO = """\
variants: [{name: a, base_url: "http://127.0.0.1:1", model: m}]
traffic: {mixes: [{name: chat}, {name: rag}]}
tokenizer: %s
"""


def test_scenario_tokenizer_gives_exact_sampler(folder: Path) -> None:
    scenario = parse_scenario(_SCENARIO % f'"{folder}"')
    assert scenario.tokenizer == str(folder)
    sampler = sampler_for(scenario, 0)
    assert sampler.exact_lengths and sampler.tokenizer is load_tokenizer(folder)
    spec = sampler.spec_at(0)
    assert sampler.tokenizer.count(spec.system_prompt) + sampler.tokenizer.count(spec.prompt) == spec.prompt_tokens


def test_the_report_names_the_tokenizer_of_exact_lengths(folder: Path) -> None:
    from loadgen.measure.aggregate import Aggregate
    from loadgen.report import build_report, render_markdown

    report = build_report(parse_scenario(_SCENARIO % f'"{folder}"'), Aggregate(), 1.0)
    assert report["prompt_lengths"] == {"exact": True, "tokenizer": str(folder)}
    assert f"Prompt lengths: exact in the tokens of `{folder}`" in render_markdown(report)


def test_scenario_tokenizer_null_is_the_approximation() -> None:
    assert sampler_for(parse_scenario(_SCENARIO % "null"), 0).exact_lengths is False


def test_scenario_tokenizer_errors_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        parse_checked(_SCENARIO % f'"{tmp_path / "missing.gguf"}"', "s.yaml")
    assert err.value.exit_code == ExitCode.USAGE == 2
    [issue] = err.value.issues
    assert issue.path == "tokenizer" and issue.line == 3 and "does not exist" in issue.message


def test_missing_packages_are_a_config_error_with_the_fix(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tokenizer_module, "_CACHE", {})
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import tokenizers -> ImportError
    monkeypatch.setitem(sys.modules, "gguf", None)
    # Without a tokenizer the scenario needs neither package.
    assert parse_scenario(_SCENARIO % "null").tokenizer is None
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    for path in (folder, tmp_path / "m.gguf"):
        with pytest.raises(ConfigError) as err:
            parse_checked(_SCENARIO % f'"{path}"')
        [issue] = err.value.issues
        assert issue.path == "tokenizer" and INSTALL_HINT in issue.message and "tokenizers" in issue.message


def test_a_gguf_tokenizer_is_rebuilt_once_then_read_from_the_cache(
    tmp_path: Path, trained: Tokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loadgen.traffic import gguf_tokenizer

    monkeypatch.setenv("LOADGEN_CACHE_DIR", str(tmp_path / "cache"))
    path = _write_gguf(tmp_path / "m.gguf", trained)
    rebuilt: list[object] = []
    real = gguf_tokenizer._rebuild
    monkeypatch.setattr(gguf_tokenizer, "_rebuild", lambda p: rebuilt.append(p) or real(p))
    first = gguf_tokenizer.tokenizer_from_gguf(path)
    second = gguf_tokenizer.tokenizer_from_gguf(path)  # as the next process of the run would
    entry = gguf_tokenizer.cache_file(path)
    assert len(rebuilt) == 1 and entry is not None and entry.parent.parent == tmp_path / "cache"
    strings = _varied(300) + ["<|im_start|>user\nhi<|im_end|>"]
    assert [second.tokenizer.encode(s).ids for s in strings] == [first.tokenizer.encode(s).ids for s in strings]
    assert (second.add_bos, second.bos_token, second.chat_template, second.pre) == (
        first.add_bos,
        first.bos_token,
        first.chat_template,
        first.pre,
    )
    # Another tokenizer written over the file (digits no longer split one by one): its own, never the old entry.
    _write_gguf(path, trained, pre="gpt-2")
    third = gguf_tokenizer.tokenizer_from_gguf(path)
    assert len(rebuilt) == 2 and third.pre == "gpt-2"
    assert third.tokenizer.pre_tokenizer.pre_tokenize_str("12345") == [("12345", (0, 5))]
    # A damaged entry is rebuilt, not trusted; a cache that cannot be written costs a rebuild, not an error.
    entry = gguf_tokenizer.cache_file(path)
    assert entry is not None
    entry.write_text("{half an entry")
    assert gguf_tokenizer.tokenizer_from_gguf(path).pre == "gpt-2" and len(rebuilt) == 3
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("LOADGEN_CACHE_DIR", str(tmp_path / "a-file"))
    assert gguf_tokenizer.tokenizer_from_gguf(path).tokenizer.encode("twelve").ids and len(rebuilt) == 4
