"""Pixels to ViT patches, bit-compatible with transformers' PIL image processor.

Pipeline (spec ``qwen3vl.md`` §3.2-§3.4, §6), per image or frame:

1. ``convert_to_rgb`` as transformers' processor does (alpha composited onto white; a no-op
   for the RGB images :func:`~edgevlm.vision.decode.decode_image` returns);
2. Pillow ``resize((w, h), BICUBIC)`` on the uint8 RGB image to the ``smart_resize`` size,
   skipped when the size already matches (Pillow would return a copy);
3. rescale and normalise exactly like ``image_transforms.rescale`` + ``normalize``:
   ``x = float32(double(u8) * (1/255))``, then ``(x - mean) / std`` in float32;
4. patchify into merge-block row order with numpy reshapes: each band of merge-block rows is
   normalised into a small cache-sized buffer, then moved to its (contiguous) slice of the
   output by one strided copy whose items are whole patch rows (no loop over patches).

Step 3 maps only 256 input values, so it is computed as a per-channel table from the exact
transformers formula. When ``float32(u8) / d - o`` (two SIMD passes) reproduces that table
bit for bit for all 256 values (checked once per mean/std; true for the Qwen defaults) the
arithmetic form is used, otherwise a table look-up. Either way results are bit-identical to
the reference formula.

Video frames use the same Pillow resize; transformers' video processor resizes with
torchvision instead (not bit-identical, and not runnable without torchvision; identical when
the frames already have the target size). Video frames are normalised the way that processor
does (torchvision's fused ``(x - 127.5) / 127.5`` for mean = std = 0.5), which differs from the
image form by at most 1 ulp. The video pixel budget is ``video_smart_resize`` over the clip.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from PIL import Image

from ..wire.errors import UnsupportedMedia
from .sizing import Family, smart_resize, video_smart_resize

logger = logging.getLogger(__name__)

IMAGE_MEAN_DEFAULT = (0.5, 0.5, 0.5)
IMAGE_STD_DEFAULT = (0.5, 0.5, 0.5)
RESCALE_FACTOR = 1 / 255  # transformers' rescale_factor default (a double)

_BAND_BYTES = 2 << 20  # float32 working set of one band of merge-block rows

FloatArray = npt.NDArray[np.float32]
ByteArray = npt.NDArray[np.uint8]


@dataclass(frozen=True)
class PixelInput:
    """Patches ready for the ViT.

    ``pixel_values`` is float32 ``[N, C*T*P*P]`` with N = t*gh*gw rows in merge-block order
    (t group, block row, block col, row in block, col in block) and columns ``(c, t, py, px)``;
    ``grid_thw`` is the grid in patches, like transformers' ``image_grid_thw``.
    """

    pixel_values: FloatArray
    grid_thw: tuple[int, int, int]


@dataclass(frozen=True)
class _Normalizer:
    """Per-channel map of the 256 uint8 values; ``affine`` holds (d, o) when exact."""

    table: FloatArray  # [C, 256]
    affine: tuple[FloatArray, FloatArray] | None  # float32 [C,1,1] divisors and offsets


@functools.lru_cache(maxsize=16)
def _normalizer(mean: tuple[float, ...], std: tuple[float, ...], fused: bool = False
                ) -> _Normalizer:
    """``fused``: the torchvision form transformers' video processor uses,
    ``(float32(u8) - float32(255 mean)) / float32(255 std)``; else the PIL image form."""
    values = np.arange(256, dtype=np.uint8)
    table: FloatArray
    if fused:
        mean255 = np.asarray([m * 255.0 for m in mean], dtype=np.float32)[:, None]
        std255 = np.asarray([s * 255.0 for s in std], dtype=np.float32)[:, None]
        table = (values.astype(np.float32)[None, :] - mean255) / std255
    else:
        rescaled = (values.astype(np.float64) * RESCALE_FACTOR).astype(np.float32)
        mean32 = np.asarray(mean, dtype=np.float32)[:, None]
        std32 = np.asarray(std, dtype=np.float32)[:, None]
        table = (rescaled[None, :] - mean32) / std32
    divisor = np.asarray([255.0 * s for s in std], dtype=np.float32)[:, None]
    offset = np.asarray([m / s for m, s in zip(mean, std, strict=True)], dtype=np.float32)[:, None]
    candidate = values.astype(np.float32)[None, :] / divisor - offset
    exact = bool(np.array_equal(candidate.view(np.uint32), table.view(np.uint32)))
    if not exact:
        logger.debug("normalise mean=%s std=%s: affine form not exact, using a table", mean, std)
    affine = (divisor[:, :, None], offset[:, :, None]) if exact else None
    return _Normalizer(table, affine)


def _normalize_into(out: FloatArray, planes: ByteArray, norm: _Normalizer) -> None:
    """uint8 ``[..., C, H, W]`` to float32 ``out``, exactly transformers' rescale + normalize."""
    if norm.affine is not None:
        divisor, offset = norm.affine
        np.divide(planes, divisor, out=out)
        np.subtract(out, offset, out=out)
        return
    for c in range(planes.shape[-3]):
        out[..., c, :, :] = norm.table[c][planes[..., c, :, :]]


def _patchify(planes: ByteArray, family: Family, mean: Sequence[float],
              std: Sequence[float], fused: bool = False) -> PixelInput:
    """uint8 ``[F, C, H, W]`` frames to normalised, merge-block-ordered float32 patches.

    ``F == 1`` is a still image, repeated over the temporal patch (as transformers broadcasts
    it); otherwise F is a multiple of ``temporal_patch_size``. Works through bands of merge-block
    rows (output rows are block-row-major, so a band is a contiguous slice of the output) so
    the normalised band stays in cache between normalising and the strided copy.
    """
    frames, channels, height, width = planes.shape
    if len(mean) != channels or len(std) != channels:
        raise ValueError(f"mean and std need {channels} values, got {len(mean)} and {len(std)}")
    if not all(s > 0 for s in std):
        raise ValueError(f"std values must be positive, got {tuple(std)}")
    norm = _normalizer(tuple(float(v) for v in mean), tuple(float(v) for v in std), fused)
    p, m, t = family.patch_size, family.merge_size, family.temporal_patch_size
    gh, gw = height // p, width // p
    gt = 1 if frames == 1 else frames // t
    per_group = frames // gt  # 1 for a still image, else t
    band_rows = max(1, _BAND_BYTES // (per_group * channels * family.factor * width * 4))
    # Move whole patch rows (p contiguous float32) as single items: 16x fewer strided steps.
    row = np.dtype((np.void, p * 4))
    out = np.empty((gt * gh * gw, channels * t * p * p), dtype=np.float32)
    target = out.view(row).reshape(gt, gh // m, gw // m, m, m, channels, t, p)
    buffer = np.empty((per_group, channels, band_rows * family.factor, width), np.float32)
    for g in range(gt):
        for b0 in range(0, gh // m, band_rows):
            b1 = min(b0 + band_rows, gh // m)
            band = buffer[:, :, : (b1 - b0) * family.factor]
            _normalize_into(band, planes[g * per_group:(g + 1) * per_group, :,
                                         b0 * family.factor:b1 * family.factor], norm)
            source = band.view(row).reshape(per_group, channels, b1 - b0, m, p, gw // m, m)
            # (ft, c, bh, mh, py, bw, mw) -> (bh, bw, mh, mw, c, ft, py); ft == 1 broadcasts
            np.copyto(target[g, b0:b1], source.transpose(2, 5, 3, 6, 1, 0, 4))
    return PixelInput(out, (gt, gh, gw))


def _to_rgb(image: Image.Image) -> Image.Image:
    """transformers' ``convert_to_rgb``: alpha composited onto white, else ``convert``."""
    if image.mode == "RGB":
        return image
    if "A" in image.getbands() or image.info.get("transparency") is not None:
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return image.convert("RGB")


def _planes(image: Image.Image, height: int, width: int) -> ByteArray:
    """Resized uint8 RGB planes ``[C, H, W]`` of an RGB image."""
    if image.size != (width, height):
        image = image.resize((width, height), Image.Resampling.BICUBIC)
    return np.stack([np.asarray(band, dtype=np.uint8) for band in image.split()])


def image_planes(image: Image.Image, family: Family, min_pixels: int | None = None,
                 max_pixels: int | None = None,
                 source_size: tuple[int, int] | None = None) -> ByteArray:
    """First half of :func:`preprocess_image`: the resized uint8 RGB planes ``[C, H, W]``.

    A caller that owns ``image`` drops it before :func:`planes_to_pixels`, whose float32
    patches are 8x the planes' bytes (two temporal copies of four bytes): then the decode's
    and the patches' memory peaks do not add up (a 1920x1080 frame: ~55 MB -> ~40 MB)."""
    lo = family.min_pixels if min_pixels is None else min_pixels
    hi = family.max_pixels if max_pixels is None else max_pixels
    width, height = source_size or image.size
    resized_h, resized_w = smart_resize(height, width, family.factor, lo, hi)
    return _planes(_to_rgb(image), resized_h, resized_w)


def planes_to_pixels(planes: ByteArray, family: Family,
                     mean: Sequence[float] = IMAGE_MEAN_DEFAULT,
                     std: Sequence[float] = IMAGE_STD_DEFAULT) -> PixelInput:
    """Second half of :func:`preprocess_image`: normalised, merge-block-ordered patches."""
    return _patchify(planes[None], family, mean, std)


def preprocess_image(image: Image.Image, family: Family, min_pixels: int | None = None,
                     max_pixels: int | None = None,
                     mean: Sequence[float] = IMAGE_MEAN_DEFAULT,
                     std: Sequence[float] = IMAGE_STD_DEFAULT,
                     source_size: tuple[int, int] | None = None) -> PixelInput:
    """One image to ``pixel_values`` ``[gh*gw, C*T*P*P]`` and grid ``(1, gh, gw)``.

    ``None`` bounds mean the family's image defaults. ``source_size``: the (width, height)
    the resize rule is applied to, when ``image`` was decoded reduced (a JPEG decoded at a
    DCT scale); ``image.size`` otherwise.
    """
    planes = image_planes(image, family, min_pixels, max_pixels, source_size)
    return planes_to_pixels(planes, family, mean, std)


def preprocess_video(frames: Sequence[Image.Image], family: Family,
                     min_pixels: int | None = None, max_pixels: int | None = None,
                     mean: Sequence[float] = IMAGE_MEAN_DEFAULT,
                     std: Sequence[float] = IMAGE_STD_DEFAULT) -> PixelInput:
    """Same-size frames (already sampled) to ``pixel_values`` and grid ``(T/2, gh, gw)``.

    The frame count is padded to a multiple of ``temporal_patch_size`` by repeating the last
    frame; both frames of a temporal group go into one patch row (spec §6). ``None`` bounds
    mean the family's video defaults (a budget over the whole clip).
    """
    if family.video_min_pixels is None or family.video_max_pixels is None:
        raise ValueError(f"model family {family.name} has no video rules")
    if not frames:
        raise UnsupportedMedia("a video needs at least one frame")
    width, height = frames[0].size
    for index, frame in enumerate(frames):
        if frame.size != (width, height):
            raise UnsupportedMedia(
                f"video frame {index} is {frame.size[0]}x{frame.size[1]}, frame 0 is "
                f"{width}x{height}; all frames of a video must have the same size")
    lo = family.video_min_pixels if min_pixels is None else min_pixels
    hi = family.video_max_pixels if max_pixels is None else max_pixels
    temporal = family.temporal_patch_size
    resized_h, resized_w = video_smart_resize(len(frames), height, width, temporal,
                                              family.factor, lo, hi)
    resized = [_planes(_to_rgb(frame), resized_h, resized_w) for frame in frames]
    planes = np.stack(resized + [resized[-1]] * (-len(resized) % temporal))
    return _patchify(planes, family, mean, std, fused=True)
