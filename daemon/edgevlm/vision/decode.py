"""Safe image decoding with Pillow: format allow-list and pixel cap checked before any decode.

``probe_image`` reads only the header (size, format, EXIF orientation); ``decode_image``
checks the same and then decodes to RGB exactly like transformers' ``load_image``
(``ImageOps.exif_transpose`` then ``convert("RGB")``: alpha is dropped, not composited).

Decisions:

- Animated images (APNG, animated WEBP, GIF when allowed): the first frame is decoded, as
  ``load_image`` does. Multi-picture JPEGs (Pillow format ``MPO``, common from phone cameras)
  count as JPEG and decode their first (main) picture.
- Pillow's ``DecompressionBombWarning`` is turned into an error. Pillow raises it (or
  ``DecompressionBombError``) from the header inside ``Image.open``, so only that call runs
  under ``warnings.catch_warnings``; a module lock serialises it because ``catch_warnings``
  swaps the process-wide filter list (Python < 3.14). The pixel decode runs outside the lock,
  after the header size has been checked against ``MediaPolicy.max_image_pixels``. Nothing
  else touches Pillow's global state (``Image.MAX_IMAGE_PIXELS`` is left alone, so the
  effective cap is ``min(max_image_pixels, Image.MAX_IMAGE_PIXELS)``).
- PNG keeps EXIF after the pixel data in some files; the probe cannot see such an
  orientation without decoding (Pillow's PNG ``getexif`` would load the pixels), so it reads
  only what precedes the image data. ``decode_image`` always applies it.

Cost bounds (the hostile media corpus, ``tests/reliability/test_hostile_media.py``, holds
every input to 100 ms CPU and 50 MB of extra memory):

- ``max_image_pixels`` caps the pixels *decoded*, not the pixels declared: decoding allocates
  the whole picture, whatever the file size (a 6 KB PNG can hold 2 M black pixels, a 100 KB
  one 36 M). :func:`decode_for_resize` lets libjpeg decode a JPEG reduced (DCT scaling, 1/2,
  1/4 or 1/8; Pillow's ``draft``) to the smallest size still covering the resize target, so
  a JPEG may declare up to 64 times the cap; such a JPEG is not bit-identical to
  transformers' full decode (only when its sides are at least twice the target). Other
  formats are decoded whole; a WebP counts triple (Pillow decodes every WebP through
  libwebp's animation decoder: ~16 bytes a pixel where a PNG takes 4-5).
- Only the allowed formats' parsers ever see the bytes (``Image.open(formats=...)``).
- A PNG or JPEG with more than ``MAX_SEGMENTS`` chunks or marker segments before its image
  data is refused before Pillow parses them (Pillow parses each in Python: 20 000 tiny ones
  take a quarter of a second, an 8 MB part of them seconds).
- 16-bit greyscale (``I;16``) keeps its top 8 bits; Pillow's (and transformers')
  ``convert("RGB")`` clips such values at 255, turning a mid-grey picture white.
"""

from __future__ import annotations

import io
import re
import struct
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from PIL import ExifTags, Image, ImageOps, UnidentifiedImageError

from ..wire.errors import UnsupportedMedia

_FORMAT_ALIASES = {"MPO": "JPEG"}  # Pillow names some JPEG variants differently
_FORMAT_ORDER = ("JPEG", "PNG", "WEBP", "BMP", "GIF", "TIFF")  # how messages list formats
# Leading bytes of common formats, to name the format of a header Pillow cannot parse.
_SIGNATURES = ((b"\xff\xd8\xff", "JPEG"), (b"\x89PNG\r\n\x1a\n", "PNG"), (b"RIFF", "WEBP"),
               (b"BM", "BMP"), (b"GIF8", "GIF"), (b"II*\x00", "TIFF"), (b"MM\x00*", "TIFF"))
_BOMB_PIXELS = re.compile(r"\((\d+) pixels\)")
_SWAPPED_ORIENTATIONS = frozenset({5, 6, 7, 8})  # EXIF orientations that transpose
# What Pillow raises for a truncated or malformed file, from the header parsers or decoders.
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, IndexError, TypeError, KeyError,
                  struct.error)
_OPEN_LOCK = threading.Lock()
SizeRule = Callable[[int, int], tuple[int, int]]  # upright (width, height) -> resize target
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAX_SEGMENTS = 1024  # chunks / marker segments before the image data; real files have < 50
_DCT_SCALES = (8, 4, 2, 1)  # libjpeg's reduced decodes, as Pillow's JPEG draft picks them
_WEBP_COST = 3  # a WebP pixel costs 3-4 times a PNG pixel to decode (see _decoded_pixels)


@dataclass(frozen=True)
class MediaPolicy:
    """What a client may send: Pillow format names and a pixel cap read from the header."""

    formats: frozenset[str] = frozenset({"JPEG", "PNG", "WEBP", "BMP"})
    max_image_pixels: int = 2_097_152  # decoded pixels (2^21, 1448x1448); see the notes


@dataclass(frozen=True)
class ImageHeader:
    """Format and size of an encoded image; the size is after EXIF orientation."""

    format: str
    width: int
    height: int


def _allowed_text(policy: MediaPolicy) -> str:
    names = sorted(policy.formats, key=lambda n: (_FORMAT_ORDER.index(n)
                                                  if n in _FORMAT_ORDER else len(_FORMAT_ORDER), n))
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
    return f"send {listed} (media.formats)"


def _sniffed_format(data: bytes) -> str | None:
    for signature, name in _SIGNATURES:
        if data.startswith(signature) and (name != "WEBP" or data[8:12] in (b"WEBP", b"")):
            return name
    return None


def _bomb_error(exc: Exception, policy: MediaPolicy) -> UnsupportedMedia:
    found = _BOMB_PIXELS.search(str(exc))
    claim = f"{found[1]} pixels" if found else "too many pixels"
    pillow_cap = Image.MAX_IMAGE_PIXELS  # read only; the bomb warning fires above it
    cap = policy.max_image_pixels if pillow_cap is None else min(policy.max_image_pixels,
                                                                  pillow_cap)
    return UnsupportedMedia(
        f"image header claims {claim}, too many to decode safely; send at most "
        f"{cap} pixels (media.max_image_pixels)", code=413)


def _segments_before_pixels(data: bytes) -> int:
    """PNG chunks or JPEG marker segments (and fill bytes) before the image data, counted up
    to ``MAX_SEGMENTS + 1``; 0 for other formats. A truncated file counts what it has."""
    count = 0
    if data.startswith(_PNG_SIGNATURE):
        at = len(_PNG_SIGNATURE)
        while at + 8 <= len(data) and count <= MAX_SEGMENTS:
            length, kind = struct.unpack_from(">I4s", data, at)
            if kind == b"IDAT":
                break
            count, at = count + 1, at + 12 + length
    elif data.startswith(b"\xff\xd8"):
        at = 2
        while at + 4 <= len(data) and count <= MAX_SEGMENTS and data[at] == 0xFF:
            marker = data[at + 1]
            if marker == 0xDA:  # start of scan: the image data
                break
            standalone = marker == 0xFF or 0xD0 <= marker <= 0xD8 or marker == 0x01
            count, at = count + 1, at + (1 if marker == 0xFF else 2 if standalone else
                                         2 + int.from_bytes(data[at + 2:at + 4], "big"))
    return count


def _decoded_pixels(image: Image.Image, image_format: str) -> int:
    """Pixels charged against the cap: a JPEG can be decoded at 1/8 scale; a WebP counts
    triple (Pillow decodes it through libwebp's animation decoder: two RGBA canvases and a
    copy besides the picture)."""
    width, height = image.size
    scale = _DCT_SCALES[0] if image_format == "JPEG" else 1
    return -(-width // scale) * -(-height // scale) * (_WEBP_COST if image_format == "WEBP"
                                                       else 1)


def _over_cap(width: int, height: int, policy: MediaPolicy, note: str = "") -> UnsupportedMedia:
    return UnsupportedMedia(
        f"image is {width}x{height} = {width * height} pixels{note}, over the limit of "
        f"{policy.max_image_pixels} (media.max_image_pixels); downscale it "
        "before sending", code=413)


def _open_checked(data: bytes, policy: MediaPolicy) -> tuple[Image.Image, str]:
    """Open lazily (header only) and enforce the policy; returns the image and its format."""
    if not data:
        raise UnsupportedMedia(f"image data is empty; {_allowed_text(policy)}")
    if _segments_before_pixels(data) > MAX_SEGMENTS:
        raise UnsupportedMedia(f"{_sniffed_format(data)} has more than {MAX_SEGMENTS} metadata "
                               "chunks or segments before its image data; re-encode the image "
                               "without the metadata")
    allowed = sorted(policy.formats)  # only these parsers ever see the bytes
    try:
        with _OPEN_LOCK, warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data), formats=allowed)
    except (Image.DecompressionBombWarning, Image.DecompressionBombError) as exc:
        raise _bomb_error(exc, policy) from None
    except UnidentifiedImageError:
        sniffed = _sniffed_format(data)
        if sniffed is not None and sniffed not in policy.formats:
            raise UnsupportedMedia(f"{sniffed} is not allowed; {_allowed_text(policy)}") from None
        if sniffed is not None:
            raise UnsupportedMedia(f"{sniffed} header is corrupt or truncated ({len(data)} "
                                   "bytes); re-encode the image") from None
        raise UnsupportedMedia(f"cannot identify the image format of {len(data)} bytes; "
                               f"{_allowed_text(policy)}") from None
    except _DECODE_ERRORS as exc:
        raise UnsupportedMedia(f"image header is corrupt or truncated ({exc}); re-encode the "
                               "image") from None
    image_format = str(image.format)
    image_format = _FORMAT_ALIASES.get(image_format, image_format)
    if image_format not in policy.formats:  # a plugin that names its format differently
        raise UnsupportedMedia(f"{image_format} is not allowed; {_allowed_text(policy)}")
    if _decoded_pixels(image, image_format) > policy.max_image_pixels:
        note = {"JPEG": " (over the limit even decoded at 1/8 scale)",
                "WEBP": " (a WebP counts triple: its decoder holds extra copies)"}
        raise _over_cap(*image.size, policy, note.get(image_format, ""))
    return image, image_format


def probe_image(data: bytes, policy: MediaPolicy) -> ImageHeader:
    """Format and oriented size of an encoded image without decoding pixels.

    Works on a prefix of the file as long as the header is complete. Raises
    :class:`UnsupportedMedia` for empty, unknown, disallowed, oversized (413) or corrupt data.
    """
    image, image_format = _open_checked(data, policy)
    width, height = image.size
    try:
        # Image.getexif of the base class: header metadata only (PNG's override would decode).
        orientation = Image.Image.getexif(image).get(ExifTags.Base.Orientation, 1)
    except _DECODE_ERRORS as exc:
        raise UnsupportedMedia(f"image EXIF data is corrupt ({exc}); re-encode the image "
                               "without it") from None
    if orientation in _SWAPPED_ORIENTATIONS:
        width, height = height, width
    return ImageHeader(image_format, width, height)


def _reduce_jpeg(image: Image.Image, target_of: SizeRule, policy: MediaPolicy
                 ) -> tuple[int, int]:
    """Let libjpeg decode at the smallest 1/2, 1/4, 1/8 scale still covering the resize
    target; refuse if even that is over the cap. Returns the upright size of the full picture."""
    full = image.size
    orientation = Image.Image.getexif(image).get(ExifTags.Base.Orientation, 1)
    swapped = orientation in _SWAPPED_ORIENTATIONS
    upright = full[::-1] if swapped else full
    target = target_of(*upright)
    stored = target[::-1] if swapped else target
    image.draft(None, (max(1, stored[0]), max(1, stored[1])))
    width, height = image.size
    if width * height > policy.max_image_pixels:
        scale = -(-full[0] // width)
        raise _over_cap(*full, policy, f" (decoded at 1/{scale} scale: {width}x{height})")
    return (upright[0], upright[1])


def _grey16_to_l(image: Image.Image) -> Image.Image:
    """16-bit greyscale to 8 bits by its top byte (``convert`` would clip at 255)."""
    values = np.asarray(image)
    return Image.fromarray((values >> 8).astype(np.uint8), "L")


def decode_image(data: bytes, policy: MediaPolicy) -> Image.Image:
    """Decode to an upright RGB image, like transformers' ``load_image``.

    Raises :class:`UnsupportedMedia` as :func:`probe_image` does, and for pixel data that is
    truncated or corrupt or a mode that cannot become RGB.
    """
    return decode_for_resize(data, policy, None)[0]


def decode_for_resize(data: bytes, policy: MediaPolicy, target_of: SizeRule | None
                      ) -> tuple[Image.Image, tuple[int, int]]:
    """:func:`decode_image` for a caller that resizes to ``target_of(width, height)`` of the
    upright size: a JPEG is then decoded at the smallest DCT scale still covering that target,
    so the image may be smaller than the picture. Returns the image and the picture's upright
    (width, height). ``target_of`` may raise (e.g. an aspect ratio it refuses) before any
    pixel is decoded.
    """
    image, image_format = _open_checked(data, policy)
    full: tuple[int, int] | None = None
    try:
        if image_format == "JPEG":
            if target_of is not None:
                full = _reduce_jpeg(image, target_of, policy)
            elif image.size[0] * image.size[1] > policy.max_image_pixels:
                raise _over_cap(*image.size, policy)
        image.load()
        # Same transform as exif_transpose(image) without its copy when nothing changes.
        ImageOps.exif_transpose(image, in_place=True)
    except _DECODE_ERRORS as exc:
        raise UnsupportedMedia(f"{image_format} image data is corrupt or truncated ({exc}); "
                               "re-encode the image") from None
    full = full or image.size
    if image.mode.startswith("I;16"):
        image = _grey16_to_l(image)
    if image.mode == "RGB" and image_format != "WEBP":
        return image, full  # convert("RGB") would return an identical copy
    # (a WebP image object holds its decoder's canvases: its RGB copy lets them go)
    try:
        return image.convert("RGB"), full
    except ValueError as exc:
        raise UnsupportedMedia(f"cannot convert a {image.mode} {image_format} image to RGB "
                               f"({exc}); re-encode it as 8-bit RGB") from None
