"""Quality beside speed: each variant's replies against the baseline's for the same requests, `report["quality"]`.

With `quality:` in the scenario the run keeps a bounded sample of reply texts, the same requests in every variant
(measure/outputs.py). A request the baseline and the variant both answered is a pair; per variant, per mix and over
all mixes:

- `agreement`: of the first k token positions (k = `quality.first_k`), the share where the variant's token is the
  baseline's. Pooled over the pairs: sum of agreeing positions / sum of positions compared, a pair comparing
  min(k, the longer reply's length) positions (a position one reply does not reach disagrees).
- `exact_match`: the share of pairs whose texts are identical (the kept text: the first `MAX_CHARS` characters).
- `edit_similarity`: the mean over pairs of 1 − Levenshtein distance / the longer reply's length, in tokens (1: the
  same tokens; two empty replies are the same).

`accuracy` (when dataset rows carry a reference answer, `expected`: traffic/references.py): per variant (the
baseline too) and mix, the share of its successful requests with a reference whose reply was right, with a Wilson
score interval; every such request of the window is judged, not only the sampled ones.

Tokens are the scenario's tokenizer's (its token ids) when it names a local one (`tokenizer:` a file or folder),
else the reply split on whitespace (`tokens: "whitespace"`: words, the simulator's tokens exactly); the report says
which. Each figure has a percentile interval from `RESAMPLES` Poisson-bootstrap resamples of the pairs, seeded with
crc32 of "<scenario seed>/<variant>/<mix>/quality". The comparison means something only when decoding is greedy and
seeded in every variant (temperature 0): sampled replies differ between two runs of the same deployment.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Hashable, Sequence
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

import numpy as np

from loadgen.measure.aggregate import Aggregate
from loadgen.measure.outputs import MAX_CHARS, OUTPUT_CAP
from loadgen.report.bootstrap import FloatArray, percentile_interval
from loadgen.report.compare import CONFIDENCE, RESAMPLES
from loadgen.report.numbers import counted, percent_ci
from loadgen.traffic.tokenizer import SERVER_TOKENIZER, TokenizerError, load_tokenizer

if TYPE_CHECKING:
    from loadgen.config.scenario import Scenario

__all__ = [
    "ALL_MIXES",
    "build_quality",
    "levenshtein",
    "quality_headline",
    "quality_section",
    "wilson",
    "whitespace_tokens",
]

# The mix key of a variant's figures over all its mixes.
ALL_MIXES = "*"
Tokens = Sequence[Hashable]


def whitespace_tokens(text: str) -> list[str]:
    return text.split()


def levenshtein(a: Tokens, b: Tokens) -> int:
    """Edit distance (insertions, deletions, substitutions of one token) by the bit-parallel algorithm of Myers
    (1999) as Hyyrö (2003) gives it for Levenshtein: one pass over `a` with `b`'s positions as the bits of Python
    ints, O(len(a)) big-int steps instead of the O(len(a) x len(b)) table: 0.3 ms, not 40 ms, for two replies of
    500 tokens."""
    if len(a) < len(b):
        a, b = b, a
    m = len(b)
    if m == 0:
        return len(a)
    peq: dict[Hashable, int] = {}
    for i, t in enumerate(b):
        peq[t] = peq.get(t, 0) | (1 << i)
    full, last = (1 << m) - 1, 1 << (m - 1)
    vp, vn, dist = full, 0, m
    for t in a:
        x = peq.get(t, 0)
        d0 = ((((x & vp) + vp) ^ vp) | x | vn) & full
        hp = (vn | ~(d0 | vp)) & full
        hn = d0 & vp
        if hp & last:
            dist += 1
        elif hn & last:
            dist -= 1
        hp = ((hp << 1) | 1) & full
        hn = (hn << 1) & full
        vp = (hn | ~(d0 | hp)) & full
        vn = hp & d0
    return dist


def _pair_figures(a: Tokens, b: Tokens, k: int) -> tuple[int, int, float]:
    """(agreeing positions, positions compared, edit similarity) of one pair."""
    n = min(k, max(len(a), len(b)))
    agree = sum(1 for x, y in zip(a[:n], b[:n], strict=False) if x == y)
    longest = max(len(a), len(b))
    similarity = 1.0 if longest == 0 else 1.0 - levenshtein(a, b) / longest
    return agree, n, similarity


def _interval(
    num: FloatArray, den: FloatArray | None, weights: FloatArray, confidence: float
) -> tuple[float | None, float | None]:
    """Interval of sum(w·num) / sum(w·den) (den None: the weighted mean of num) over the resamples' weights."""
    d = weights.sum(axis=1) if den is None else weights @ den
    with np.errstate(divide="ignore", invalid="ignore"):
        boots = (weights @ num) / d
    ci = percentile_interval(boots[d > 0], confidence)
    return (None, None) if ci is None else (round(float(ci[0]), 4), round(float(ci[1]), 4))


def _figures(rows: list[tuple[int, int, float, bool]], resamples: int, confidence: float, seed: int) -> dict[str, Any]:
    agree = np.array([r[0] for r in rows], dtype=np.float64)
    compared = np.array([r[1] for r in rows], dtype=np.float64)
    similarity = np.array([r[2] for r in rows], dtype=np.float64)
    exact = np.array([r[3] for r in rows], dtype=np.float64)
    weights = np.random.default_rng(seed).poisson(1.0, (resamples, len(rows))).astype(np.float64)
    out: dict[str, Any] = {"pairs": len(rows), "positions": int(compared.sum())}
    point = float(agree.sum() / compared.sum()) if compared.sum() else None
    lo, hi = _interval(agree, compared, weights, confidence) if point is not None else (None, None)
    out["agreement"] = {"value": None if point is None else round(point, 4), "ci_low": lo, "ci_high": hi}
    for name, values in (("exact_match", exact), ("edit_similarity", similarity)):
        lo, hi = _interval(values, None, weights, confidence)
        out[name] = {"value": round(float(values.mean()), 4), "ci_low": lo, "ci_high": hi}
    return out


def token_splitter(tokenizer: Any | None) -> tuple[Callable[[str], Tokens], str]:
    """How replies are cut into tokens, and its name for the report: the scenario's tokenizer's ids, else words."""
    if tokenizer is None:
        return whitespace_tokens, "whitespace"
    return tokenizer.encode, "tokenizer"


def build_quality(
    agg: Aggregate,
    variants: list[str],
    baseline: str,
    seed: int,
    first_k: int,
    tokenizer: Any | None = None,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
) -> dict[str, Any]:
    """The quality section: how it was measured, and one entry per (non-baseline variant, mix) with pairs, the
    variant's figures over all its mixes under mix `ALL_MIXES`."""
    split, source = token_splitter(tokenizer)
    base = agg.outputs.of(baseline)
    base_tokens = {h: split(text) for h, (_, text) in base.items()}
    entries: list[dict[str, Any]] = []
    for v in variants:
        if v == baseline:
            continue
        by_mix: dict[str, list[tuple[int, int, float, bool]]] = {}
        for h, (mix, text) in agg.outputs.of(v).items():
            if h not in base:
                continue
            row = (*_pair_figures(base_tokens[h], split(text), first_k), text == base[h][1])
            by_mix.setdefault(mix, []).append(row)
        every = [r for rows in by_mix.values() for r in rows]
        groups = ([(ALL_MIXES, every)] if every else []) + sorted(by_mix.items())
        for mix, rows in groups:
            s = zlib.crc32(f"{seed}/{v}/{mix}/quality".encode())
            entries.append({"variant": v, "baseline": baseline, "mix": mix, **_figures(rows, resamples, confidence, s)})
    return {
        "method": {
            "first_k": first_k,
            "tokens": source,
            "sample_cap": OUTPUT_CAP,
            "max_chars": MAX_CHARS,
            "resamples": resamples,
            "confidence": confidence,
            "bootstrap": "poisson, over pairs",
            "seed_rule": "crc32('<scenario seed>/<variant>/<mix>/quality')",
        },
        "entries": entries,
    }


def wilson(right: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The Wilson score interval of a share `right` / `n` (n > 0): unlike the normal one, it stays within [0, 1]
    and has its level near 0 % and 100 %, where a model's accuracy often is."""
    z = float(NormalDist().inv_cdf(0.5 + confidence / 2))
    p = right / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def accuracy_entries(agg: Aggregate, variants: list[str], confidence: float = CONFIDENCE) -> list[dict[str, Any]]:
    """Per variant and mix (mix `ALL_MIXES`: all of them) with judged requests: the share answered right."""
    out = []
    for v in variants:
        by_mix = {m: c for (vn, m), c in sorted(agg.outputs.judged.items()) if vn == v and c[0]}
        if not by_mix:
            continue
        every = [sum(c[0] for c in by_mix.values()), sum(c[1] for c in by_mix.values())]
        for mix, (n, right) in [(ALL_MIXES, every), *by_mix.items()]:
            lo, hi = wilson(right, n, confidence)
            share = {"value": round(right / n, 4), "ci_low": round(lo, 4), "ci_high": round(hi, 4)}
            out.append({"variant": v, "mix": mix, "judged": n, "right": right, "accuracy": share})
    return out


def quality_headline(entry: dict[str, Any], speedup: float | None, first_k: int) -> str:
    """ "int8: 1.60× faster (E2E p50), 97.2 % (96.1–98.1) agreement with baseline on the first 64 tokens"."""
    if speedup is None:
        speed = "speedup unknown"
    elif speedup >= 1.0:
        speed = f"{speedup:.2f}× faster (E2E p50)"
    else:
        speed = f"{1.0 / speedup:.2f}× slower (E2E p50)"
    a = entry["agreement"]
    return (
        f"{entry['variant']}: {speed}, {percent_ci(a['value'], a['ci_low'], a['ci_high'])} agreement "
        f"with {entry['baseline']} on the first {counted(first_k, 'token')} ({counted(entry['pairs'], 'pair')})"
    )


def _local_tokenizer(name: str | None) -> tuple[Any | None, str]:
    """The scenario's tokenizer when it is a local one, and why not otherwise ("" when it is)."""
    if name is None:
        return None, "the scenario names no tokenizer"
    if name == SERVER_TOKENIZER:
        return None, "tokenizer: server (a request per reply to the target) is not used to compare replies"
    try:
        return load_tokenizer(name), ""
    except TokenizerError as e:
        return None, f"the scenario's tokenizer could not be loaded here: {e}"


def quality_section(scenario: Scenario, agg: Aggregate, comparison: list[dict[str, Any]]) -> dict[str, Any] | None:
    """`report["quality"]` for a scenario with `quality:` (None without), each variant's figures over all its mixes
    with its E2E p50 speedup from the comparison (the report's one definition) and a headline in words."""
    q = scenario.quality
    if q is None:
        return None
    tokenizer, why_not = _local_tokenizer(scenario.tokenizer)
    baseline = scenario.baseline_variant.name
    out = build_quality(agg, [v.name for v in scenario.variants], baseline, scenario.seed, q.first_k, tokenizer)
    if why_not:
        out["method"]["tokens_note"] = f"words split on whitespace: {why_not}"
    accuracy = accuracy_entries(agg, [v.name for v in scenario.variants])
    if accuracy:
        out["accuracy"] = accuracy
    if agg.outputs.is_empty():  # e.g. a report rebuilt from raw records, which keep no reply text
        out["method"]["note"] = "no reply text reached this report (raw records do not keep replies)"
    speedups = {e["variant"]: e["speedup"] for e in comparison if e["metric"] == "e2e" and e["stat"] == "p50"}
    for e in out["entries"]:
        if e["mix"] == ALL_MIXES:
            e["speedup_e2e_p50"] = speedups.get(e["variant"])
            e["headline"] = quality_headline(e, e["speedup_e2e_p50"], q.first_k)
    return out
