"""Safe decoding (edgevlm.vision.decode): every rejection path and the RGB conversions."""

from __future__ import annotations

import io
import struct
import warnings
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageOps

from edgevlm.vision.decode import ImageHeader, MediaPolicy, decode_image, probe_image
from edgevlm.wire.errors import UnsupportedMedia

POLICY = MediaPolicy()
ALLOWED = "send JPEG, PNG, WEBP or BMP (media.formats)"
FIXTURE_IMAGES = Path(__file__).resolve().parents[1] / "fixtures" / "images"


def noise(width: int, height: int, seed: int = 0, channels: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    shape = (height, width, channels) if channels > 1 else (height, width)
    return rng.integers(0, 256, shape, dtype=np.uint8)


def encode(image: Image.Image, fmt: str, **params: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **params)
    return buffer.getvalue()


def png_header_only(width: int, height: int) -> bytes:
    """A ~60-byte PNG whose header claims width x height RGB pixels."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return (struct.pack(">I", len(body)) + kind + body
                + struct.pack(">I", zlib.crc32(kind + body)))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2,
                                                            0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\0" * 16)) + chunk(b"IEND", b""))


def rejection(data: bytes, policy: MediaPolicy = POLICY) -> tuple[UnsupportedMedia,
                                                                 UnsupportedMedia]:
    """The errors of probe_image and decode_image, which must agree."""
    with pytest.raises(UnsupportedMedia) as probed:
        probe_image(data, policy)
    with pytest.raises(UnsupportedMedia) as decoded:
        decode_image(data, policy)
    return probed.value, decoded.value


# --- rejections -----------------------------------------------------------------------------

def test_empty_data_is_rejected() -> None:
    for error in rejection(b""):
        assert error.message == f"image data is empty; {ALLOWED}"
        assert error.status_code == 400


def test_random_junk_is_rejected_as_unknown_format() -> None:
    junk = bytes(noise(1000, 1, channels=1).ravel())
    for error in rejection(junk):
        assert error.message == f"cannot identify the image format of 1000 bytes; {ALLOWED}"


def test_gif_is_not_allowed_by_default_and_the_message_says_what_to_send() -> None:
    gif = encode(Image.fromarray(noise(32, 32)).convert("P"), "GIF")
    for error in rejection(gif):
        assert error.message == f"GIF is not allowed; {ALLOWED}"
        assert error.status_code == 400


def test_a_policy_lists_its_own_formats() -> None:
    png = encode(Image.fromarray(noise(8, 8)), "PNG")
    for error in rejection(png, MediaPolicy(formats=frozenset({"JPEG"}))):
        assert error.message == "PNG is not allowed; send JPEG (media.formats)"


def test_gif_allowed_by_policy_decodes_its_first_frame() -> None:
    frames = [Image.new("P", (16, 8), color) for color in (1, 2)]
    for frame in frames:
        frame.putpalette([0, 0, 0, 255, 0, 0, 0, 0, 255] + [0] * 759)
    gif = encode(frames[0], "GIF", save_all=True, append_images=frames[1:])
    policy = MediaPolicy(formats=frozenset({"GIF"}))
    assert probe_image(gif, policy) == ImageHeader("GIF", 16, 8)
    assert decode_image(gif, policy).getpixel((0, 0)) == (255, 0, 0)


def test_header_over_the_pixel_cap_is_413_with_the_size() -> None:
    png = encode(Image.fromarray(noise(40, 30)), "PNG")
    for error in rejection(png, MediaPolicy(max_image_pixels=1_000)):
        assert error.message == ("image is 40x30 = 1200 pixels, over the limit of 1000 "
                                 "(media.max_image_pixels); downscale it before sending")
        assert error.status_code == 413
    assert probe_image(png, MediaPolicy(max_image_pixels=1_200)).width == 40  # at the cap


def test_decompression_bomb_header_is_rejected_before_decoding() -> None:
    bomb = png_header_only(14_000, 14_000)  # 196 Mpx claimed in ~60 bytes
    assert len(bomb) < 100
    for error in rejection(bomb):
        assert error.status_code == 413
        # Pillow's DecompressionBombError (over 2x its limit) fires inside Image.open.
        assert error.message == ("image header claims 196000000 pixels, too many to decode "
                                 "safely; send at most 2097152 pixels (media.max_image_pixels)")


def test_decompression_bomb_warning_becomes_an_error_and_filters_are_restored() -> None:
    # 100 Mpx: over Pillow's warning limit (89.4 Mpx), under its error limit, under our cap.
    header = png_header_only(10_000, 10_000)
    policy = MediaPolicy(max_image_pixels=10**9)
    before = list(warnings.filters)
    for error in rejection(header, policy):
        assert error.status_code == 413
        assert error.message == ("image header claims 100000000 pixels, too many to decode "
                                 "safely; send at most 89478485 pixels (media.max_image_pixels)")
    assert warnings.filters == before


def test_truncated_jpeg_probes_but_does_not_decode() -> None:
    jpeg = encode(Image.fromarray(noise(64, 64)), "JPEG", quality=90)
    truncated = jpeg[: len(jpeg) // 2]
    assert probe_image(truncated, POLICY) == ImageHeader("JPEG", 64, 64)  # header is intact
    with pytest.raises(UnsupportedMedia) as info:
        decode_image(truncated, POLICY)
    assert info.value.message.startswith("JPEG image data is corrupt or truncated (image file "
                                         "is truncated")
    assert info.value.message.endswith("); re-encode the image")


def test_corrupt_png_data_is_rejected() -> None:
    png = bytearray(encode(Image.fromarray(noise(64, 64)), "PNG"))
    start = png.index(b"IDAT") + 20
    png[start:start + 40] = b"\xff" * 40
    assert probe_image(bytes(png), POLICY).format == "PNG"
    with pytest.raises(UnsupportedMedia) as info:
        decode_image(bytes(png), POLICY)
    assert info.value.message == ("PNG image data is corrupt or truncated (broken data stream "
                                  "when reading image file); re-encode the image")


@pytest.mark.parametrize(("fmt", "cut"), [("JPEG", 20), ("PNG", 30)])
def test_truncated_header_names_the_format(fmt: str, cut: int) -> None:
    data = encode(Image.fromarray(noise(64, 64)), fmt)[:cut]
    for error in rejection(data):
        assert error.message == (f"{fmt} header is corrupt or truncated ({cut} bytes); "
                                 "re-encode the image")


# --- orientation ----------------------------------------------------------------------------

@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_is_applied_like_exif_transpose(orientation: int) -> None:
    raw = Image.fromarray(noise(48, 32, seed=orientation))
    exif = Image.Exif()
    exif[0x0112] = orientation
    png = encode(raw, "PNG", exif=exif.tobytes())  # lossless, so pixels can be compared
    header = probe_image(png, POLICY)
    decoded = decode_image(png, POLICY)
    expected = ImageOps.exif_transpose(Image.open(io.BytesIO(png))).convert("RGB")
    swapped = orientation in (5, 6, 7, 8)
    assert (header.width, header.height) == ((32, 48) if swapped else (48, 32))
    assert decoded.size == (header.width, header.height)
    assert np.array_equal(np.asarray(decoded), np.asarray(expected))


def test_orientation_6_rotates_clockwise() -> None:
    raw = Image.new("RGB", (40, 20), (0, 0, 255))
    raw.putpixel((0, 0), (255, 0, 0))  # stored top-left
    exif = Image.Exif()
    exif[0x0112] = 6
    png = encode(raw, "PNG", exif=exif.tobytes())
    decoded = decode_image(png, POLICY)
    assert decoded.size == (20, 40)
    assert decoded.getpixel((19, 0)) == (255, 0, 0)  # displayed top-right


def test_fixture_jpeg_with_exif_orientation_6_probes_upright() -> None:
    data = (FIXTURE_IMAGES / "exif6_120x80.jpg").read_bytes()
    assert probe_image(data, POLICY) == ImageHeader("JPEG", 80, 120)
    assert decode_image(data, POLICY).size == (80, 120)


# --- conversions ----------------------------------------------------------------------------

def _modes() -> list[tuple[str, bytes]]:
    rgb = Image.fromarray(noise(24, 16, seed=3))
    rgba = Image.fromarray(noise(24, 16, seed=4, channels=4), "RGBA")
    gray = Image.fromarray(noise(24, 16, seed=5, channels=1), "L")
    gray16 = Image.fromarray(noise(24, 16, seed=6, channels=1).astype(np.uint16) * 257)
    assert gray16.mode == "I;16"
    palette = rgb.convert("P")
    palette.info["transparency"] = 0
    return [
        ("CMYK JPEG", encode(rgb.convert("CMYK"), "JPEG")),
        ("L JPEG", encode(gray, "JPEG")),
        ("RGBA PNG", encode(rgba, "PNG")),
        ("LA PNG", encode(rgba.convert("LA"), "PNG")),
        ("P PNG with transparency", encode(palette, "PNG")),
        ("1-bit PNG", encode(gray.convert("1"), "PNG")),
        ("16-bit PNG", encode(gray16, "PNG")),
        ("L PNG", encode(gray, "PNG")),
        ("RGBA WEBP", encode(rgba, "WEBP", lossless=True)),
        ("BMP", encode(rgb, "BMP")),
    ]


@pytest.mark.parametrize(("label", "data"), _modes(), ids=[label for label, _ in _modes()])
def test_every_mode_becomes_rgb_like_load_image(label: str, data: bytes) -> None:
    decoded = decode_image(data, POLICY)
    expected = ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB")
    if label == "16-bit PNG":  # its top 8 bits; load_image's convert clips at 255 (white)
        expected = Image.fromarray(noise(24, 16, seed=6, channels=1), "L").convert("RGB")
    assert decoded.mode == "RGB", label
    assert decoded.size == (24, 16)
    assert np.array_equal(np.asarray(decoded), np.asarray(expected))


def test_rgba_alpha_is_dropped_not_composited() -> None:
    # load_image does convert("RGB"): a fully transparent red pixel stays red.
    png = encode(Image.new("RGBA", (4, 4), (255, 0, 0, 0)), "PNG")
    assert decode_image(png, POLICY).getpixel((0, 0)) == (255, 0, 0)


def test_animated_png_decodes_the_first_frame() -> None:
    frames = [Image.new("RGB", (16, 8), color) for color in ((255, 0, 0), (0, 255, 0))]
    apng = encode(frames[0], "PNG", save_all=True, append_images=frames[1:])
    assert Image.open(io.BytesIO(apng)).n_frames == 2
    assert decode_image(apng, POLICY).getpixel((3, 3)) == (255, 0, 0)


def test_multi_picture_jpeg_counts_as_jpeg() -> None:
    pictures = [Image.new("RGB", (16, 8), color) for color in ((200, 0, 0), (0, 0, 200))]
    mpo = encode(pictures[0], "MPO", save_all=True, append_images=pictures[1:])
    assert Image.open(io.BytesIO(mpo)).format == "MPO"
    assert probe_image(mpo, POLICY) == ImageHeader("JPEG", 16, 8)
    red, _, blue = decode_image(mpo, POLICY).getpixel((8, 4))
    assert red > 150 and blue < 50  # the first picture (lossy, so not exact)


def test_mode_that_cannot_become_rgb_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every mode Pillow reads from the allowed formats converts; simulate one that does not.
    def refuse(self: Image.Image, mode: str | None = None, *args: object,
               **kwargs: object) -> Image.Image:
        raise ValueError(f"conversion from {self.mode} to {mode} not supported")

    gray = encode(Image.new("L", (4, 4)), "PNG")
    monkeypatch.setattr(Image.Image, "convert", refuse)
    with pytest.raises(UnsupportedMedia) as info:
        decode_image(gray, POLICY)
    assert info.value.message == ("cannot convert a L PNG image to RGB (conversion from L to "
                                  "RGB not supported); re-encode it as 8-bit RGB")


# --- concurrency ----------------------------------------------------------------------------

def test_concurrent_decodes_are_correct_and_leave_warning_filters_alone() -> None:
    images = [Image.fromarray(noise(64 + k, 48, seed=k)) for k in range(6)]
    encoded = [encode(image, "PNG") for image in images]
    bomb = png_header_only(10_000, 10_000)
    policy = MediaPolicy(max_image_pixels=10**9)
    before = list(warnings.filters)

    def work(k: int) -> bool:
        index = k % 7
        if index == 6:
            try:
                decode_image(bomb, policy)
            except UnsupportedMedia as exc:
                return exc.status_code == 413
            return False
        decoded = decode_image(encoded[index], policy)
        return bool(np.array_equal(np.asarray(decoded), np.asarray(images[index])))

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(work, range(84)))
    assert all(results)
    assert warnings.filters == before
