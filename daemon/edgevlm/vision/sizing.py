"""Resize rules and token counts of the Qwen-VL families, without touching a pixel.

Everything here is pure integer/float arithmetic on sizes, so the preflight can price a request
from image headers alone. The rules copy transformers 5.24 exactly (spec ``qwen3vl.md`` §3.1
and §6): ``smart_resize`` of ``image_processing_pil_qwen2_vl.py`` for images and
``smart_resize`` of ``video_processing_qwen3_vl.py`` for videos.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ..wire.errors import UnsupportedMedia

MAX_ASPECT_RATIO = 200
VISION_MARKERS_PER_ITEM = 2  # <|vision_start|> and <|vision_end|>


@dataclass(frozen=True)
class Family:
    """Preprocessing rules of one model family.

    ``min_pixels``/``max_pixels`` are the image defaults (the checkpoint's
    ``preprocessor_config.json`` ``size``). ``video_min_pixels``/``video_max_pixels`` are the
    video defaults (``video_preprocessor_config.json``), a budget over all frames of a clip;
    ``None`` means the family has no video rules here.
    """

    name: str
    patch_size: int
    merge_size: int
    temporal_patch_size: int
    min_pixels: int
    max_pixels: int
    video_min_pixels: int | None = None
    video_max_pixels: int | None = None

    @property
    def factor(self) -> int:
        """Side length, in pixels, of one merged LLM token (resized sides are multiples of it)."""
        return self.patch_size * self.merge_size


FAMILIES: dict[str, Family] = {
    # Video bounds: the official video_preprocessor_config.json (spec §6); the 5.24 class
    # defaults (131072 / 786432) are overridden by that file when a checkpoint is loaded.
    "qwen3-vl": Family("qwen3-vl", 16, 2, 2, 65_536, 16_777_216,
                       video_min_pixels=4_096, video_max_pixels=25_165_824),
    # Qwen2-VL / Qwen2.5-VL: images only (their video path sizes each frame separately and
    # has no text timestamps; not implemented).
    "qwen2-vl": Family("qwen2-vl", 14, 2, 2, 3_136, 1_003_520),
    "qwen2.5-vl": Family("qwen2.5-vl", 14, 2, 2, 3_136, 1_003_520),
}


def get_family(name: str) -> Family:
    """The family called ``name``; ValueError naming the valid names otherwise."""
    try:
        return FAMILIES[name]
    except KeyError:
        valid = ", ".join(sorted(FAMILIES))
        raise ValueError(f"unknown model family {name!r}; valid families are {valid}") from None


def _check_aspect_ratio(height: int, width: int, what: str) -> None:
    ratio = max(height, width) / min(height, width)
    if ratio > MAX_ASPECT_RATIO:
        raise UnsupportedMedia(
            f"{what} aspect ratio {ratio:.1f}:1 ({width}x{height}) is over "
            f"{MAX_ASPECT_RATIO}:1; crop or pad it to at most {MAX_ASPECT_RATIO}:1")


def _check_bounds(factor: int, min_pixels: int, max_pixels: int) -> None:
    if factor < 1:
        raise ValueError(f"factor must be at least 1, got {factor}")
    if min_pixels < 1 or max_pixels < 1:
        raise ValueError(f"min_pixels and max_pixels must be at least 1, got {min_pixels}, "
                         f"{max_pixels}")


def smart_resize(height: int, width: int, factor: int, min_pixels: int,
                 max_pixels: int) -> tuple[int, int]:
    """(height, width) an image is resized to: multiples of ``factor``, pixels within bounds.

    Exactly transformers' ``smart_resize`` (spec §3.1): Python ``round()`` (ties to even) of
    the double ``h / factor``; if the rounded area is over ``max_pixels`` both sides shrink by
    ``beta = sqrt(h*w / max_pixels)`` with floor (never below ``factor``); if it is under
    ``min_pixels`` both grow by ``sqrt(min_pixels / (h*w))`` with ceil. Like transformers it
    does not require ``min_pixels <= max_pixels`` (the max test comes first).
    """
    if height < 1 or width < 1:
        raise UnsupportedMedia(f"image is {width}x{height}; width and height must be at least 1")
    _check_bounds(factor, min_pixels, max_pixels)
    _check_aspect_ratio(height, width, "image")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def resize_rule(factor: int, min_pixels: int, max_pixels: int
                ) -> Callable[[int, int], tuple[int, int]]:
    """``(width, height) -> (resized width, resized height)`` by :func:`smart_resize` (what
    :func:`~edgevlm.vision.decode.decode_for_resize` wants to know before decoding)."""
    def rule(width: int, height: int) -> tuple[int, int]:
        resized_h, resized_w = smart_resize(height, width, factor, min_pixels, max_pixels)
        return resized_w, resized_h
    return rule


def video_smart_resize(num_frames: int, height: int, width: int, temporal_factor: int,
                       factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """(height, width) every frame of a clip is resized to (``video_processing_qwen3_vl``).

    Differs from :func:`smart_resize` in two ways: a side under ``factor`` first scales the
    frame up by ``max(factor/h, factor/w)`` (int truncation), and the pixel budget is over the
    whole clip: ``t_bar*h_bar*w_bar`` with ``t_bar = round(T/temporal_factor)*temporal_factor``
    against the bounds, ``beta`` from ``T*h*w`` (T = frames before padding).
    """
    if height < 1 or width < 1:
        raise UnsupportedMedia(f"video frame is {width}x{height}; width and height must be at "
                               "least 1")
    if num_frames < temporal_factor:
        raise UnsupportedMedia(f"a video needs at least {temporal_factor} frames, got "
                               f"{num_frames}; send a single frame as an image")
    _check_bounds(factor, min_pixels, max_pixels)
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height = int(height * scale)
        width = int(width * scale)
    _check_aspect_ratio(height, width, "video frame")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    t_bar = round(num_frames / temporal_factor) * temporal_factor
    if t_bar * h_bar * w_bar > max_pixels:
        beta = math.sqrt((num_frames * height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif t_bar * h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (num_frames * height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def pixel_bounds(family: Family, config_max_pixels: int | None, request_min: int | None,
                 request_max: int | None, *, video: bool = False) -> tuple[int, int]:
    """Effective ``(min_pixels, max_pixels)`` of one image (or, with ``video=True``, one clip).

    The rule, in order:

    1. ``cap`` = the family default max, lowered to ``config_max_pixels`` (the deployment cap)
       when that is given. ``floor`` = the family default min, but never above ``cap``.
    2. ``max`` = ``request_max`` clamped into ``[floor, cap]``, or ``cap`` when not given: a
       request can lower the budget but never raise it above the deployment cap.
    3. ``min`` = ``request_min`` clamped into ``[floor, max]``, or ``floor`` when not given:
       a request can ask for more upscaling of small images, never for more than ``max``.

    So ``floor <= min <= max <= cap`` always holds. ``video=True`` uses the family's video
    defaults (ValueError if it has none).
    """
    if video:
        if family.video_min_pixels is None or family.video_max_pixels is None:
            raise ValueError(f"model family {family.name} has no video rules")
        default_min, default_max = family.video_min_pixels, family.video_max_pixels
    else:
        default_min, default_max = family.min_pixels, family.max_pixels
    if config_max_pixels is not None and config_max_pixels < 1:
        raise ValueError(f"max_pixels must be at least 1, got {config_max_pixels}")
    cap = default_max if config_max_pixels is None else min(default_max, config_max_pixels)
    floor = min(default_min, cap)
    effective_max = cap if request_max is None else min(max(request_max, floor), cap)
    effective_min = floor if request_min is None else min(max(request_min, floor),
                                                          effective_max)
    return effective_min, effective_max


@dataclass(frozen=True)
class ImageTokens:
    """Resized size, patch grid and LLM token count of one image."""

    resized_width: int
    resized_height: int
    grid: tuple[int, int, int]  # patches (t=1, h/patch, w/patch), like image_grid_thw
    tokens: int  # merged LLM tokens (<|image_pad|> count) = t*gh*gw / merge^2
    tokens_with_markers: int  # + <|vision_start|> and <|vision_end|>

    def to_json(self) -> dict[str, object]:
        return {"resized_width": self.resized_width, "resized_height": self.resized_height,
                "grid": list(self.grid), "tokens": self.tokens,
                "tokens_with_markers": self.tokens_with_markers}


def image_tokens(width: int, height: int, family: Family, min_pixels: int | None = None,
                 max_pixels: int | None = None) -> ImageTokens:
    """Token count of a ``width`` x ``height`` image; ``None`` bounds mean the family default."""
    lo = family.min_pixels if min_pixels is None else min_pixels
    hi = family.max_pixels if max_pixels is None else max_pixels
    resized_h, resized_w = smart_resize(height, width, family.factor, lo, hi)
    grid = (1, resized_h // family.patch_size, resized_w // family.patch_size)
    tokens = grid[0] * grid[1] * grid[2] // family.merge_size**2
    return ImageTokens(resized_w, resized_h, grid, tokens, tokens + VISION_MARKERS_PER_ITEM)


@dataclass(frozen=True)
class VideoTokens:
    """Resized size, patch grid, token counts and timestamps of one video.

    Prompt layout (transformers 4.57 and >= 5.25, spec §6; 5.10-5.24 added an outer pair)::

        per temporal group g: <ts_g> <|vision_start|> <|video_pad|> x tokens_per_group
                              <|vision_end|>

    so ``marker_tokens = 2 * groups``; the timestamp strings are ordinary text whose token
    count depends on the tokenizer.
    """

    resized_width: int
    resized_height: int
    num_frames: int  # after padding to a multiple of temporal_patch_size
    grid: tuple[int, int, int]  # patches (T / temporal_patch_size, h/patch, w/patch)
    tokens_per_group: int  # <|video_pad|> per temporal group = gh*gw / merge^2
    vision_tokens: int  # all <|video_pad|> tokens
    timestamps: tuple[str, ...]  # one "<t seconds>" per temporal group
    marker_tokens: int  # <|vision_start|>/<|vision_end|> tokens in the layout above


def group_timestamps(num_frames: int, fps: float, temporal_patch_size: int) -> tuple[str, ...]:
    """``Qwen3VLProcessor._calculate_timestamps`` for frames 0..n-1 sampled at ``fps``.

    Indices are padded to a multiple of ``temporal_patch_size`` with the last index,
    ``t_i = i / fps``, a group's time is the mean of its first and last frame, rendered
    ``f"<{t:.1f} seconds>"``.
    """
    if not (fps > 0 and math.isfinite(fps)):
        raise UnsupportedMedia(f"video fps must be a positive number, got {fps}")
    indices = list(range(num_frames))
    if pad := -num_frames % temporal_patch_size:
        indices.extend([indices[-1]] * pad)
    times = [index / fps for index in indices]
    groups = range(0, len(times), temporal_patch_size)
    return tuple(f"<{(times[g] + times[g + temporal_patch_size - 1]) / 2:.1f} seconds>"
                 for g in groups)


def video_tokens(num_frames: int, width: int, height: int, fps: float, family: Family,
                 min_pixels: int | None = None, max_pixels: int | None = None) -> VideoTokens:
    """Token layout of ``num_frames`` frames (already sampled at ``fps``) of ``width`` x ``height``.

    ``None`` bounds mean the family's video defaults; the bounds are a budget over the clip
    (see :func:`video_smart_resize`).
    """
    if family.video_min_pixels is None or family.video_max_pixels is None:
        raise ValueError(f"model family {family.name} has no video rules")
    lo = family.video_min_pixels if min_pixels is None else min_pixels
    hi = family.video_max_pixels if max_pixels is None else max_pixels
    temporal = family.temporal_patch_size
    resized_h, resized_w = video_smart_resize(num_frames, height, width, temporal,
                                              family.factor, lo, hi)
    padded = num_frames + -num_frames % temporal
    grid = (padded // temporal, resized_h // family.patch_size, resized_w // family.patch_size)
    per_group = grid[1] * grid[2] // family.merge_size**2
    timestamps = group_timestamps(num_frames, fps, temporal)
    return VideoTokens(resized_w, resized_h, padded, grid, per_group, per_group * grid[0],
                       timestamps, VISION_MARKERS_PER_ITEM * grid[0])


@dataclass(frozen=True)
class MediaBounds:
    """The effective ``(min_pixels, max_pixels)`` of one request's images and of its clips,
    decided once (at admission, :func:`media_bounds`) and carried with the request to the
    cache keys and the resize; ``video`` is None when the family has no video rules."""

    image: tuple[int, int]
    video: tuple[int, int] | None


def media_bounds(family: Family, *, max_pixels: int | None, min_pixels: int | None,
                 request_min: int | None, request_max: int | None,
                 image_cap: int | None = None, video_cap: int | None = None) -> MediaBounds:
    """The bounds of a request: ``max_pixels``/``min_pixels`` are the deployment's
    (``model.max_pixels``/``model.min_pixels``), ``image_cap``/``video_cap`` a per-modality
    cap (``limits.limit_mm_per_prompt.<modality>.max_pixels``), ``request_*`` the request's
    ``mm_processor_kwargs``; :func:`pixel_bounds` applies them."""
    floor = request_min if request_min is not None else min_pixels

    def bounds(cap: int | None, video: bool) -> tuple[int, int]:
        caps = [c for c in (max_pixels, cap) if c is not None]
        return pixel_bounds(family, min(caps) if caps else None, floor, request_max,
                            video=video)

    return MediaBounds(bounds(image_cap, False),
                       bounds(video_cap, True) if family.video_min_pixels is not None
                       and family.video_max_pixels is not None else None)
