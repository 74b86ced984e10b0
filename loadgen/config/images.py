"""Images in prompts (`traffic.custom_mixes.<name>.images`): a share of a mix's requests carries k synthetic images
as OpenAI chat content parts (`image_url` with a base64 data URL), as a vision-language model's users send them.

Which requests, how many images and of which size are drawn from the request's identity (seed, stream, index) in a
draw of their own (traffic/sampler.py), so a request's prompt and lengths are the same with images on or off, and
every variant gets the same images. The pixels are synthetic and seeded (traffic/images.py, Pillow): a pool of
`distinct` images per size, encoded once per process, so a server with a multimodal cache sees repeats.

Only the openai-chat dialect carries images: a scenario whose mixes carry them and a variant of another dialect is
refused (exit 2) naming `variants[i].dialect` (`image_issues`). Nor do sessions: their follow-up turns would resend
the history without its images.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator

from loadgen.config.types import TokenRange
from loadgen.protocol.dialects import get_dialect

__all__ = ["IMAGES_DOC", "MAX_IMAGE_SIDE", "MAX_IMAGES", "Images", "image_issues"]

# At most this many images per request (vLLM's `--limit-mm-per-prompt` caps what a server takes; most take few).
MAX_IMAGES = 32
# Pixels per side at most: a 4096 x 4096 image is already ~48 MB raw, several MB encoded, per pool member.
MAX_IMAGE_SIDE = 4096

IMAGES_DOC = (
    "Images in prompts, e.g. {share: 0.5, count: [1, 2], sizes: [[512, 512], [1024, 768]], format: jpeg}: that "
    "share of the mix's requests carries k images (k uniform in count), each of a size drawn from sizes, sent as "
    "OpenAI chat `image_url` parts with base64 data URLs (openai-chat variants only). Synthetic, seeded: every "
    "variant gets the same images; the report gives TTFT by image count. Null: text only."
)


class Images(BaseModel):
    """Synthetic images carried by a share of a mix's requests."""

    model_config = ConfigDict(extra="forbid")

    share: float = Field(
        gt=0, le=1, allow_inf_nan=False, description="Share of the mix's requests that carry images (0 < share <= 1)."
    )
    count: TokenRange = Field(
        default=(1, 1),
        description=f"[min, max] images per request that carries any, drawn uniformly (1 <= min <= max <= "
        f"{MAX_IMAGES}).",
    )
    sizes: list[tuple[StrictInt, StrictInt]] = Field(
        min_length=1,
        description=f"[width, height] in pixels of the images (each 1 to {MAX_IMAGE_SIDE}); each image draws one "
        "uniformly. A server bills an image by its size (Qwen2-VL: ceil(w/28) * ceil(h/28) tokens + 2).",
    )
    format: Literal["png", "jpeg"] = Field(
        default="jpeg", description="Encoding of the images: `jpeg` (quality 85, like photos) or `png` (lossless)."
    )
    distinct: StrictInt = Field(
        default=8,
        ge=1,
        le=64,
        description="Distinct images per size (a seeded pool, encoded once per process; each image draws one): a "
        "server with a multimodal cache (vLLM's processor cache, SGLang's) hits repeats, so raise it to make them "
        "rarer, at the cost of memory and start-up time.",
    )

    @field_validator("count")
    @classmethod
    def _count(cls, value: tuple[int, int]) -> tuple[int, int]:
        if value[1] > MAX_IMAGES:
            raise ValueError(f"at most {MAX_IMAGES} images per request, got [{value[0]}, {value[1]}]")
        return value

    @field_validator("sizes")
    @classmethod
    def _sizes(cls, value: list[tuple[int, int]]) -> list[tuple[int, int]]:
        for w, h in value:
            if not (1 <= w <= MAX_IMAGE_SIDE and 1 <= h <= MAX_IMAGE_SIDE):
                raise ValueError(f"each side from 1 to {MAX_IMAGE_SIDE} pixels, got [{w}, {h}]")
        return value


class _TrafficLike(Protocol):
    mixes: Any
    custom_mixes: Any


def image_issues(traffic: _TrafficLike, variants: list[Any]) -> list[tuple[tuple[str | int, ...], str]]:
    """The field paths and messages of what cannot carry the images the scenario's mixes ask for: a variant whose
    dialect has no image parts, a mix with images sent as sessions."""
    with_images = [ref.name for ref in traffic.mixes if getattr(traffic.custom_mixes.get(ref.name), "images", None)]
    if not with_images:
        return []
    issues: list[tuple[tuple[str | int, ...], str]] = []
    for i, variant in enumerate(variants):
        if not getattr(get_dialect(variant.dialect), "takes_images", False):
            issues.append(
                (
                    ("variants", i, "dialect"),
                    f"mix {with_images[0]!r} carries images, which only openai-chat requests can (as image_url "
                    f"content parts); {variant.dialect} has no place for them: use openai-chat, or drop the images",
                )
            )
    for i, ref in enumerate(traffic.mixes):
        if ref.name in with_images and ref.sessions is not None:
            issues.append(
                (
                    ("traffic", "mixes", i, "sessions"),
                    f"mix {ref.name!r} carries images: its requests are single ones (a follow-up turn would resend "
                    "the history without them)",
                )
            )
    return issues
