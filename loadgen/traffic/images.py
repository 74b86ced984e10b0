"""Synthetic images for prompts (a mix's `images`, config/images.py): seeded pixels encoded once per process into a
pool of data URLs, and the per-request draw of which of them a request carries.

Encoding an image costs milliseconds to tens of milliseconds (a 1024 x 1024 JPEG ~35 ms here), far too much for the
event loop before every request, so each (size, format) has a pool of `distinct` images built when the sampler is
(`image_plans`); a request's images are references to the pool's strings, never copies. A server with a multimodal
cache (vLLM's processor / encoder caches, SGLang's) therefore meets repeats: `distinct` per size, the same on every
worker and in every run.

The pixels are smooth random colour fields (a coarse seeded grid, upscaled bicubically) with fine seeded grain over
them, so they compress about as photos do (1024 x 1024: ~0.28 MB as JPEG at quality 85, ~2.1 MB as PNG)
rather than to nothing (a flat colour) or not at all (pure noise). Member j of a pool depends on (seed, size,
format, j) only. The bytes depend on the Pillow build (its resampling and codecs); the sizes and the draws do not.

Pillow is imported when a pool is built, so only scenarios with images need it (`pip install 'llm-loadgen[images]'`).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import io
import random
import struct
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loadgen.config.images import Images
    from loadgen.config.scenario import Scenario
    from loadgen.config.traffic import MixDef

__all__ = ["ImagePlan", "data_url", "image_plans", "pillow_missing", "synthetic_image"]

# The coarse colour grid has one cell per this many pixels a side (at least 2 x 2 cells).
_CELL = 48
# How much fine grain is blended over the colour field (0: smooth, 1: pure noise).
_GRAIN = 0.1
_JPEG_QUALITY = 85
_MIME = {"png": "image/png", "jpeg": "image/jpeg"}
_TWO_53 = float(1 << 53)


def _seed_of(*parts: object) -> int:
    return int.from_bytes(hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=16).digest(), "big")


def synthetic_image(width: int, height: int, fmt: str, seed: int) -> bytes:
    """One image of `width` x `height` pixels encoded as `fmt` (png or jpeg), a function of its arguments alone."""
    from PIL import Image

    rng = random.Random(seed)
    gw, gh = max(2, -(-width // _CELL)), max(2, -(-height // _CELL))
    field = Image.frombytes("RGB", (gw, gh), rng.randbytes(gw * gh * 3))
    field = field.resize((width, height), Image.Resampling.BICUBIC)
    grain = Image.frombytes("L", (width, height), rng.randbytes(width * height)).convert("RGB")
    out = io.BytesIO()
    picture = Image.blend(field, grain, _GRAIN)
    if fmt == "jpeg":
        picture.save(out, "JPEG", quality=_JPEG_QUALITY)
    else:
        picture.save(out, "PNG")
    return out.getvalue()


def data_url(payload: bytes, fmt: str) -> str:
    """`payload` as a base64 data URL of `fmt`'s media type, as OpenAI's `image_url.url` takes it."""
    return f"data:{_MIME[fmt]};base64,{base64.b64encode(payload).decode('ascii')}"


class ImagePlan:
    """One mix's images: its pools (one per configured size, `distinct` data URLs each) and the draw of a
    request's images from the request's identity."""

    __slots__ = ("share", "low", "span", "pools")

    def __init__(self, images: Images, seed: int, cache: dict[tuple[int, int, str], tuple[str, ...]]) -> None:
        """`cache`: pools already built for other mixes of the sampler, by (width, height, format), shared with
        them (a pool has `distinct` members, the largest any mix of that size asked for, built first)."""
        self.share = images.share
        self.low, high = images.count
        self.span = high - self.low + 1
        pools = []
        for w, h in images.sizes:
            key = (w, h, images.format)
            pool = cache.get(key, ())
            if len(pool) < images.distinct:
                pool = pool + tuple(
                    data_url(synthetic_image(w, h, images.format, _seed_of("image", seed, w, h, images.format, j)),
                             images.format)
                    for j in range(len(pool), images.distinct)
                )  # fmt: skip
                cache[key] = pool
            pools.append(pool[: images.distinct])
        self.pools = pools

    def draw(self, identity: str) -> tuple[str, ...]:
        """The images of the request whose identity (its seed, stream and index, as the sampler spells them) is
        `identity`: () for one outside the share. A hash of its own, apart from the request's other draws."""
        digest = hashlib.blake2b(f"{identity}\x1fi".encode(), digest_size=64).digest()
        draws = struct.unpack(">8Q", digest)
        if (draws[0] >> 11) / _TWO_53 >= self.share:
            return ()
        k = self.low + ((draws[1] * self.span) >> 64)
        picks = list(draws[2:])
        while len(picks) < k:  # more than 6 images: further hashes
            more = hashlib.blake2b(f"{identity}\x1fi{len(picks)}".encode(), digest_size=64).digest()
            picks += struct.unpack(">8Q", more)
        pools, n = self.pools, len(self.pools)
        out = []
        for d in picks[:k]:
            # The high half picks the size, the low half the pool member: two independent 32-bit draws.
            pool = pools[((d >> 32) * n) >> 32]
            out.append(pool[((d & 0xFFFFFFFF) * len(pool)) >> 32])
        return tuple(out)


def image_plans(mixes: Mapping[str, MixDef], seed: int) -> dict[str, ImagePlan]:
    """The plans of the mixes that carry images, by name; mixes of one size and format share its pool."""
    cache: dict[tuple[int, int, str], tuple[str, ...]] = {}
    return {name: ImagePlan(mix.images, seed, cache) for name, mix in sorted(mixes.items()) if mix.images is not None}


def pillow_missing(scenario: Scenario) -> list[tuple[str, str]]:
    """(mix, why) for each mix of `scenario` that carries images when Pillow is not installed (checked before load)."""
    mixes = scenario.traffic.custom_mixes
    with_images = [ref.name for ref in scenario.traffic.mixes if getattr(mixes.get(ref.name), "images", None)]
    if not with_images or importlib.util.find_spec("PIL") is not None:
        return []
    why = "images in prompts are drawn with Pillow, which is not installed: pip install 'llm-loadgen[images]'"
    return [(name, why) for name in with_images]
