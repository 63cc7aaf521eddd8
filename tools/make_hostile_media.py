"""Write the hostile media corpus: ``tests/reliability/media/`` (files, manifest.json, README.md).

Every file is what a camera, a buggy client or an attacker may send as an image part:
decompression bombs (a small file whose header claims a huge picture), truncated and corrupt
JPEG/PNG/WebP, data that is not an image at all, formats edgevlm does not decode by default,
and the awkward but valid images (CMYK, 16-bit, palette, alpha, 1x1, 200:1, animated, EXIF
orientation, progressive, huge metadata blocks) that must come out right.

``manifest.json`` holds, per file, what it is and the expected answer under the default
deployment (``media`` defaults, ``model.max_pixels`` 1003520, the Qwen3-VL family): an error
(type, code, message fragments) or a result (upright source size, resized size, LLM tokens and
the colour of the top-left and bottom-right pixels). The expectations are written here by hand,
not computed by edgevlm, so the corpus test checks the daemon against an independent answer.

Deterministic: fixed seeds and hand-built bytes; encoder output depends only on the Pillow build.

    python tools/make_hostile_media.py [--out DIR]
"""

from __future__ import annotations

import argparse
import io
import json
import random
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

OUT = Path(__file__).resolve().parents[1] / "tests" / "reliability" / "media"
RED, GREEN, BLUE, CYAN, GREY = (255, 0, 0), (0, 255, 0), (0, 0, 255), (0, 255, 255), (128,) * 3
WHITE = (255, 255, 255)


@dataclass(frozen=True)
class Case:
    """One corpus file and the answer the daemon owes it."""

    name: str
    data: bytes
    what: str
    mime: str = "image/jpeg"
    # error: {"type", "code", "message": [fragments]}; result: {"source", "resized", "tokens",
    # "top_left", "bottom_right"} (RGB 0-255 of the upright, resized picture)
    expect: dict[str, Any] = field(default_factory=dict)


def error(code: int, *fragments: str) -> dict[str, Any]:
    return {"error": {"type": "unsupported_media", "code": code, "message": list(fragments)}}


def result(source: tuple[int, int], resized: tuple[int, int], top_left: tuple[int, ...],
           bottom_right: tuple[int, ...] | None = None) -> dict[str, Any]:
    """Qwen3-VL: 32x32 pixels per LLM token, plus the vision start/end markers."""
    tokens = resized[0] // 32 * (resized[1] // 32)
    return {"result": {"source": list(source), "resized": list(resized), "tokens": tokens,
                       "top_left": list(top_left),
                       "bottom_right": list(bottom_right or top_left)}}


# --- encoders -------------------------------------------------------------------------------

def encode(image: Image.Image, fmt: str, **params: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **params)
    return buffer.getvalue()


def solid(size: tuple[int, int], colour: tuple[int, ...], mode: str = "RGB") -> Image.Image:
    return Image.new(mode, size, colour)


def halves(size: tuple[int, int], left: tuple[int, int, int], right: tuple[int, int, int]
           ) -> Image.Image:
    """Left half ``left``, right half ``right``: orientation and frame order show in corners."""
    image = Image.new("RGB", size, left)
    image.paste(right, (size[0] // 2, 0, size[0], size[1]))
    return image


def png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png(width: int, height: int, idat: bytes, depth: int = 8, colour_type: int = 2,
        extra: bytes = b"") -> bytes:
    """A PNG from parts: IHDR, ``extra`` chunks, one IDAT holding ``idat``, IEND."""
    ihdr = struct.pack(">IIBBBBB", width, height, depth, colour_type, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + extra
            + png_chunk(b"IDAT", idat) + png_chunk(b"IEND", b""))


def png_rows(width: int, height: int, pixel: bytes) -> bytes:
    """Deflated scanlines (filter 0) of a solid image whose pixel is ``pixel``."""
    return zlib.compress((b"\0" + pixel * width) * height, 9)


def zero_rows(row_bytes: int, rows: int) -> bytes:
    return zlib.compress(bytes(row_bytes + 1) * rows, 9)


def jpeg_with_size(data: bytes, width: int, height: int) -> bytes:
    """A JPEG whose SOF marker is rewritten to claim ``width`` x ``height``."""
    for marker in (b"\xff\xc0", b"\xff\xc2"):
        at = data.find(marker)
        if at >= 0:
            return data[:at + 5] + struct.pack(">HH", height, width) + data[at + 9:]
    raise ValueError("no SOF marker")


def jpeg_segments(data: bytes, segments: list[bytes]) -> bytes:
    """Insert marker segments (each ``FFxx`` + length + body) right after SOI."""
    return data[:2] + b"".join(segments) + data[2:]


def segment(marker: int, body: bytes) -> bytes:
    return struct.pack(">BBH", 0xFF, marker, len(body) + 2) + body


def riff(chunks: list[bytes]) -> bytes:
    body = b"WEBP" + b"".join(chunks)
    return b"RIFF" + struct.pack("<I", len(body)) + body


def riff_chunk(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("<I", len(body)) + body + (b"\0" if len(body) % 2 else b"")


def webp_canvas_bomb(width: int, height: int) -> bytes:
    """An animated WebP: a ``width`` x ``height`` canvas holding one 1x1 lossless frame."""
    still = encode(solid((1, 1), RED), "WEBP", lossless=True)
    vp8l = still[12:]  # the VP8L chunk of the 1x1 still picture
    flags = 0x02 | 0x10  # animation, alpha
    vp8x = struct.pack("<B3x", flags) + (width - 1).to_bytes(3, "little") + (
        height - 1).to_bytes(3, "little")
    anim = struct.pack("<IH", 0, 0)  # background colour, loop count
    frame = (bytes(6) + (0).to_bytes(3, "little") + (0).to_bytes(3, "little")
             + (100).to_bytes(3, "little") + b"\0" + vp8l)  # x, y, w-1, h-1, duration, flags
    return riff([riff_chunk(b"VP8X", vp8x), riff_chunk(b"ANIM", anim),
                 riff_chunk(b"ANMF", frame)])


def gif_screen_bomb(width: int, height: int) -> bytes:
    """A GIF whose logical screen is ``width`` x ``height``, holding one 1x1 image."""
    screen = b"GIF89a" + struct.pack("<HHBBB", width, height, 0x80, 0, 0) + bytes(6)
    image = b"\x2c" + struct.pack("<HHHHB", 0, 0, 1, 1, 0) + b"\x02\x02\x44\x01\x00"
    return screen + image + b"\x3b"


def bmp_header_bomb(width: int, height: int) -> bytes:
    """A 24-bit BMP header claiming ``width`` x ``height`` with 64 bytes of pixels."""
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, 0, 2835, 2835, 0, 0)
    pixels = bytes(64)
    return b"BM" + struct.pack("<IHHI", 14 + len(info) + len(pixels), 0, 0, 54) + info + pixels


def animated(fmt: str, colours: list[tuple[int, int, int]], **params: Any) -> bytes:
    frames = [solid((64, 64), c) for c in colours]
    return encode(frames[0], fmt, save_all=True, append_images=frames[1:], duration=100,
                  loop=0, **params)


def exif_with(tag: int, value: Any) -> bytes:
    exif = Image.Exif()
    exif[tag] = value
    return exif.tobytes()


# --- the corpus -----------------------------------------------------------------------------

def bombs() -> list[Case]:
    small_jpeg = encode(solid((16, 16), GREY), "JPEG", quality=90)
    return [
        Case("bomb_png_65000x65000.png", png(65000, 65000, zero_rows(65000 * 3, 64)),
             "PNG header claims 65000x65000 RGB (4.2 G pixels); 64 zero rows of IDAT",
             "image/png", error(413, "4225000000 pixels", "media.max_image_pixels")),
        Case("bomb_png_8000x8000.png", png(8000, 8000, zero_rows(8000 * 3, 256)),
             "PNG header claims 8000x8000 (64 M pixels: over the cap, under Pillow's own)",
             "image/png", error(413, "8000x8000 = 64000000 pixels", "media.max_image_pixels")),
        Case("bomb_png_zeros_3000x3000.png", png(3000, 3000, zero_rows(3000 * 3, 3000)),
             "complete, valid PNG of 3000x3000 black pixels (9 M pixels, 1000:1 deflate)",
             "image/png", error(413, "3000x3000 = 9000000 pixels", "media.max_image_pixels")),
        Case("png_zeros_1448x1448.png", png(1448, 1448, zero_rows(1448 * 3, 1448)),
             "complete, valid PNG of 1448x1448 black pixels: just under the default cap, the "
             "costliest PNG accepted", "image/png", result((1448, 1448), (992, 992), (0, 0, 0))),
        Case("bomb_jpeg_65000x65000.jpg", jpeg_with_size(small_jpeg, 65000, 65000),
             "JPEG whose SOF claims 65000x65000; the scan is a 16x16 picture",
             "image/jpeg", error(413, "4225000000 pixels", "media.max_image_pixels")),
        Case("bomb_jpeg_6000x6000.jpg", jpeg_with_size(small_jpeg, 6000, 6000),
             "JPEG whose SOF claims 6000x6000, the scan is 16x16: even at 1/4 scale over the "
             "cap", "image/jpeg", error(413, "6000x6000 = 36000000 pixels (decoded at 1/4 "
                                       "scale: 1500x1500)", "media.max_image_pixels")),
        Case("bomb_jpeg_4000x4000.jpg", jpeg_with_size(small_jpeg, 4000, 4000),
             "JPEG whose SOF claims 4000x4000, the scan is 16x16: decoded at 1/4 scale, the "
             "missing data grey", "image/jpeg", result((4000, 4000), (992, 992), GREY)),
        Case("bomb_webp_canvas_16383x16383.webp", webp_canvas_bomb(16383, 16383),
             "animated WebP: 16383x16383 canvas (268 M pixels), one 1x1 frame",
             "image/webp", error(413, "268402689 pixels", "media.max_image_pixels")),
        Case("bomb_webp_canvas_6000x6000.webp", webp_canvas_bomb(6000, 6000),
             "animated WebP: 6000x6000 canvas (36 M pixels RGBA), one 1x1 frame",
             "image/webp", error(413, "6000x6000 = 36000000 pixels", "media.max_image_pixels")),
        Case("bomb_webp_canvas_1024x1024.webp", webp_canvas_bomb(1024, 1024),
             "animated WebP: 1024x1024 canvas, one 1x1 frame (a WebP pixel counts triple)",
             "image/webp", error(413, "1024x1024 = 1048576 pixels (a WebP counts triple",
                                 "media.max_image_pixels")),
        Case("bomb_webp_canvas_836x836.webp", webp_canvas_bomb(836, 836),
             "animated WebP: 836x836 canvas (at the cap, counted triple), one 1x1 frame",
             "image/webp",
             {"result": {"source": [836, 836], "resized": [832, 832], "tokens": 676,
                         "bottom_right": [0, 0, 0]}}),
        Case("bomb_gif_65535x65535.gif", gif_screen_bomb(65535, 65535),
             "GIF logical screen 65535x65535, one 1x1 image (GIF's parser never runs)",
             "image/gif", error(400, "GIF is not allowed", "(media.formats)")),
        Case("bomb_bmp_30000x30000.bmp", bmp_header_bomb(30000, 30000),
             "BMP header claims 30000x30000 with 64 bytes of pixels", "image/bmp",
             error(413, "900000000 pixels", "media.max_image_pixels")),
    ]


def truncated() -> list[Case]:
    jpeg = encode(halves((256, 192), RED, BLUE), "JPEG", quality=90)
    prog = encode(halves((256, 192), RED, BLUE), "JPEG", quality=90, progressive=True)
    sos = jpeg.find(b"\xff\xda")
    sof = jpeg.find(b"\xff\xc0")
    png_file = encode(halves((256, 192), RED, BLUE), "PNG")
    webp = encode(halves((256, 192), RED, BLUE), "WEBP", quality=80)
    corrupt = "corrupt or truncated"
    return [
        Case("trunc_jpeg_soi.jpg", jpeg[:4], "JPEG cut after 4 bytes (SOI + half a marker)",
             "image/jpeg", error(400, "JPEG header is", corrupt)),
        Case("trunc_jpeg_in_tables.jpg", jpeg[:sof - 40], "JPEG cut inside its tables",
             "image/jpeg", error(400, corrupt)),
        Case("trunc_jpeg_before_scan.jpg", jpeg[:sos], "JPEG cut right before the scan (SOS)",
             "image/jpeg", error(400, corrupt)),
        Case("trunc_jpeg_mid_scan.jpg", jpeg[:len(jpeg) // 2], "JPEG cut in the middle of the "
             "scan", "image/jpeg", error(400, "JPEG image data is", corrupt)),
        Case("trunc_jpeg_no_eoi.jpg", jpeg[:-2], "JPEG without its last 2 bytes (EOI)",
             "image/jpeg", error(400, "JPEG image data is", corrupt, "re-encode")),
        Case("trunc_jpeg_progressive.jpg", prog[:len(prog) * 2 // 5],
             "progressive JPEG cut after its first scans", "image/jpeg",
             error(400, "JPEG image data is", corrupt)),
        Case("trunc_png_signature.png", png_file[:8], "PNG signature only", "image/png",
             error(400, "PNG header is", corrupt)),
        Case("trunc_png_in_ihdr.png", png_file[:20], "PNG cut inside IHDR", "image/png",
             error(400, corrupt)),
        Case("trunc_png_after_ihdr.png", png_file[:33], "PNG with IHDR and nothing after",
             "image/png", error(400, corrupt)),
        Case("trunc_png_mid_idat.png", png_file[:len(png_file) // 2], "PNG cut inside IDAT",
             "image/png", error(400, "PNG image data is", corrupt)),
        Case("trunc_png_no_iend.png", png_file[:-12], "PNG without its IEND chunk",
             "image/png", result((256, 192), (320, 224), RED, BLUE)),
        Case("trunc_webp_mid.webp", webp[:len(webp) // 2], "lossy WebP cut in half",
             "image/webp", error(400, corrupt)),
    ]


def corrupt() -> list[Case]:
    jpeg = bytearray(encode(halves((256, 192), RED, BLUE), "JPEG", quality=90))
    sos = jpeg.find(b"\xff\xda")
    rng = random.Random(7)
    for _ in range(40):  # flip bits in the scan, never making a 0xFF (no new markers)
        at = rng.randrange(sos + 20, len(jpeg) - 4)
        jpeg[at] = (jpeg[at] ^ (1 << rng.randrange(7))) & 0xFE
    ihdr = struct.pack(">IIBBBBB", 64, 64, 8, 2, 0, 0, 0)
    bad_crc = (b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr + b"\0\0\0\0"
               + png_chunk(b"IDAT", png_rows(64, 64, bytes(GREY))) + png_chunk(b"IEND", b""))
    huge_len = (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr)
                + struct.pack(">I", 0x7FFFFFF0) + b"tEXt" + b"abc" * 10)
    return [
        Case("corrupt_jpeg_bitflips.jpg", bytes(jpeg), "JPEG with 40 bit flips in the scan "
             "(decodes with damage, like a glitched camera frame)", "image/jpeg",
             {"result": {"source": [256, 192], "resized": [320, 224], "tokens": 70}}),
        Case("corrupt_png_ihdr_crc.png", bad_crc, "PNG whose IHDR CRC is wrong", "image/png",
             error(400, "corrupt or truncated")),
        Case("corrupt_png_chunk_length.png", huge_len, "PNG with a chunk claiming 2 GB after IHDR",
             "image/png", error(400, "corrupt or truncated")),
        Case("corrupt_png_idat_zlib.png", png(64, 64, b"\x78\x9c" + bytes(rng.randrange(256)
                                                                          for _ in range(200))),
             "PNG whose IDAT is not a zlib stream", "image/png",
             error(400, "PNG image data is", "corrupt or truncated")),
    ]


def not_images() -> list[Case]:
    rng = random.Random(11)
    unknown = "cannot identify the image format"
    allowed = "send JPEG, PNG, WEBP or BMP (media.formats)"
    heic = struct.pack(">I", 24) + b"ftypheic" + b"\0\0\0\0" + b"mif1heic" + bytes(64)
    return [
        Case("png_sent_as_jpeg.jpg", encode(solid((64, 64), GREEN), "PNG"),
             "PNG bytes named .jpg and sent as image/jpeg (the bytes decide)", "image/jpeg",
             result((64, 64), (256, 256), GREEN)),
        Case("jpeg_sent_as_png.png", encode(solid((64, 64), GREY), "JPEG", quality=95),
             "JPEG bytes named .png and sent as image/png", "image/png",
             result((64, 64), (256, 256), GREY)),
        Case("empty.jpg", b"", "an empty file", "image/jpeg",
             error(400, "image data is empty", allowed)),
        Case("random_1k.bin", bytes(rng.randrange(256) for _ in range(1024)), "1 KiB of random "
             "bytes", "application/octet-stream", error(400, unknown, allowed)),
        Case("text.txt", b"hello, this is not an image\n", "plain text", "text/plain",
             error(400, unknown, allowed)),
        Case("html_error_page.jpg", b"<!DOCTYPE html><html><head><title>502 Bad Gateway</title>"
             b"</head><body><h1>502 Bad Gateway</h1></body></html>\n",
             "an HTTP proxy's error page where a snapshot was expected", "image/jpeg",
             error(400, unknown, allowed)),
        Case("json.json", b'{"error": "camera offline"}', "a JSON error body", "image/jpeg",
             error(400, unknown, allowed)),
        Case("pdf_header.pdf", b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<< >>\nendobj\n",
             "start of a PDF", "application/pdf", error(400, unknown, allowed)),
        Case("zip_header.zip", b"PK\x03\x04\x14\x00\x00\x00\x08\x00" + bytes(40),
             "start of a ZIP archive", "application/zip", error(400, unknown, allowed)),
        Case("svg.svg", b'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10">'
             b'<rect width="10" height="10"/></svg>', "an SVG drawing", "image/svg+xml",
             error(400, unknown, allowed)),
        Case("heic_header.heic", heic, "an iPhone HEIC header (not decoded by Pillow)",
             "image/heic", error(400, unknown, allowed)),
        Case("gif_small.gif", encode(solid((32, 32), RED), "GIF"), "a valid GIF (not in the "
             "default media.formats)", "image/gif", error(400, "GIF is not allowed", allowed)),
        Case("tiff_small.tif", encode(solid((32, 32), RED), "TIFF"), "a valid TIFF (not in the "
             "default media.formats)", "image/tiff", error(400, "TIFF is not allowed", allowed)),
        Case("ico_small.ico", encode(solid((32, 32), RED), "ICO"), "a valid Windows icon",
             "image/x-icon", error(400, unknown, allowed)),
        Case("psd_header.psd", b"8BPS\x00\x01" + bytes(6) + struct.pack(">HIIHH", 3, 30000,
                                                                         30000, 8, 3) + bytes(64),
             "a Photoshop header claiming 30000x30000", "image/vnd.adobe.photoshop",
             error(400, unknown, allowed)),
    ]


def valid() -> list[Case]:
    cmyk = encode(solid((64, 64), (255, 0, 0, 0), "CMYK"), "JPEG", quality=95)
    grey16 = png(64, 64, png_rows(64, 64, struct.pack(">H", 0x8080)), depth=16, colour_type=0)
    rgb48 = png(64, 64, png_rows(64, 64, struct.pack(">HHH", 0xFFFF, 0, 0x8080)), depth=16)
    rgba64 = png(64, 64, png_rows(64, 64, struct.pack(">HHHH", 0, 0xFFFF, 0, 0x8000)), depth=16,
                 colour_type=6)
    palette = solid((64, 64), 0, "P")
    palette.putpalette(bytes(BLUE) + bytes(RED) * 255)
    palette_trns = palette.copy()
    palette_trns.info["transparency"] = 0
    rgba = Image.new("RGBA", (64, 64), (200, 10, 10, 0))  # invisible red: alpha is dropped
    exif6 = encode(halves((64, 32), RED, BLUE), "JPEG", quality=95, exif=exif_with(0x0112, 6))
    exif_bad = encode(solid((64, 64), GREY), "JPEG", quality=95, exif=exif_with(0x0112, 9))
    plain = encode(solid((64, 64), GREY), "JPEG", quality=95)
    huge_exif = jpeg_segments(plain, [segment(0xE1, b"Exif\0\0" + bytes(65000))])
    icc_segments = [segment(0xE2, b"ICC_PROFILE\0" + bytes([i + 1, 200]) + bytes(256))
                    for i in range(200)]
    many_markers = jpeg_segments(plain, [segment(0xFE, b"x") for _ in range(2000)])
    texts = b"".join(png_chunk(b"tEXt", b"k\0" + str(i).encode()) for i in range(2000))
    ztxt_bomb = png_chunk(b"zTXt", b"bomb\0\0" + zlib.compress(bytes(16 * 2**20), 9))
    iccp_bomb = png_chunk(b"iCCP", b"icc\0\0" + zlib.compress(bytes(16 * 2**20), 9))
    mpo_frames = [solid((64, 64), RED), solid((64, 64), GREEN)]
    mpo = encode(mpo_frames[0], "MPO", save_all=True, append_images=mpo_frames[1:])
    return [
        Case("cmyk.jpg", cmyk, "CMYK JPEG (Adobe), pure cyan", "image/jpeg",
             result((64, 64), (256, 256), CYAN)),
        Case("grey16.png", grey16, "16-bit greyscale PNG (I;16), value 0x8080 = 50 %",
             "image/png", result((64, 64), (256, 256), (128, 128, 128))),
        Case("rgb48.png", rgb48, "16-bit-per-channel RGB PNG", "image/png",
             result((64, 64), (256, 256), (255, 0, 128))),
        Case("rgba64.png", rgba64, "16-bit-per-channel RGBA PNG, half transparent green",
             "image/png", result((64, 64), (256, 256), GREEN)),
        Case("grey_alpha.png", encode(solid((64, 64), (90, 0), "LA"), "PNG"),
             "greyscale + alpha PNG (LA), fully transparent", "image/png",
             result((64, 64), (256, 256), (90, 90, 90))),
        Case("palette.png", encode(palette, "PNG"), "palette PNG without transparency",
             "image/png", result((64, 64), (256, 256), BLUE)),
        Case("palette_trns.png", encode(palette_trns, "PNG"), "palette PNG whose only colour "
             "is transparent (tRNS)", "image/png", result((64, 64), (256, 256), BLUE)),
        Case("rgba_transparent.png", encode(rgba, "PNG"), "RGBA PNG, every pixel transparent",
             "image/png", result((64, 64), (256, 256), (200, 10, 10))),
        Case("bilevel.png", encode(solid((64, 64), 1, "1"), "PNG"), "1-bit PNG, all white",
             "image/png", result((64, 64), (256, 256), WHITE)),
        Case("grey.jpg", encode(solid((64, 64), 128, "L"), "JPEG", quality=95),
             "greyscale JPEG", "image/jpeg", result((64, 64), (256, 256), GREY)),
        Case("one_pixel.png", encode(solid((1, 1), RED), "PNG"), "1x1 PNG", "image/png",
             result((1, 1), (256, 256), RED)),
        Case("one_pixel.jpg", encode(solid((1, 1), GREY), "JPEG", quality=95), "1x1 JPEG",
             "image/jpeg", result((1, 1), (256, 256), GREY)),
        Case("ratio_200x1.png", encode(halves((200, 1), RED, BLUE), "PNG"),
             "200x1 PNG (the widest ratio allowed)", "image/png",
             result((200, 1), (3648, 32), RED, BLUE)),
        Case("ratio_1x200.png", encode(solid((1, 200), GREEN), "PNG"),
             "1x200 PNG (the tallest ratio allowed)", "image/png",
             result((1, 200), (32, 3648), GREEN)),
        Case("ratio_201x1.png", encode(solid((201, 1), RED), "PNG"), "201x1 PNG (just over "
             "200:1)", "image/png", error(400, "aspect ratio 201.0:1", "crop or pad it")),
        Case("ratio_6400x32.png", encode(halves((6400, 32), RED, BLUE), "PNG"),
             "6400x32 PNG (200:1, 204800 pixels)", "image/png",
             result((6400, 32), (6400, 32), RED, BLUE)),
        Case("progressive.jpg", encode(halves((256, 192), RED, BLUE), "JPEG", quality=90,
                                       progressive=True), "progressive JPEG", "image/jpeg",
             result((256, 192), (320, 224), RED, BLUE)),
        Case("exif_orientation_6.jpg", exif6, "64x32 JPEG, left red / right blue, EXIF "
             "orientation 6 (rotate 90 degrees clockwise): upright it is 32x64, red on top",
             "image/jpeg", result((32, 64), (192, 384), RED, BLUE)),
        Case("exif_orientation_9.jpg", exif_bad, "JPEG with an invalid EXIF orientation (9)",
             "image/jpeg", result((64, 64), (256, 256), GREY)),
        Case("jpeg_huge_exif.jpg", huge_exif, "JPEG with a 64 KB APP1 (EXIF) block before its "
             "picture (the header is past the preflight's 64 KB probe)", "image/jpeg",
             result((64, 64), (256, 256), GREY)),
        Case("jpeg_icc_200_segments.jpg", jpeg_segments(plain, icc_segments), "JPEG with an "
             "ICC profile split over 200 APP2 segments", "image/jpeg",
             result((64, 64), (256, 256), GREY)),
        Case("jpeg_many_markers.jpg", many_markers, "JPEG with 2000 comment segments (Pillow "
             "parses each in Python)", "image/jpeg",
             error(400, "more than 1024 metadata", "without the metadata")),
        Case("png_many_chunks.png", png(64, 64, png_rows(64, 64, bytes(GREY)), extra=texts),
             "PNG with 2000 tEXt chunks before IDAT", "image/png",
             error(400, "more than 1024 metadata", "without the metadata")),
        Case("png_ztxt_bomb.png", png(64, 64, png_rows(64, 64, bytes(GREY)), extra=ztxt_bomb),
             "PNG with a zTXt chunk that inflates to 16 MB", "image/png",
             error(400, "Decompressed data too large", "re-encode")),
        Case("png_iccp_bomb.png", png(64, 64, png_rows(64, 64, bytes(GREY)), extra=iccp_bomb),
             "PNG with an iCCP profile that inflates to 16 MB", "image/png",
             error(400, "Decompressed data too large", "re-encode")),
        Case("apng_3_frames.png", animated("PNG", [RED, GREEN, BLUE]), "animated PNG, frames "
             "red, green, blue: the first frame is used", "image/png",
             result((64, 64), (256, 256), RED)),
        Case("animated.webp", animated("WEBP", [RED, GREEN, BLUE], lossless=True),
             "animated WebP, frames red, green, blue: the first frame is used", "image/webp",
             result((64, 64), (256, 256), RED)),
        Case("animated.gif", animated("GIF", [RED, GREEN, BLUE]), "animated GIF (not in the "
             "default media.formats)", "image/gif",
             error(400, "GIF is not allowed", "(media.formats)")),
        Case("mpo.jpg", mpo, "multi-picture JPEG (MPO, as phones write): the main picture",
             "image/jpeg", result((64, 64), (256, 256), RED)),
        Case("jpeg_trailing_garbage.jpg", plain + bytes(range(256)) * 8,
             "JPEG followed by 2 KB of junk after EOI", "image/jpeg",
             result((64, 64), (256, 256), GREY)),
        Case("png_zip_polyglot.png", encode(solid((64, 64), GREEN), "PNG")
             + b"PK\x03\x04" + bytes(100), "PNG with a ZIP appended", "image/png",
             result((64, 64), (256, 256), GREEN)),
        Case("webp_lossy.webp", encode(solid((64, 64), GREY), "WEBP", quality=90),
             "lossy WebP", "image/webp", result((64, 64), (256, 256), GREY)),
        Case("webp_lossless_alpha.webp", encode(solid((64, 64), (0, 0, 255, 128), "RGBA"), "WEBP",
                                                lossless=True),
             "lossless WebP with alpha", "image/webp", result((64, 64), (256, 256), BLUE)),
        Case("bmp.bmp", encode(solid((64, 48), RED), "BMP"), "24-bit BMP", "image/bmp",
             result((64, 48), (320, 224), RED)),
        Case("camera_1280x720.jpg", encode(halves((1280, 720), RED, BLUE), "JPEG", quality=85),
             "a Frigate-sized 720p snapshot", "image/jpeg",
             result((1280, 720), (1280, 704), RED, BLUE)),
        Case("camera_3840x2160.jpg", encode(halves((3840, 2160), RED, BLUE), "JPEG",
                                            quality=50),
             "a 4K snapshot: decoded at 1/2 scale (1920x1080)", "image/jpeg",
             result((3840, 2160), (1312, 736), RED, BLUE)),
    ]


def corpus() -> list[Case]:
    return bombs() + truncated() + corrupt() + not_images() + valid()


def manifest(cases: list[Case]) -> dict[str, Any]:
    return {
        "about": "hostile media corpus; written by tools/make_hostile_media.py, do not edit",
        "deployment": {"family": "qwen3-vl", "model.max_pixels": 1003520,
                       "media.max_image_pixels": 2097152,
                       "media.formats": ["JPEG", "PNG", "WEBP", "BMP"]},
        "files": [{"file": c.name, "bytes": len(c.data), "mime": c.mime, "what": c.what,
                   **c.expect} for c in cases],
    }


def readme(cases: list[Case]) -> str:
    lines = ["# Hostile media corpus", "",
             "Written by `tools/make_hostile_media.py` (do not edit by hand); checked by",
             "`tests/reliability/test_hostile_media.py`. Expected answers are for the default",
             "deployment (Qwen3-VL family, `model.max_pixels` 1003520, default `media`",
             "section); `manifest.json` holds them in full (error message fragments, resized",
             "size, colours).", "",
             "| file | bytes | what | expected |", "|---|---:|---|---|"]
    for c in cases:
        if "error" in c.expect:
            e = c.expect["error"]
            outcome = f"{e['type']} {e['code']}: " + " … ".join(f"`{m}`" for m in e["message"])
        else:
            r = c.expect["result"]
            outcome = (f"ok: {r['source'][0]}x{r['source'][1]} → "
                       f"{r['resized'][0]}x{r['resized'][1]}, {r['tokens']} tokens")
        lines.append(f"| `{c.name}` | {len(c.data)} | {c.what} | {outcome} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    cases = corpus()
    names = [c.name for c in cases]
    if len(set(names)) != len(names):
        raise SystemExit("duplicate file names in the corpus")
    args.out.mkdir(parents=True, exist_ok=True)
    for stale in args.out.iterdir():
        if stale.name not in names and stale.name not in ("manifest.json", "README.md"):
            stale.unlink()
    for c in cases:
        (args.out / c.name).write_bytes(c.data)
    (args.out / "manifest.json").write_text(json.dumps(manifest(cases), indent=1) + "\n")
    (args.out / "README.md").write_text(readme(cases))
    total = sum(len(c.data) for c in cases)
    print(f"wrote {len(cases)} files ({total / 1024:.0f} KiB) to {args.out}")


if __name__ == "__main__":
    main()
