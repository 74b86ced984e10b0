"""Deployment-variant profiles for the simulated inference engine.

A profile is the whole cost model of one variant: how long prefill and decode steps take, how many sequences fit,
and whether speculative decoding or prefix caching is on. The numbers are shaped after a mid-size model on one GPU
(tens of ms per decode step, prefill an order of magnitude cheaper per token than decode) so that the latencies a
load test sees look plausible, not to predict any real deployment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from loadgen.registry import Registry

#: Prefix-cache granularity, as in vLLM's paged KV cache: only whole blocks are shared between requests.
BLOCK_SIZE = 16


@dataclass(frozen=True, slots=True)
class SimProfile:
    """Cost model of one simulated deployment variant (all times in milliseconds)."""

    name: str
    #: Largest batch: sequences decoded together in one step (vLLM ``--max-num-seqs``).
    max_num_seqs: int = 64
    #: KV-cache capacity in tokens; a sequence reserves ``prompt + max_tokens`` of it while it runs.
    kv_cache_tokens: int = 262_144
    #: Prompt tokens prefilled per step at most (vLLM ``--max-num-batched-tokens``): a burst of arrivals is admitted
    #: over several steps instead of one huge step that stalls every running stream. A longer prompt still goes
    #: alone (the simulator does not split a prompt across steps).
    max_prefill_tokens_per_step: int = 8192
    #: Prefill cost per 1000 prompt tokens that are not served from the prefix cache.
    prefill_ms_per_1k_tokens: float = 20.0
    #: Fixed cost of one forward pass (weights streamed from HBM once per step).
    decode_base_ms: float = 10.0
    #: Extra cost per sequence in the batch.
    decode_ms_per_seq: float = 0.05
    #: Extra cost per 1000 tokens of context (prompt + generated) held by the batch: attention reads the KV cache.
    decode_ms_per_1k_ctx: float = 0.02
    #: Speculative decoding: up to ``spec_k`` tokens per step per sequence (1 = off).
    spec_k: int = 1
    #: Probability that each draft token is accepted; drafts are checked in order and stop at the first reject.
    spec_acceptance: float = 0.0
    #: Reuse the KV of prompt blocks (16 tokens) that earlier requests already computed.
    prefix_caching: bool = False
    #: Order of the waiting queue, as vLLM's ``--scheduling-policy``: ``fcfs``, or ``priority`` (the request body's
    #: ``priority``, lower first, FCFS among equals). Under ``fcfs`` a request's priority is accepted and ignored.
    scheduling_policy: str = "fcfs"
    #: Quality: the share of a greedy reply's tokens (a request with ``temperature: 0``, OpenAI routes) that differ
    #: from the baseline's, as a lower-precision model's would. Which positions is drawn per request from the
    #: simulator's seed, the variant's name and the prompt, so the same request differs at the same positions in
    #: every run; the truth log records them (``kind: output``).
    perturb_share: float = 0.0
    #: A reasoning model: the first ``reasoning_tokens`` generated tokens of a chat reply (at most all of them) are
    #: its thinking, streamed in ``delta.reasoning_content`` before the answer's ``delta.content``, as vLLM with a
    #: reasoning parser, SGLang and DeepSeek do (a step that crosses over is sent as two events); the truth log
    #: records each request's count (``kind: reasoning``). Other routes stream every token as the answer.
    reasoning_tokens: int = 0
    #: LoRA adapters served beside the base model, named ``adapter-0`` … (0: none; any ``model`` is then the base).
    #: With adapters, another name is a 404, as vLLM answers it (loadgen/sim/lora.py).
    lora_adapters: int = 0
    #: Adapters loaded at once (vLLM ``--max-loras``): a request for another evicts the least recently used one that
    #: no running sequence uses, or waits.
    max_loras: int = 1
    #: Loading an adapter: added to the step that admits its request (the whole batch waits, as in vLLM's step).
    lora_load_ms: float = 100.0
    #: Extra cost per step per distinct adapter in the batch.
    lora_ms_per_adapter: float = 0.5
    description: str = ""

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1:
            raise ValueError(f"profile {self.name!r}: max_num_seqs must be >= 1")
        if self.max_prefill_tokens_per_step < 1:
            raise ValueError(f"profile {self.name!r}: max_prefill_tokens_per_step must be >= 1")
        if self.kv_cache_tokens < BLOCK_SIZE:
            raise ValueError(f"profile {self.name!r}: kv_cache_tokens must be >= {BLOCK_SIZE}")
        if self.spec_k < 1:
            raise ValueError(f"profile {self.name!r}: spec_k must be >= 1")
        if not 0.0 <= self.spec_acceptance <= 1.0:
            raise ValueError(f"profile {self.name!r}: spec_acceptance must be within [0, 1]")
        if not 0.0 <= self.perturb_share <= 1.0:
            raise ValueError(f"profile {self.name!r}: perturb_share must be within [0, 1]")
        if self.reasoning_tokens < 0:
            raise ValueError(f"profile {self.name!r}: reasoning_tokens must be >= 0")
        if self.lora_adapters < 0 or self.max_loras < 1 or min(self.lora_load_ms, self.lora_ms_per_adapter) < 0:
            raise ValueError(f"profile {self.name!r}: lora_adapters must be >= 0, max_loras >= 1, LoRA costs >= 0")
        if self.scheduling_policy not in ("fcfs", "priority"):
            raise ValueError(f"profile {self.name!r}: scheduling_policy must be fcfs or priority")
        costs = (self.prefill_ms_per_1k_tokens, self.decode_base_ms, self.decode_ms_per_seq, self.decode_ms_per_1k_ctx)
        if min(costs) < 0:
            raise ValueError(f"profile {self.name!r}: costs must be >= 0")

    @property
    def expected_tokens_per_step(self) -> float:
        """Mean tokens a running sequence emits per step: 1 + a + a^2 + ... + a^(k-1)."""
        a = self.spec_acceptance
        return float(sum(a**i for i in range(self.spec_k)))

    def decode_step_ms(self, batch: int, ctx_tokens: int) -> float:
        """Duration of one decode step for ``batch`` sequences holding ``ctx_tokens`` tokens of context."""
        return self.decode_base_ms + self.decode_ms_per_seq * batch + self.decode_ms_per_1k_ctx * ctx_tokens / 1000

    def prefill_ms(self, uncached_tokens: int) -> float:
        return self.prefill_ms_per_1k_tokens * uncached_tokens / 1000

    def scaled(self, name: str, factor: float, description: str, **changes: Any) -> SimProfile:
        """A copy with every prefill/decode cost multiplied by ``factor`` (plus any field ``changes``)."""
        return replace(
            self,
            name=name,
            prefill_ms_per_1k_tokens=self.prefill_ms_per_1k_tokens * factor,
            decode_base_ms=self.decode_base_ms * factor,
            decode_ms_per_seq=self.decode_ms_per_seq * factor,
            decode_ms_per_1k_ctx=self.decode_ms_per_1k_ctx * factor,
            description=description,
            **changes,
        )

    def with_changes(self, changes: Mapping[str, str]) -> SimProfile:
        """A copy with the fields ``changes`` names set from their text (``--set`` flags): ``max_num_seqs=4``,
        ``scheduling_policy=priority``, ``prefix_caching=true``. Unknown fields and bad values raise ValueError."""
        known = {f.name: f for f in fields(self) if f.name not in ("name", "description")}
        values: dict[str, Any] = {}
        for key, text in changes.items():
            if key not in known:
                raise ValueError(f"profile {self.name!r} has no field {key!r}; fields: {', '.join(sorted(known))}")
            kind = type(getattr(self, key))
            if kind is bool:
                if text.lower() not in ("true", "false"):
                    raise ValueError(f"{key}: expected true or false, got {text!r}")
                values[key] = text.lower() == "true"
            else:
                try:
                    values[key] = kind(text)
                except ValueError:
                    expected = {int: "a whole number", float: "a number"}.get(kind, kind.__name__)
                    raise ValueError(f"{key}: expected {expected}, got {text!r}") from None
        return replace(self, **values)


def parse_set_arg(text: str) -> tuple[str, str, str]:
    """``VARIANT:FIELD=VALUE`` -> (variant, field, value text)."""
    variant, sep, rest = text.partition(":")
    key, eq, value = rest.partition("=")
    if not sep or not eq or not variant or not key:
        raise ValueError(f"--set {text!r}: expected VARIANT:FIELD=VALUE, e.g. a:max_num_seqs=4")
    return variant, key.strip(), value.strip()


def _builtin_profiles() -> list[SimProfile]:
    baseline = SimProfile(
        name="baseline",
        description="FP16 weights, no speculation, no prefix caching: the reference variant.",
    )
    return [
        baseline,
        # INT8 costs some accuracy (the seeds: 1-3 %): 2 % of a greedy reply's tokens differ from the baseline's.
        baseline.scaled(
            "int8",
            0.6,
            "INT8 weight quantization: every step moves fewer bytes, so prefill and decode cost x0.6; 2 % of a "
            "greedy reply's tokens differ from the baseline's.",
            perturb_share=0.02,
        ),
        # x1.25 per step for running the draft model, but ~2.53 tokens per step at k=4, a=0.7: about 2x faster
        # per output token than baseline, and several tokens per SSE chunk (what trips per-chunk ITL math).
        baseline.scaled(
            "spec-decode",
            1.25,
            "Speculative decoding, 4 tokens per step at most, 70% draft acceptance (~2.5 tokens per chunk).",
            spec_k=4,
            spec_acceptance=0.7,
        ),
        replace(
            baseline,
            name="prefix-cache",
            prefix_caching=True,
            description="Baseline with automatic prefix caching: shared prompt prefixes skip prefill.",
        ),
        # FP8 KV cache halves bytes per cached token: twice the capacity, slightly cheaper attention.
        replace(
            baseline,
            name="fp8-kv",
            kv_cache_tokens=2 * baseline.kv_cache_tokens,
            max_num_seqs=128,
            decode_ms_per_1k_ctx=baseline.decode_ms_per_1k_ctx * 0.6,
            description="FP8 KV cache: twice the KV capacity and batch size, cheaper attention per context token.",
        ),
    ]


def profile_registry() -> Registry[SimProfile]:
    """A fresh registry of the built-in profiles (callers may register their own without affecting others)."""
    registry: Registry[SimProfile] = Registry("simulator profile")
    for profile in _builtin_profiles():
        registry.register(profile.name, profile)
    return registry


def get_profile(name: str) -> SimProfile:
    """The built-in profile ``name``; an unknown name raises ``UnknownNameError`` listing the known ones."""
    return profile_registry().get(name)
