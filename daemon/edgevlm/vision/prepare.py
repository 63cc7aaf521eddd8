"""Media preparation, on the worker: bytes -> cache lookup -> pixels for the encoder.

For each media part of a request, in prompt order:

- ``image`` / ``image_url``: decode the base64 (a camera frame's bytes are used as they
  came), compute the cache key; on a hit the cached features are used and nothing is
  decoded; on a miss the image is decoded (safely) and preprocessed into ``pixel_values``.
- ``video_frames``: the same, keyed over all frames, preprocessed as one clip.
- ``vision_tokens``: decoded and validated against the model's hidden size and DeepStack depth.
- ``image_ref``: the cache entry, or ``cache_miss``. In the daemon a reference is a capability
  (:mod:`edgevlm.pipeline.image_refs`): ``refs`` opens it for the requester, and one given to
  someone else finds nothing.

The pixel bounds come decided (:class:`~edgevlm.vision.sizing.MediaBounds`, from admission);
the encoder itself (and storing its output in the cache) belongs to the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ..wire.errors import CacheMiss, UnsupportedMedia, UnsupportedModality
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
from .cache_key import cache_key
from .decode import MediaPolicy, decode_for_resize, decode_image
from .preprocess import PixelInput, image_planes, planes_to_pixels, preprocess_video
from .sizing import Family, MediaBounds, group_timestamps, resize_rule


class FeatureCache(Protocol):
    """What preparation and the engine need of the vision-feature cache
    (:class:`edgevlm.pipeline.cache.VisionCache`)."""

    def get(self, key: str) -> VisionFeatures | None: ...

    def peek(self, key: str) -> VisionFeatures | None: ...

    def put(self, key: str, features: VisionFeatures,
            source_size: tuple[int, int] | None = None) -> None: ...


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


@dataclass(frozen=True)
class Preparation:
    """What preparing media needs to know: the model, its family's resize rules, the
    request's pixel bounds, the decode policy, the cache (None: none)."""

    model: ModelFacts
    family: Family
    bounds: MediaBounds
    media: MediaPolicy
    cache: FeatureCache | None = None


def prepare_media(request: Request, how: Preparation, refs: RefOpener | None = None
                  ) -> list[PreparedMedia]:
    """Prepare every media part of ``request``; raises the error to answer with.

    ``refs`` opens ``image_ref`` parts (the daemon's capabilities); None: an ``image_ref`` is
    the cache key itself (local use, e.g. ``edgevlm run``)."""
    out: list[PreparedMedia] = []
    for i, message in enumerate(request.messages):
        for j, part in enumerate(message.parts()):
            path = f"messages.{i}.content.{j}"
            try:
                item = _prepare_part(path, part, how, refs)
            except UnsupportedMedia as exc:
                raise _with_path(path, exc) from None
            if item is not None:
                out.append(item)
    return out


def _video_bounds(how: Preparation) -> tuple[int, int]:
    if how.bounds.video is None:
        raise UnsupportedModality(f"video is not supported by the {how.family.name} family; "
                                  "send the frames as images")
    return how.bounds.video


def _prepare_part(path: str, part: object, how: Preparation, refs: RefOpener | None
                  ) -> PreparedMedia | None:
    model, family, cache = how.model, how.family, how.cache
    if isinstance(part, ImagePart | ImageUrlPart):
        data = media_bytes(part.image if isinstance(part, ImagePart) else part.image_url)
        lo, hi = how.bounds.image
        key = cache_key(model.fingerprint, family.name, lo, hi, data)
        cached = cache.get(key) if cache is not None else None
        if cached is not None:
            return PreparedMedia(path, "image", key, cached, None)
        # a big JPEG is decoded reduced, straight to a size that covers the resize target
        image, size = decode_for_resize(data, how.media, resize_rule(family.factor, lo, hi))
        planes = image_planes(image, family, lo, hi, source_size=size)
        del image  # before the float32 patches are allocated: the two peaks must not add up
        pixels = planes_to_pixels(planes, family, model.image_mean, model.image_std)
        return PreparedMedia(path, "image", key, None, pixels, size)
    if isinstance(part, VideoFramesPart):
        frames_data = [media_bytes(frame) for frame in part.video_frames]
        lo, hi = _video_bounds(how)
        key = cache_key(model.fingerprint, f"{family.name}/video@{part.fps:g}", lo, hi,
                        frames_data)
        timestamps = group_timestamps(len(frames_data), part.fps, family.temporal_patch_size)
        cached = cache.get(key) if cache is not None else None
        if cached is not None:
            return PreparedMedia(path, "video", key, cached, None, None, timestamps)
        frames = [decode_image(data, how.media) for data in frames_data]
        pixels = preprocess_video(frames, family, lo, hi, model.image_mean, model.image_std)
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
