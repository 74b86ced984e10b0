"""Write the sample traces shipped in loadgen/examples/traces/ (one per format loadgen replays), seeded, so the tests
and the docs replay the same files. They are small stand-ins written here, not excerpts of the published traces:

- mooncake-sample.jsonl: 200 rows over ~20 s. 40 conversations of 4 turns, each opening with one of 4 shared
  two-block system prompts; a turn resends its conversation's blocks so far plus one new block and a partial block
  of its own (fresh id), 2-4 s after the previous turn; 40 one-off rows with ids of their own. The first use of
  each system prompt comes at least 0.5 s before any other, so "seen earlier" is unambiguous on the wire.
- azure-sample.csv: 200 rows, Poisson at 10 req/s, the Azure LLM inference trace's columns.
- burstgpt-sample.csv: 200 rows, gamma gaps (bursty) at ~10 req/s, BurstGPT's columns, 6 failed rows (0 response
  tokens) that a replay leaves out.

Run: python scripts/gen-sample-traces.py (rewrites the three files).
"""

from __future__ import annotations

import csv
import json
import random
from datetime import datetime, timedelta
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "loadgen" / "examples" / "traces"
BLOCK = 512


def mooncake(rng: random.Random) -> list[dict[str, object]]:
    next_id = iter(range(10_000, 10**9))
    systems = [[1000 + 2 * k, 1001 + 2 * k] for k in range(4)]
    rows = []
    for c in range(40):
        system = c % 4
        # The first conversation of each system prompt opens it early; the others at least 0.5 s after.
        t = 0.05 * system if c < 4 else rng.uniform(0.6, 8.0)
        blocks = list(systems[system])
        for _turn in range(4):
            blocks.append(next(next_id))
            partial = rng.randint(40, 400)
            ids = [*blocks, next(next_id)]  # the partial block: an id of its own, as a chained hash would give
            rows.append(
                {
                    "timestamp": round(t * 1000),
                    "input_length": len(blocks) * BLOCK + partial,
                    "output_length": rng.randint(16, 120),
                    "hash_ids": ids,
                }
            )
            t += rng.uniform(2.0, 4.0)
    for _ in range(40):
        n = rng.randint(100, 1500)
        ids = [next(next_id) for _ in range(-(-n // BLOCK))]
        rows.append(
            {
                "timestamp": round(rng.uniform(0.2, 19.5) * 1000),
                "input_length": n,
                "output_length": rng.randint(16, 200),
                "hash_ids": ids,
            }
        )
    rows.sort(key=lambda r: r["timestamp"])  # type: ignore[arg-type,return-value]
    return rows


def azure(rng: random.Random) -> list[list[object]]:
    t = datetime(2023, 11, 16, 18, 15, 46)
    rows: list[list[object]] = []
    for _ in range(200):
        t += timedelta(seconds=rng.expovariate(10.0))
        context = max(1, min(4000, int(rng.lognormvariate(6.5, 0.8))))
        rows.append([t.strftime("%Y-%m-%d %H:%M:%S.%f") + "0", context, rng.randint(8, 300)])
    return rows


def burstgpt(rng: random.Random) -> list[list[object]]:
    t = 0.0
    rows: list[list[object]] = []
    failed = set(rng.sample(range(200), 6))
    for i in range(200):
        t += rng.gammavariate(0.25, 0.4)  # mean 0.1 s, CV 2: bursts
        request = max(1, int(rng.lognormvariate(6.0, 0.9)))
        response = 0 if i in failed else rng.randint(4, 400)
        model = rng.choice(["ChatGPT", "GPT-4"])
        log = rng.choice(["Conversation log", "API log"])
        rows.append([round(t, 3), model, request, response, request + response, log])
    return rows


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    rows = mooncake(random.Random(20240601))
    (OUT / "mooncake-sample.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with (OUT / "azure-sample.csv").open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
        w.writerows(azure(random.Random(20231116)))
    with (OUT / "burstgpt-sample.csv").open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"])
        w.writerows(burstgpt(random.Random(2401)))


if __name__ == "__main__":
    main()
