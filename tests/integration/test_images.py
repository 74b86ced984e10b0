"""Images in prompts against the simulator: what the server billed, and what the images cost it.

The simulator bills a request's prompt as its text words plus, per image, Qwen2-VL's ceil(w/28) * ceil(h/28) + 2
tokens (loadgen/sim/image_tokens.py), and prefills them at the profile's cost (here 100 ms per 1,000 tokens, so an
image of 258 or 386 tokens costs ~26-39 ms of prefill). The ground truth is computed here on its own: each record's
request is drawn again from the scenario's sampler (its stream and index are in its id), its images decoded with
Pillow for their sizes, its text counted in words; and TTFT by image count is read from the simulator's truth log
(first-token write minus arrival), beside the report's.

Note: the shipped llama.cpp model (SmolLM2-135M) is not multimodal, so there is no llama.cpp test of images.
"""

from __future__ import annotations

import base64
import io
import math
import statistics
import time
from collections import defaultdict
from pathlib import Path

from PIL import Image

from loadgen.config.scenario import load_scenario
from loadgen.sim.launch import start_sim_process
from loadgen.sim.truth import load_truth
from loadgen.traffic.sampler import sampler_for

from .harness import read_records, read_report, run_loadgen, write_scenario

_IMAGES = {"share": 0.8, "count": [1, 3], "sizes": [[448, 448], [672, 448]], "format": "jpeg", "distinct": 4}


def _tokens(url: str) -> int:
    with Image.open(io.BytesIO(base64.b64decode(url.partition(",")[2]))) as image:
        w, h = image.size
    return math.ceil(w / 28) * math.ceil(h / 28) + 2


def test_prompt_tokens_are_words_plus_image_tokens_and_ttft_rises_with_the_count(tmp_path: Path) -> None:
    truth_path = tmp_path / "truth.jsonl"
    with start_sim_process(
        ["vis=baseline"], truth_log=truth_path, profile_changes={"vis": {"prefill_ms_per_1k_tokens": "100"}}
    ) as sim:
        path = write_scenario(
            tmp_path / "images.yaml",
            {"vis": sim.base_url("vis")},
            traffic={
                "mixes": [{"name": "vis"}],
                "custom_mixes": {
                    "vis": {
                        "buckets": [{"name": "s", "prompt_tokens": [30, 60]}],
                        "output_tokens": [4, 8],
                        "images": _IMAGES,
                    }
                },
            },
            load={"users": 2, "duration": "5s", "warmup": 0},
            slos=[],
        )
        proc = run_loadgen(path, "--workers", "0", "--raw-records", str(tmp_path / "raw"))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        time.sleep(1.5)  # the simulator flushes its truth log every second
    truth = load_truth(truth_path, variant="vis")
    records = [r for r in read_records(tmp_path / "raw") if r["error"] is None and not r["cut_by_stop"]]
    assert len(records) > 40
    sampler = sampler_for(load_scenario(path), 0)
    ttft_by_count: dict[int, list[float]] = defaultdict(list)
    for r in records:
        _, stream, index = r["id"].rsplit("-", 2)
        spec = sampler.with_stream(int(stream)).spec_at(int(index))
        images = spec.images or ()
        assert r["images"] == len(images)
        text_words = len(spec.prompt.split()) + len(spec.system_prompt.split())
        assert r["prompt_tokens"] == text_words + sum(_tokens(url) for url in images), r["id"]
        t = truth[r["id"]]
        assert t.arrival is not None
        ttft_by_count[len(images)].append(t.chunk_times[0] - t.arrival)
    assert set(ttft_by_count) == {0, 1, 2, 3}
    medians = [statistics.median(ttft_by_count[k]) for k in (0, 1, 2, 3)]
    # Each image adds ~26-39 ms of prefill (a decode step is ~10 ms): the server's own TTFT rises with the count.
    assert all(b - a > 0.01 for a, b in zip(medians, medians[1:], strict=False)), medians
    report = read_report(tmp_path / "report")
    rows = report["variants"][0]["mixes"]["vis"]["images"]
    assert {k: v["requests"] for k, v in rows.items()} == {str(k): len(v) for k, v in ttft_by_count.items()}
    reported = [rows[str(k)]["ttft_ms"]["p50"] for k in (0, 1, 2, 3)]
    assert reported == sorted(reported) and reported[3] - reported[0] > 40, reported
    md = (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    assert "## TTFT by image count (ms)" in md
