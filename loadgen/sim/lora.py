"""LoRA adapters served by a simulated variant (the profile's ``lora_adapters``), as vLLM serves them with
``--enable-lora --lora-modules name=path --max-loras N``.

A variant with ``lora_adapters: N`` serves ``adapter-0`` … ``adapter-{N-1}`` beside its base model (the variant's
name): a request's ``model`` names one of them, and any other name is a 404 as vLLM answers it ("The model `x`
does not exist."). At most ``max_loras`` adapters are loaded at once (vLLM's GPU LoRA slots): a request for one
that is not loaded is admitted once a slot is free or held by an adapter no running sequence uses (the least
recently used is evicted), and loading it adds ``lora_load_ms`` to the step that admits it, for the whole batch,
as vLLM loads an adapter inside the engine step; a swapped-out adapter pays the load again. A request whose
adapter cannot get a slot (every slot held by running sequences) waits, and requests behind it go first, as vLLM's
scheduler skips it. Each step also costs ``lora_ms_per_adapter`` per distinct adapter in the batch (the batched
LoRA kernels' work grows with them). The truth log records each request's adapter and the load it paid.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterable

import orjson

from loadgen.sim.framings import ApiError
from loadgen.sim.profiles import SimProfile

__all__ = ["LoraSlots", "adapter_names", "models_body", "resolve_adapter"]


def adapter_names(profile: SimProfile) -> list[str]:
    """The adapters a variant of ``profile`` serves."""
    return [f"adapter-{i}" for i in range(profile.lora_adapters)]


def resolve_adapter(profile: SimProfile, base: str, model: str) -> str:
    """The adapter a request asking for ``model`` runs on ("": the base model, also when the variant serves no
    adapters: then any name is taken as its model). An unknown name, with adapters served, is vLLM's 404."""
    if not profile.lora_adapters or model in ("", base):
        return ""
    if model.startswith("adapter-") and model[8:].isdigit() and int(model[8:]) < profile.lora_adapters:
        return model
    raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError")


def models_body(name: str, profile: SimProfile) -> bytes:
    """``/v1/models``: the base model, and each adapter with its ``parent`` as vLLM lists them."""
    created = int(time.time())
    base = {
        "id": name,
        "object": "model",
        "created": created,
        "owned_by": "loadgen-sim",
        "root": name,
        "parent": None,
        "max_model_len": profile.kv_cache_tokens,
        "description": profile.description,
    }
    loras = [
        {"id": a, "object": "model", "created": created, "owned_by": "loadgen-sim", "root": f"/sim/{a}", "parent": name}
        for a in adapter_names(profile)
    ]
    return orjson.dumps({"object": "list", "data": [base, *loras]})


class LoraSlots:
    """The adapters loaded at once (at most ``max_loras``), least recently used first."""

    __slots__ = ("_capacity", "_loaded", "loads")

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._loaded: OrderedDict[str, None] = OrderedDict()
        self.loads = 0

    def acquire(self, adapter: str, in_use: Iterable[str]) -> bool | None:
        """Make ``adapter`` loaded for a sequence about to run: False when it was already (no cost), True when it is
        loaded now (it pays the load; an unused adapter may be evicted for it), None when every slot is held by an
        adapter of ``in_use`` (the sequence waits)."""
        loaded = self._loaded
        if adapter in loaded:
            loaded.move_to_end(adapter)
            return False
        if len(loaded) >= self._capacity:
            busy = set(in_use)
            victim = next((a for a in loaded if a not in busy), None)
            if victim is None:
                return None
            del loaded[victim]
        loaded[adapter] = None
        self.loads += 1
        return True
