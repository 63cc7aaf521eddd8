"""Normalisation and patch layout (edgevlm.vision.preprocess) against plain numpy from the spec.

The references here are written from spec ``qwen3vl.md`` §3.3, §3.4 and §6 with no shared code:
one float formula per element and the spec's reshape/transpose. transformers' own tensors are
compared in ``test_preprocess_parity.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from edgevlm.vision import preprocess
from edgevlm.vision.preprocess import PixelInput, preprocess_image, preprocess_video
from edgevlm.vision.sizing import Family, get_family
from edgevlm.wire.errors import UnsupportedMedia

QWEN3 = get_family("qwen3-vl")
QWEN2 = get_family("qwen2-vl")
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def reference_normalize(pixels: np.ndarray, mean: tuple[float, ...],
                        std: tuple[float, ...]) -> np.ndarray:
    """Spec §3.3: float32(double(u8) * (1/255)), then (x - mean) / std in float32; CHW in."""
    x = (pixels.astype(np.float64) * (1 / 255)).astype(np.float32)
    mean32 = np.asarray(mean, np.float32)[:, None, None]
    std32 = np.asarray(std, np.float32)[:, None, None]
    return (x - mean32) / std32


def reference_video_normalize(pixels: np.ndarray, mean: tuple[float, ...],
                              std: tuple[float, ...]) -> np.ndarray:
    """transformers' video processor (torchvision, fused rescale + normalise):
    (float32(u8) - float32(255 mean)) / float32(255 std); CHW in."""
    mean255 = np.asarray([m * 255.0 for m in mean], np.float32)[:, None, None]
    std255 = np.asarray([s * 255.0 for s in std], np.float32)[:, None, None]
    return (pixels.astype(np.float32) - mean255) / std255


def reference_image_patches(chw: np.ndarray, p: int, m: int, t: int) -> np.ndarray:
    """Spec §3.4, literally."""
    c, h, w = chw.shape
    gh, gw = h // p, w // p
    x = chw.reshape(c, gh // m, m, p, gw // m, m, p).transpose(1, 4, 2, 5, 0, 3, 6)
    x = np.repeat(x[:, :, :, :, :, None], t, axis=5)  # frame repeated in time
    return x.reshape(gh * gw, c * t * p * p)


def reference_video_patches(frames: np.ndarray, p: int, m: int, t: int) -> np.ndarray:
    """Spec §6: pad with the last frame, view [gt, t, C, gh/m, m, p, gw/m, m, p], permute."""
    if pad := -len(frames) % t:
        frames = np.concatenate([frames, np.repeat(frames[-1:], pad, axis=0)])
    n, c, h, w = frames.shape
    gt, gh, gw = n // t, h // p, w // p
    x = frames.reshape(gt, t, c, gh // m, m, p, gw // m, m, p)
    x = x.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return x.reshape(gt * gh * gw, c * t * p * p)


def every_byte_value_image(width: int, height: int, seed: int) -> Image.Image:
    """Random RGB whose first pixels hold all 256 values in each channel."""
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    pixels.reshape(-1, 3)[:256] = np.arange(256, dtype=np.uint8)[:, None]
    return Image.fromarray(pixels)


def chw(image: Image.Image) -> np.ndarray:
    return np.asarray(image.convert("RGB")).transpose(2, 0, 1)


def assert_same_bits(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.dtype == np.float32 and actual.shape == expected.shape
    assert np.array_equal(actual.view(np.uint32), expected.astype(np.float32).view(np.uint32))


@pytest.mark.parametrize(("mean", "std"), [((0.5,) * 3, (0.5,) * 3), (CLIP_MEAN, CLIP_STD),
                                           ((0.0,) * 3, (1.0,) * 3)])
def test_normalisation_table_is_the_transformers_formula_bit_for_bit(
        mean: tuple[float, ...], std: tuple[float, ...]) -> None:
    values = np.arange(256, dtype=np.uint8)[None, None, :].repeat(3, axis=0)
    expected = reference_normalize(values, mean, std)[:, 0, :]
    norm = preprocess._normalizer(mean, std)
    assert_same_bits(norm.table, expected)
    if norm.affine is not None:  # the fast form is only taken when exact for all 256 values
        divisor, offset = norm.affine
        assert_same_bits(values.astype(np.float32)[:, 0, :] / divisor[:, 0] - offset[:, 0],
                         expected)


def test_qwen_defaults_take_the_fast_path_and_clip_values_the_table() -> None:
    assert preprocess._normalizer((0.5,) * 3, (0.5,) * 3).affine is not None
    assert preprocess._normalizer(CLIP_MEAN, CLIP_STD).affine is None


@pytest.mark.parametrize(("family", "size", "mean", "std"), [
    (QWEN3, (320, 256), (0.5,) * 3, (0.5,) * 3),
    (QWEN3, (256, 288), CLIP_MEAN, CLIP_STD),
    (QWEN2, (280, 252), CLIP_MEAN, CLIP_STD),
    (QWEN2, (308, 336), (0.5,) * 3, (0.5,) * 3),
])
def test_aligned_image_patches_match_the_spec_layout(family: Family, size: tuple[int, int],
                                                     mean: tuple[float, ...],
                                                     std: tuple[float, ...]) -> None:
    image = every_byte_value_image(*size, seed=size[0])
    out = preprocess_image(image, family, 1, 10**8, mean, std)  # aligned: no resize
    p, m, t = family.patch_size, family.merge_size, family.temporal_patch_size
    expected = reference_image_patches(reference_normalize(chw(image), mean, std), p, m, t)
    assert out.grid_thw == (1, size[1] // p, size[0] // p)
    assert_same_bits(out.pixel_values, expected)


def test_row_order_is_merge_block_major() -> None:
    # A 64x64 image has 2x2 merge blocks of 2x2 patches; row 1 is the patch right of row 0,
    # row 2 the patch below it, row 4 the first patch of the next block to the right.
    pixels = np.zeros((64, 64, 3), np.uint8)
    for py in range(4):
        for px in range(4):
            pixels[py * 16:(py + 1) * 16, px * 16:(px + 1) * 16] = 10 * (4 * py + px)
    out = preprocess_image(Image.fromarray(pixels), QWEN3, 1, 10**8)
    first_value = out.pixel_values[:, 0]
    levels = np.rint((first_value + 1) * 127.5).astype(int) // 10
    assert levels.tolist() == [0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15]


def test_band_processing_matches_the_whole_image_for_any_band_size(
        monkeypatch: pytest.MonkeyPatch) -> None:
    image = every_byte_value_image(96, 224, seed=7)  # 7 merge-block rows
    whole = preprocess_image(image, QWEN3, 1, 10**8).pixel_values
    for band_bytes in (1, 3 * 32 * 96 * 4 * 2, 3 * 32 * 96 * 4 * 3):  # 1, 2 and 3 rows a band
        monkeypatch.setattr(preprocess, "_BAND_BYTES", band_bytes)
        assert_same_bits(preprocess_image(image, QWEN3, 1, 10**8).pixel_values, whole)


def test_resize_is_pillow_bicubic_on_uint8_then_normalised() -> None:
    image = every_byte_value_image(100, 100, seed=3)
    out = preprocess_image(image, QWEN3)  # 100x100 -> 256x256 (min 65536)
    resized = image.resize((256, 256), Image.Resampling.BICUBIC)
    expected = reference_image_patches(
        reference_normalize(chw(resized), (0.5,) * 3, (0.5,) * 3), 16, 2, 2)
    assert out.grid_thw == (1, 16, 16)
    assert_same_bits(out.pixel_values, expected)


def test_non_rgb_input_is_converted_like_the_transformers_processor() -> None:
    # The processor's convert_to_rgb composites alpha onto white.
    rgba = Image.new("RGBA", (32, 32), (255, 0, 0, 0))
    out = preprocess_image(rgba, QWEN3, 1, 10**8)
    assert np.all(out.pixel_values == 1.0)  # white
    gray = Image.new("L", (32, 32), 0)
    assert np.all(preprocess_image(gray, QWEN3, 1, 10**8).pixel_values == -1.0)


@pytest.mark.parametrize("count", [2, 5, 6])
def test_video_patches_match_the_spec_layout(count: int) -> None:
    frames = [every_byte_value_image(128, 96, seed=k) for k in range(count)]
    out = preprocess_video(frames, QWEN3, 1, 10**8)  # aligned and within bounds: no resize
    stacked = np.stack([reference_video_normalize(chw(f), (0.5,) * 3, (0.5,) * 3)
                        for f in frames])
    expected = reference_video_patches(stacked, 16, 2, 2)
    assert out.grid_thw == ((count + 1) // 2, 6, 8)
    assert_same_bits(out.pixel_values, expected)


def test_video_temporal_pairs_hold_two_different_frames() -> None:
    frames = [Image.new("RGB", (64, 64), (v, v, v)) for v in (0, 255, 51)]
    out = preprocess_video(frames, QWEN3, 1, 10**8)
    values = out.pixel_values.reshape(-1, 3, 2, 256)  # (rows, c, t, p*p)
    assert out.grid_thw == (2, 4, 4)
    assert np.all(values[:16, :, 0] == -1.0) and np.all(values[:16, :, 1] == 1.0)
    assert np.all(values[16:] == (np.float32(51) - np.float32(127.5)) / np.float32(127.5))


def test_video_resize_uses_the_clip_budget() -> None:
    frames = [every_byte_value_image(128, 96, seed=k) for k in range(5)]
    out = preprocess_video(frames, QWEN3, 4_096, 40_000)
    assert out.grid_thw == (3, 4, 6)  # 96x128 -> 64x96 (see test_sizing)
    resized = np.stack([reference_video_normalize(
        chw(f.resize((96, 64), Image.Resampling.BICUBIC)), (0.5,) * 3, (0.5,) * 3)
        for f in frames])
    assert_same_bits(out.pixel_values, reference_video_patches(resized, 16, 2, 2))


def test_video_frames_of_different_sizes_are_rejected_naming_the_frame() -> None:
    frames = [Image.new("RGB", (64, 64)), Image.new("RGB", (64, 64)), Image.new("RGB", (64, 32))]
    with pytest.raises(UnsupportedMedia) as info:
        preprocess_video(frames, QWEN3)
    assert info.value.message == ("video frame 2 is 64x32, frame 0 is 64x64; all frames of a "
                                  "video must have the same size")


def test_video_input_errors() -> None:
    with pytest.raises(UnsupportedMedia, match="at least one frame"):
        preprocess_video([], QWEN3)
    with pytest.raises(UnsupportedMedia, match="at least 2 frames, got 1"):
        preprocess_video([Image.new("RGB", (64, 64))], QWEN3)
    with pytest.raises(ValueError, match="qwen2-vl has no video rules"):
        preprocess_video([Image.new("RGB", (64, 64))] * 2, QWEN2)


def test_bad_mean_or_std_are_rejected() -> None:
    image = Image.new("RGB", (32, 32))
    with pytest.raises(ValueError, match="mean and std need 3 values, got 2 and 3"):
        preprocess_image(image, QWEN3, mean=(0.5, 0.5), std=(0.5,) * 3)
    with pytest.raises(ValueError, match="std values must be positive"):
        preprocess_image(image, QWEN3, std=(0.5, 0.0, 0.5))


def test_pixel_input_shape_and_dtype() -> None:
    out = preprocess_image(Image.new("RGB", (640, 480)), QWEN3)
    assert isinstance(out, PixelInput)
    assert out.pixel_values.shape == (30 * 40, 3 * 2 * 16 * 16)
    assert out.pixel_values.dtype == np.float32 and out.pixel_values.flags.c_contiguous
