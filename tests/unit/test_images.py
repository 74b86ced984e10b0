"""Images in prompts (a mix's `images`): the per-request draw (share, count, size), its determinism across samplers
and its independence from the request's other draws, the data URLs (decoded with Pillow: the configured size and
format), the wire (OpenAI chat content parts), the simulator's bill for an image, the refusals, and the
(variant, mix, image count) slice through a worker's delta into the report."""

from __future__ import annotations

import base64
import io
import math
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from PIL import Image

from loadgen.cli import main
from loadgen.config.errors import ConfigError
from loadgen.config.scenario import validate_scenario
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.records import RequestRecord
from loadgen.protocol.dialects import dialect_for
from loadgen.report.group_json import bucket_json
from loadgen.report.images import image_lines, images_json
from loadgen.sim.framings.base import ApiError, _content_words
from loadgen.sim.image_tokens import image_words
from loadgen.traffic.images import data_url, synthetic_image
from loadgen.traffic.sampler import sampler_for

_SIZES = [[448, 448], [224, 336]]
_IMAGES = {"share": 0.4, "count": [1, 3], "sizes": _SIZES, "format": "jpeg", "distinct": 3}


def _scenario(images: dict[str, Any] | None = _IMAGES, dialect: str = "openai-chat", **mix_ref: Any) -> Any:
    mix: dict[str, Any] = {"buckets": [{"name": "s", "prompt_tokens": [20, 60]}], "output_tokens": [5, 50]}
    if images is not None:
        mix["images"] = images
    return validate_scenario(
        {
            "seed": 5,
            "variants": [{"name": "v", "base_url": "http://127.0.0.1:9", "model": "m", "dialect": dialect}],
            "traffic": {"mixes": [{"name": "vis", **mix_ref}, {"name": "chat"}], "custom_mixes": {"vis": mix}},
        }
    )


def _decoded(url: str) -> Image.Image:
    head, _, data = url.partition(",")
    image = Image.open(io.BytesIO(base64.b64decode(data)))
    assert head == f"data:image/{image.format.lower()};base64"
    return image


def test_a_share_of_the_mix_carries_images_counts_and_sizes_drawn_uniformly() -> None:
    sampler = sampler_for(_scenario(), 0).with_stream(3)
    specs = [sampler.spec_at(i) for i in range(6000)]
    vis = [s for s in specs if s.mix == "vis"]
    assert all(s.images is None for s in specs if s.mix == "chat")  # a mix without images: none, and no slice
    n = len(vis)
    carrying = [s for s in vis if s.images]
    # Share 0.4 within 4 standard deviations of a binomial draw.
    assert abs(len(carrying) / n - 0.4) < 4 * math.sqrt(0.4 * 0.6 / n)
    counts = Counter(len(s.images or ()) for s in carrying)
    assert set(counts) == {1, 2, 3}
    for k in (1, 2, 3):
        assert abs(counts[k] / len(carrying) - 1 / 3) < 4 * math.sqrt(2 / 9 / len(carrying))
    sizes = Counter(_decoded(url).size for s in carrying[:200] for url in s.images or ())
    assert set(sizes) == {(448, 448), (224, 336)}


def test_the_same_images_from_every_sampler_and_the_request_unchanged_by_them() -> None:
    one, two = sampler_for(_scenario(), 0).with_stream(1), sampler_for(_scenario(), 0).with_stream(1)
    plain = sampler_for(_scenario(images=None), 0).with_stream(1)
    other = sampler_for(_scenario(), 0).with_stream(2)
    seen: set[str] = set()
    for i in range(400):
        a, b, p = one.spec_at(i), two.spec_at(i), plain.spec_at(i)
        assert a.images == b.images  # every variant and worker gets the same images for the same request
        assert (a.mix, a.bucket, a.prompt, a.prompt_tokens, a.max_tokens) == (
            p.mix, p.bucket, p.prompt, p.prompt_tokens, p.max_tokens
        )  # fmt: skip
        seen.update(a.images or ())
    # A pool of `distinct` (3) images per size, shared strings: the same object for every request drawing it.
    assert len(seen) == 3 * len(_SIZES)
    pool = {url: url for url in seen}
    assert all(pool[url] is url for i in range(50) for url in one.spec_at(i).images or ())
    assert [one.spec_at(i).images for i in range(50)] != [other.spec_at(i).images for i in range(50)]


@pytest.mark.parametrize("fmt", ["png", "jpeg"])
def test_a_data_url_decodes_to_the_configured_size_and_format(fmt: str) -> None:
    url = data_url(synthetic_image(300, 170, fmt, 9), fmt)
    image = _decoded(url)
    assert image.size == (300, 170) and image.format == fmt.upper()
    assert synthetic_image(300, 170, fmt, 9) == synthetic_image(300, 170, fmt, 9) != synthetic_image(300, 170, fmt, 8)
    if fmt == "jpeg":  # compresses like a photo: neither to nothing nor not at all (raw: 153 kB)
        assert 5_000 < len(base64.b64decode(url.partition(",")[2])) < 60_000


def test_openai_chat_sends_the_prompt_then_one_image_url_part_per_image() -> None:
    sampler = sampler_for(_scenario(), 0)
    spec = next(s for s in (sampler.spec_at(i) for i in range(100)) if s.images and len(s.images) >= 2)
    body = orjson.loads(dialect_for("openai-chat").build_body(spec, "m", False))
    content = body["messages"][-1]["content"]
    assert content[0] == {"type": "text", "text": spec.prompt}
    assert content[1:] == [{"type": "image_url", "image_url": {"url": url}} for url in spec.images or ()]
    plain = next(s for s in (sampler.spec_at(i) for i in range(100)) if s.images == ())
    assert orjson.loads(dialect_for("openai-chat").build_body(plain, "m", False))["messages"][-1]["content"] == (
        plain.prompt
    )


def test_the_simulator_bills_an_image_by_its_size_as_words_of_its_bytes() -> None:
    a, b = (data_url(synthetic_image(100, 60, "png", s), "png") for s in (1, 2))
    words = image_words({"url": a})
    assert len(words) == math.ceil(100 / 28) * math.ceil(60 / 28) + 2 == 14
    assert image_words({"url": a}) == words and set(image_words({"url": b})[1:-1]).isdisjoint(words)
    parts = [{"type": "text", "text": "one two three"}, {"type": "image_url", "image_url": {"url": a}}]
    assert len(_content_words(parts)) == 3 + 14
    for bad in ({"url": "https://example.com/cat.png"}, {"url": "data:image/png;base64,AAAA"}, "x"):
        with pytest.raises(ApiError) as err:
            _content_words([{"type": "image_url", "image_url": bad}])
        assert err.value.status == 400


def test_images_refused_where_they_cannot_go(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match=r"variants\[0\]\.dialect"):
        _scenario(dialect="tgi")
    with pytest.raises(ConfigError, match=r"traffic\.mixes\[0\]\.sessions"):
        _scenario(sessions={"turns": 2})
    for bad, where in (({"count": [1, 33]}, "count"), ({"sizes": [[0, 10]]}, "sizes"), ({"share": 0}, "share")):
        with pytest.raises(ConfigError, match=where):
            _scenario(images={**_IMAGES, **bad})
    path = tmp_path / "s.yaml"
    path.write_text(
        "variants: [{name: v, base_url: 'http://127.0.0.1:9', model: m, dialect: openai-completions}]\n"
        "traffic: {mixes: [{name: vis}], custom_mixes: {vis: {buckets: [{name: s, prompt_tokens: [20, 30]}], "
        "output_tokens: [5, 9], images: {share: 1, sizes: [[64, 64]]}}}}\n",
        encoding="utf-8",
    )
    assert main(["validate", str(path)]) == 2
    assert "variants[0].dialect" in capsys.readouterr().err


def _record(n: int | None, ttft: float, mix: str = "vis") -> RequestRecord:
    rec = RequestRecord(f"r{n}-{ttft}", "v", mix, "s", sent=1.0, done=1.0 + ttft + 0.1, images=n, prompt_tokens=10)
    rec.chunk_times.extend([1.0 + ttft, 1.0 + ttft + 0.1])
    rec.chunk_tokens.extend([1, 1])
    return rec


def test_ttft_by_image_count_through_a_delta_into_the_report() -> None:
    worker = Aggregate()
    for n, ttft in ((0, 0.01), (0, 0.012), (1, 0.05), (2, 0.09), (None, 0.02)):
        worker.add(_record(n, ttft, "vis" if n is not None else "chat"), 0.0)
    master = Aggregate()
    master.merge_wire(worker.pop_delta())
    assert worker.images == {}
    rows = images_json(master, "v", "vis", bucket_json)["images"]
    assert {k: r["requests"] for k, r in rows.items()} == {"0": 2, "1": 1, "2": 1}
    assert rows["2"]["ttft_ms"]["p50"] == pytest.approx(90, rel=0.01)
    assert images_json(master, "v", "chat", bucket_json) == {}
    lines = image_lines({"variants": [{"name": "v", "mixes": {"vis": {"images": rows}, "chat": {}}}]})
    assert lines[1] == "## TTFT by image count (ms)" and sum(line.startswith("| v | vis |") for line in lines) == 3


def test_without_pillow_a_scenario_with_images_is_refused_before_load(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from loadgen.preflight import parse_checked

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "PIL" else real(name, *a))
    text = (
        "variants: [{name: v, base_url: 'http://127.0.0.1:9', model: m}]\n"
        "traffic: {mixes: [{name: vis}], custom_mixes: {vis: {buckets: [{name: s, prompt_tokens: [20, 30]}], "
        "output_tokens: [5, 9], images: {share: 1, sizes: [[64, 64]]}}}}\n"
    )
    with pytest.raises(ConfigError, match=r"custom_mixes\.vis\.images.*llm-loadgen\[images\]"):
        parse_checked(text, cluster=False)
