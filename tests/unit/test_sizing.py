"""smart_resize, pixel bounds and image/video token counts (edgevlm.vision.sizing)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgevlm.vision.sizing import (
    FAMILIES,
    get_family,
    group_timestamps,
    image_tokens,
    pixel_bounds,
    smart_resize,
    video_smart_resize,
    video_tokens,
)
from edgevlm.wire.errors import UnsupportedMedia

QWEN3 = get_family("qwen3-vl")
QWEN25 = get_family("qwen2.5-vl")


# --- families -------------------------------------------------------------------------------

def test_family_table_holds_the_checkpoint_values() -> None:
    assert (QWEN3.patch_size, QWEN3.merge_size, QWEN3.temporal_patch_size) == (16, 2, 2)
    assert (QWEN3.min_pixels, QWEN3.max_pixels, QWEN3.factor) == (65_536, 16_777_216, 32)
    assert (QWEN3.video_min_pixels, QWEN3.video_max_pixels) == (4_096, 25_165_824)
    for name in ("qwen2-vl", "qwen2.5-vl"):
        family = get_family(name)
        assert (family.patch_size, family.merge_size, family.factor) == (14, 2, 28)
        assert (family.min_pixels, family.max_pixels) == (3_136, 1_003_520)
    assert all(family.name == name for name, family in FAMILIES.items())


def test_unknown_family_names_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"^unknown model family 'qwen4'; valid families are "
                                         r"qwen2-vl, qwen2\.5-vl, qwen3-vl$"):
        get_family("qwen4")


# --- image tokens ---------------------------------------------------------------------------

@pytest.mark.parametrize(("size", "resized", "tokens"), [
    ((100, 100), (256, 256), 64),
    ((640, 480), (640, 480), 300),
    ((1280, 720), (1280, 704), 880),
    ((1080, 1920), (1088, 1920), 2040),
    ((2048, 2048), (2048, 2048), 4096),
    ((3333, 2500), (3328, 2496), 8112),
])
def test_seed_table_qwen3(size: tuple[int, int], resized: tuple[int, int], tokens: int) -> None:
    sized = image_tokens(size[0], size[1], QWEN3)
    assert (sized.resized_width, sized.resized_height) == resized
    assert sized.tokens == tokens
    assert sized.tokens_with_markers == tokens + 2
    assert sized.grid == (1, resized[1] // 16, resized[0] // 16)


def test_seed_table_qwen25_shrinks_to_its_smaller_budget() -> None:
    sized = image_tokens(3333, 2500, QWEN25)
    assert (sized.resized_width, sized.resized_height, sized.tokens) == (1148, 840, 1230)
    assert sized.grid == (1, 60, 82)


# Spec §3.1 (input H x W -> resized H x W, tokens; and with max_pixels = 1003520).
@pytest.mark.parametrize(("hw", "resized", "tokens", "capped", "capped_tokens"), [
    ((64, 64), (256, 256), 64, (256, 256), 64),
    ((224, 224), (256, 256), 64, (256, 256), 64),
    ((480, 640), (480, 640), 300, (480, 640), 300),
    ((720, 1280), (704, 1280), 880, (704, 1280), 880),
    ((1080, 1920), (1088, 1920), 2040, (736, 1312), 943),
    ((1440, 2560), (1440, 2560), 3600, (736, 1312), 943),
    ((3000, 4000), (3008, 4000), 11750, (864, 1152), 972),
    ((100, 1000), (96, 992), 93, (96, 992), 93),
])
def test_spec_table(hw: tuple[int, int], resized: tuple[int, int], tokens: int,
                    capped: tuple[int, int], capped_tokens: int) -> None:
    height, width = hw
    default = image_tokens(width, height, QWEN3)
    assert ((default.resized_height, default.resized_width), default.tokens) == (resized, tokens)
    cap = image_tokens(width, height, QWEN3, max_pixels=1_003_520)
    assert ((cap.resized_height, cap.resized_width), cap.tokens) == (capped, capped_tokens)


def test_round_is_ties_to_even_not_half_up() -> None:
    # 1040 / 32 = 32.5: Python round() gives 32 -> 1024 (C round() would give 1056).
    assert smart_resize(1040, 1040, 32, 65_536, 16_777_216) == (1024, 1024)
    assert smart_resize(1072, 1072, 32, 65_536, 16_777_216) == (1088, 1088)  # 33.5 -> 34


def test_to_json_has_the_wire_keys() -> None:
    assert image_tokens(640, 480, QWEN3).to_json() == {
        "resized_width": 640, "resized_height": 480, "grid": [1, 30, 40], "tokens": 300,
        "tokens_with_markers": 302}


def test_aspect_ratio_over_200_is_rejected_with_the_ratio() -> None:
    with pytest.raises(UnsupportedMedia) as info:
        image_tokens(4020, 20, QWEN3)
    assert info.value.message == ("image aspect ratio 201.0:1 (4020x20) is over 200:1; crop or "
                                  "pad it to at most 200:1")
    assert info.value.status_code == 400
    assert image_tokens(4000, 20, QWEN3).tokens > 0  # exactly 200:1 is allowed


@pytest.mark.parametrize(("width", "height"), [(0, 10), (10, 0), (-1, 5)])
def test_empty_sides_are_rejected(width: int, height: int) -> None:
    with pytest.raises(UnsupportedMedia, match=r"width and height must be at least 1"):
        image_tokens(width, height, QWEN3)


def test_non_positive_bounds_are_programming_errors() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        smart_resize(100, 100, 32, 0, 1000)
    with pytest.raises(ValueError, match="factor"):
        smart_resize(100, 100, 0, 1, 1000)


# --- smart_resize properties ----------------------------------------------------------------

@st.composite
def sizes(draw: st.DrawFn, max_side: int = 20_000) -> tuple[int, int]:
    """(height, width) with an aspect ratio of at most 200."""
    short = draw(st.integers(1, max_side // 200 * 200))
    long = draw(st.integers(short, min(max_side, short * 200)))
    return (short, long) if draw(st.booleans()) else (long, short)


factors = st.sampled_from([28, 32])
bounds = st.tuples(st.integers(1, 4_000_000), st.integers(1, 20_000_000))


@given(sizes(), factors, bounds)
def test_sides_are_positive_multiples_of_the_factor(hw: tuple[int, int], factor: int,
                                                    lo_hi: tuple[int, int]) -> None:
    h_bar, w_bar = smart_resize(*hw, factor, *lo_hi)
    assert h_bar % factor == 0 and w_bar % factor == 0
    assert h_bar >= factor and w_bar >= factor


@given(sizes(), factors, bounds)
def test_aspect_ratio_is_kept_within_one_factor_step(hw: tuple[int, int], factor: int,
                                                     lo_hi: tuple[int, int]) -> None:
    # Some scale s puts both resized sides within one factor of the scaled input sides.
    height, width = hw
    h_bar, w_bar = smart_resize(height, width, factor, *lo_hi)
    low = max((h_bar - factor) / height, (w_bar - factor) / width)
    high = min((h_bar + factor) / height, (w_bar + factor) / width)
    assert low <= high * (1 + 1e-12)


def _overshoot(pixels: int, factor: int, ratio: float) -> float:
    """Largest change of the area when both sides move by up to one factor step at this area."""
    return factor * math.sqrt(pixels) * (math.sqrt(ratio) + 1 / math.sqrt(ratio))


@given(sizes(), factors, bounds)
def test_area_bounds_hold_in_every_branch(hw: tuple[int, int], factor: int,
                                          lo_hi: tuple[int, int]) -> None:
    """What is true in general: the area leaves [min, max] only by the rounding of the sides.

    Growing (ceil) can overshoot max when min is close to it; shrinking (floor) can undershoot
    min when max is close to it, and a side clamped to ``factor`` can exceed max for a very
    long image with a tiny max. Nothing else.
    """
    height, width = hw
    lo, hi = lo_hi
    h_bar, w_bar = smart_resize(height, width, factor, lo, hi)
    area = h_bar * w_bar
    ratio = max(height, width) / min(height, width)
    lower = min(lo, hi - _overshoot(hi, factor, ratio))
    upper = max(hi, lo + _overshoot(lo, factor, ratio) + factor * factor,
                factor * math.sqrt(hi * ratio), factor * factor)
    assert lower * (1 - 1e-9) <= area <= upper * (1 + 1e-9)


@given(sizes(), st.integers(262_144, 16_777_216))
def test_family_minimum_and_any_usable_cap_bound_the_area_exactly(hw: tuple[int, int],
                                                                  cap: int) -> None:
    # With min 65536 and a cap of at least 256 tokens no rounding effect can leave the bounds.
    sized = image_tokens(hw[1], hw[0], QWEN3, QWEN3.min_pixels, cap)
    assert QWEN3.min_pixels <= sized.resized_width * sized.resized_height <= cap


@given(sizes(max_side=4000))
def test_already_aligned_images_in_bounds_are_not_resized(hw: tuple[int, int]) -> None:
    height, width = (max(32, hw[0] // 32 * 32), max(32, hw[1] // 32 * 32))
    if not QWEN3.min_pixels <= height * width <= QWEN3.max_pixels:
        return
    sized = image_tokens(width, height, QWEN3)
    assert (sized.resized_width, sized.resized_height) == (width, height)


# --- pixel bounds ---------------------------------------------------------------------------

def test_pixel_bounds_defaults_and_deployment_cap() -> None:
    assert pixel_bounds(QWEN3, None, None, None) == (65_536, 16_777_216)
    assert pixel_bounds(QWEN3, 1_003_520, None, None) == (65_536, 1_003_520)
    assert pixel_bounds(QWEN3, 50_000_000, None, None) == (65_536, 16_777_216)  # cap above max
    assert pixel_bounds(QWEN3, 40_000, None, None) == (40_000, 40_000)  # cap below the min


def test_pixel_bounds_request_cannot_raise_max_above_the_cap() -> None:
    assert pixel_bounds(QWEN3, 1_003_520, None, 4_000_000) == (65_536, 1_003_520)
    assert pixel_bounds(QWEN3, 1_003_520, None, 200_000) == (65_536, 200_000)
    assert pixel_bounds(QWEN3, 1_003_520, None, 1_000) == (65_536, 65_536)  # up to the floor


def test_pixel_bounds_request_min_is_clamped_between_floor_and_max() -> None:
    assert pixel_bounds(QWEN3, 1_003_520, 200_000, None) == (200_000, 1_003_520)
    assert pixel_bounds(QWEN3, 1_003_520, 4_000_000, None) == (1_003_520, 1_003_520)
    assert pixel_bounds(QWEN3, 1_003_520, 4_000_000, 300_000) == (300_000, 300_000)
    assert pixel_bounds(QWEN3, None, 1_000, None) == (65_536, 16_777_216)


def test_pixel_bounds_video_uses_the_video_defaults() -> None:
    assert pixel_bounds(QWEN3, None, None, None, video=True) == (4_096, 25_165_824)
    assert pixel_bounds(QWEN3, 2_000_000, 1_000, None, video=True) == (4_096, 2_000_000)
    with pytest.raises(ValueError, match=r"qwen2\.5-vl has no video rules"):
        pixel_bounds(QWEN25, None, None, None, video=True)


def test_pixel_bounds_rejects_a_non_positive_cap() -> None:
    with pytest.raises(ValueError, match="max_pixels must be at least 1, got 0"):
        pixel_bounds(QWEN3, 0, None, None)


optional_pixels = st.none() | st.integers(-10, 40_000_000)


@given(st.sampled_from(sorted(FAMILIES)), st.none() | st.integers(1, 40_000_000),
       optional_pixels, optional_pixels)
def test_pixel_bounds_invariants(name: str, cap: int | None, req_min: int | None,
                                 req_max: int | None) -> None:
    family = FAMILIES[name]
    lo, hi = pixel_bounds(family, cap, req_min, req_max)
    effective_cap = family.max_pixels if cap is None else min(cap, family.max_pixels)
    floor = min(family.min_pixels, effective_cap)
    assert floor <= lo <= hi <= effective_cap
    if req_max is not None and floor <= req_max <= effective_cap:
        assert hi == req_max
    if req_min is not None and floor <= req_min <= hi:
        assert lo == req_min


# --- video ----------------------------------------------------------------------------------

def test_timestamps_of_five_frames_at_2_fps() -> None:
    assert group_timestamps(5, 2.0, 2) == ("<0.2 seconds>", "<1.2 seconds>", "<2.0 seconds>")


def test_timestamps_group_mean_and_rounding() -> None:
    assert group_timestamps(4, 1.0, 2) == ("<0.5 seconds>", "<2.5 seconds>")
    assert group_timestamps(2, 3.0, 2) == ("<0.2 seconds>",)  # 1/6 -> 0.1666..
    with pytest.raises(UnsupportedMedia, match="video fps must be a positive number, got 0"):
        group_timestamps(2, 0, 2)
    with pytest.raises(UnsupportedMedia, match="got nan"):
        group_timestamps(2, float("nan"), 2)


def test_video_tokens_of_five_vga_frames() -> None:
    video = video_tokens(5, 640, 480, 2.0, QWEN3)
    assert (video.resized_width, video.resized_height, video.num_frames) == (640, 480, 6)
    assert video.grid == (3, 30, 40)
    assert (video.tokens_per_group, video.vision_tokens) == (300, 900)
    assert video.marker_tokens == 6  # a pair per temporal group, no outer pair
    assert video.timestamps == ("<0.2 seconds>", "<1.2 seconds>", "<2.0 seconds>")


def test_video_budget_is_over_the_whole_clip() -> None:
    # 64 full-HD frames (t_bar = 64) exceed 25165824 pixels: every frame shrinks.
    video = video_tokens(64, 1920, 1080, 2.0, QWEN3)
    assert video.grid[0] == 32
    assert 64 * video.resized_width * video.resized_height <= 25_165_824
    assert (video.resized_width, video.resized_height) == (832, 448)
    # Two frames fit: native size rounded to the factor.
    two = video_tokens(2, 1920, 1080, 2.0, QWEN3)
    assert (two.resized_width, two.resized_height, two.grid) == (1920, 1088, (1, 68, 120))


def test_video_min_max_override_and_small_frames() -> None:
    video = video_tokens(4, 128, 96, 1.0, QWEN3, 4_096, 40_000)
    assert (video.resized_width, video.resized_height) == (96, 64)
    # A side below the factor is first scaled up (int truncation), then rounded.
    tiny = video_tokens(2, 20, 10, 1.0, QWEN3)
    assert (tiny.resized_width, tiny.resized_height) == (64, 32)


def test_video_needs_two_frames_and_a_video_family() -> None:
    with pytest.raises(UnsupportedMedia, match=r"^a video needs at least 2 frames, got 1; send "
                                               r"a single frame as an image$"):
        video_tokens(1, 640, 480, 2.0, QWEN3)
    with pytest.raises(ValueError, match="qwen2-vl has no video rules"):
        video_tokens(4, 640, 480, 2.0, get_family("qwen2-vl"))
    with pytest.raises(UnsupportedMedia, match="video frame aspect ratio"):
        video_smart_resize(2, 10, 4000, 2, 32, 4_096, 25_165_824)


# --- cross-checks against live transformers -------------------------------------------------

@pytest.mark.reference
@settings(max_examples=400, deadline=None)
@given(sizes(), factors, bounds)
def test_smart_resize_matches_transformers(hw: tuple[int, int], factor: int,
                                           lo_hi: tuple[int, int]) -> None:
    module = pytest.importorskip("transformers.models.qwen2_vl.image_processing_pil_qwen2_vl")
    height, width = hw
    assert smart_resize(height, width, factor, *lo_hi) == module.smart_resize(
        height, width, factor, min_pixels=lo_hi[0], max_pixels=lo_hi[1])


@pytest.mark.reference
@settings(max_examples=400, deadline=None)
@given(st.integers(2, 800), st.integers(1, 4000), st.integers(1, 4000), bounds)
def test_video_smart_resize_matches_transformers(frames: int, height: int, width: int,
                                                 lo_hi: tuple[int, int]) -> None:
    module = pytest.importorskip("transformers.models.qwen3_vl.video_processing_qwen3_vl")
    try:
        expected = module.smart_resize(frames, height, width, temporal_factor=2, factor=32,
                                       min_pixels=lo_hi[0], max_pixels=lo_hi[1])
    except ValueError:  # aspect ratio over 200 (after the small-side upscale)
        with pytest.raises(UnsupportedMedia, match="aspect ratio"):
            video_smart_resize(frames, height, width, 2, 32, *lo_hi)
        return
    assert video_smart_resize(frames, height, width, 2, 32, *lo_hi) == expected


@pytest.mark.reference
@settings(max_examples=200, deadline=None)
@given(st.integers(2, 300), st.sampled_from([0.5, 1.0, 2.0, 3.0, 24.0, 29.97]))
def test_video_tokens_and_timestamps_match_transformers(frames: int, fps: float) -> None:
    module = pytest.importorskip("transformers.models.qwen3_vl.video_processing_qwen3_vl")
    processing = pytest.importorskip("transformers.models.qwen3_vl.processing_qwen3_vl")
    processor = module.Qwen3VLVideoProcessor(size={"shortest_edge": 4_096,
                                                   "longest_edge": 25_165_824})
    video = video_tokens(frames, 640, 360, fps, QWEN3)
    patches = processor.get_num_of_video_patches(frames, 360, 640,
                                                 {"cap_pixels_per_frame": False})
    assert video.vision_tokens == patches // 4
    stamps = processing.Qwen3VLProcessor._calculate_timestamps(None, list(range(frames)), fps, 2)
    assert video.timestamps == tuple(f"<{t:.1f} seconds>" for t in stamps)
