"""What an `image_url` content part costs the simulated server: prompt tokens from the image's size, by Qwen2-VL's
rule (one token per 28 x 28 patch, ceil(w/28) * ceil(h/28), plus 2 for the vision start and end markers).

The tokens are placeholder words derived from the image's bytes: the same image is the same words (so a prefix
cache shares it like any prompt text), a different one other words. usage.prompt_tokens is then the text's words
plus every image's tokens, and prefill is charged for them like any prompt token.

The size comes from the image's header (Pillow, imported with this module, i.e. only when an image arrives); a
pool of synthetic images repeats, so the words are kept per data URL (a small LRU cache).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import math
from functools import lru_cache
from typing import Any

from PIL import Image, UnidentifiedImageError

__all__ = ["PATCH", "image_tokens", "image_words"]

#: Pixels a side of one image token (Qwen2-VL: 14-pixel patches merged 2 x 2).
PATCH = 28
#: Markers around an image's tokens (<|vision_start|>, <|vision_end|>).
_MARKERS = 2


def image_tokens(width: int, height: int) -> int:
    """Prompt tokens an image of `width` x `height` pixels costs (markers included)."""
    return math.ceil(width / PATCH) * math.ceil(height / PATCH) + _MARKERS


def image_words(image_url: Any) -> tuple[str, ...]:
    """The placeholder words of an `image_url` part's value (`{"url": "data:image/...;base64,..."}`); ValueError
    for a part the simulator cannot read (the route answers 400)."""
    url = image_url.get("url") if isinstance(image_url, dict) else None
    if not isinstance(url, str):
        raise ValueError("an image_url part needs image_url.url (a string)")
    return _words_of(url)


@lru_cache(maxsize=256)
def _words_of(url: str) -> tuple[str, ...]:
    head, _, data = url.partition(",")
    if not (head.startswith("data:image/") and head.endswith(";base64")):
        raise ValueError("the simulator takes images as base64 data URLs (data:image/...;base64,...) only")
    try:
        payload = base64.b64decode(data, validate=True)
        with Image.open(io.BytesIO(payload)) as image:  # reads the header only
            width, height = image.size
    except (binascii.Error, UnidentifiedImageError, OSError, ValueError) as e:
        raise ValueError(f"image_url is not a readable image: {e}") from None
    tag = hashlib.blake2b(payload, digest_size=6).hexdigest()
    inner = image_tokens(width, height) - _MARKERS
    return ("<vision_start>", *(f"<img{tag}_{i}>" for i in range(inner)), "<vision_end>")
