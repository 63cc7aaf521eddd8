"""Media preparation on the worker: bytes -> cache lookup -> pixels for the encoder.

For each media part of an admitted request, in prompt order:

- ``image`` / ``image_url``: decode the base64, compute the cache key; on a hit the cached
  features are used and nothing is decoded; on a miss the image is decoded (safely) and
  preprocessed into ``pixel_values`` for the vision encoder.
- ``video_frames``: the same, keyed over all frames, preprocessed as one clip.
- ``vision_tokens``: decoded and validated against the model's hidden size and DeepStack depth.
- ``image_ref``: the cache entry, or ``cache_miss``. In the daemon a reference is a capability
  (:mod:`edgevlm.pipeline.image_refs`): ``refs`` opens it for the requester, and one given to
  someone
  else finds nothing.

The encoder itself (and storing its output in the cache) belongs to the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..vision.decode import decode_for_resize, decode_image
from ..vision.preprocess import (
    PixelInput,
    image_planes,
    planes_to_pixels,
    preprocess_video,
)
from ..vision.sizing import group_timestamps, resize_rule
from ..wire.errors import CacheMiss, UnsupportedMedia
from ..wire.features import VisionFeatures
from ..wire.protocol import (
    ImagePart,
    ImageRefPart,
    ImageUrlPart,
    Request,
    VideoFramesPart,
    VisionTokensPart,
    media_bytes,
)
from ..wire.vision_tokens import decode_vision_tokens
from .cache import VisionCache, cache_key
from .preflight import PreflightContext, pixel_bounds_for


@dataclass(frozen=True)
class ModelFacts:
    """What media preparation needs to know about the loaded model."""

    fingerprint: str
    hidden_size: int
    deepstack_layers: int
    image_mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    image_std: tuple[float, float, float] = (0.5, 0.5, 0.5)


@dataclass(frozen=True)
class PreparedMedia:
    """One media item ready for the prompt: features already, or pixels to encode."""

    path: str
    kind: str  # image | video | vision_tokens | image_ref
    cache_key: str | None
    features: VisionFeatures | None
    pixels: PixelInput | None
    source_size: tuple[int, int] | None = None
    timestamps: tuple[str, ...] = ()

    @property
    def cache_hit(self) -> bool:
        return self.features is not None and self.kind in ("image", "video", "image_ref")


def _with_path(path: str, exc: UnsupportedMedia) -> UnsupportedMedia:
    return UnsupportedMedia(f"{path}: {exc.message}", code=exc.status_code)


RefOpener = Callable[[str], str | None]   # image_ref -> the cache key, if it may be used


def prepare_media(request: Request, ctx: PreflightContext, model: ModelFacts,
                  cache: VisionCache | None, refs: RefOpener | None = None
                  ) -> list[PreparedMedia]:
    """Prepare every media part of ``request``; raises the error to answer with.

    ``refs`` opens ``image_ref`` parts (the daemon's capabilities); None: an ``image_ref`` is
    the cache key itself (local use, e.g. ``edgevlm run``)."""
    out: list[PreparedMedia] = []
    for i, message in enumerate(request.messages):
        for j, part in enumerate(message.parts()):
            path = f"messages.{i}.content.{j}"
            try:
                item = _prepare_part(path, part, request, ctx, model, cache, refs)
            except UnsupportedMedia as exc:
                raise _with_path(path, exc) from None
            if item is not None:
                out.append(item)
    return out


def _prepare_part(path: str, part: object, request: Request, ctx: PreflightContext,
                  model: ModelFacts, cache: VisionCache | None, refs: RefOpener | None
                  ) -> PreparedMedia | None:
    if isinstance(part, ImagePart | ImageUrlPart):
        data = media_bytes(part.image if isinstance(part, ImagePart) else part.image_url)
        lo, hi = pixel_bounds_for(ctx, "image", request)
        key = cache_key(model.fingerprint, ctx.family.name, lo, hi, data)
        cached = cache.get(key) if cache is not None else None
        if cached is not None:
            return PreparedMedia(path, "image", key, cached, None)
        # a big JPEG is decoded reduced, straight to a size that covers the resize target
        image, size = decode_for_resize(data, ctx.media,
                                        resize_rule(ctx.family.factor, lo, hi))
        planes = image_planes(image, ctx.family, lo, hi, source_size=size)
        del image  # before the float32 patches are allocated: the two peaks must not add up
        pixels = planes_to_pixels(planes, ctx.family, model.image_mean, model.image_std)
        return PreparedMedia(path, "image", key, None, pixels, size)
    if isinstance(part, VideoFramesPart):
        frames_data = [media_bytes(frame) for frame in part.video_frames]
        lo, hi = pixel_bounds_for(ctx, "video", request)
        key = cache_key(model.fingerprint, f"{ctx.family.name}/video@{part.fps:g}", lo, hi,
                        frames_data)
        timestamps = group_timestamps(len(frames_data), part.fps, ctx.family.temporal_patch_size)
        cached = cache.get(key) if cache is not None else None
        if cached is not None:
            return PreparedMedia(path, "video", key, cached, None, None, timestamps)
        frames = [decode_image(data, ctx.media) for data in frames_data]
        pixels = preprocess_video(frames, ctx.family, lo, hi, model.image_mean, model.image_std)
        return PreparedMedia(path, "video", key, None, pixels, frames[0].size, timestamps)
    if isinstance(part, VisionTokensPart):
        features = decode_vision_tokens(part.vision_tokens, model.hidden_size,
                                        model.deepstack_layers)
        return PreparedMedia(path, "vision_tokens", None, features, None)
    if isinstance(part, ImageRefPart):
        ref_key = part.image_ref if refs is None else refs(part.image_ref)
        cached = cache.get(ref_key) if cache is not None and ref_key is not None else None
        if cached is None:
            raise CacheMiss(f"{path}: image_ref {part.image_ref} is not in the vision cache "
                            "(evicted or never stored); send the image bytes again")
        return PreparedMedia(path, "image_ref", ref_key, cached, None)
    return None
