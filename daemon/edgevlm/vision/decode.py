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
"""

from __future__ import annotations

import io
import re
import struct
import threading
import warnings
from dataclasses import dataclass

from PIL import ExifTags, Image, ImageOps, UnidentifiedImageError

from ..errors import UnsupportedMedia

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


@dataclass(frozen=True)
class MediaPolicy:
    """What a client may send: Pillow format names and a pixel cap read from the header."""

    formats: frozenset[str] = frozenset({"JPEG", "PNG", "WEBP", "BMP"})
    max_image_pixels: int = 40_000_000


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


def _open_checked(data: bytes, policy: MediaPolicy) -> tuple[Image.Image, str]:
    """Open lazily (header only) and enforce the policy; returns the image and its format."""
    if not data:
        raise UnsupportedMedia(f"image data is empty; {_allowed_text(policy)}")
    try:
        with _OPEN_LOCK, warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
    except (Image.DecompressionBombWarning, Image.DecompressionBombError) as exc:
        raise _bomb_error(exc, policy) from None
    except UnidentifiedImageError:
        sniffed = _sniffed_format(data)
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
    if image_format not in policy.formats:
        raise UnsupportedMedia(f"{image_format} is not allowed; {_allowed_text(policy)}")
    width, height = image.size
    if width * height > policy.max_image_pixels:
        raise UnsupportedMedia(
            f"image is {width}x{height} = {width * height} pixels, over the limit of "
            f"{policy.max_image_pixels} (media.max_image_pixels); downscale it before sending",
            code=413)
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


def decode_image(data: bytes, policy: MediaPolicy) -> Image.Image:
    """Decode to an upright RGB image, exactly like transformers' ``load_image``.

    Raises :class:`UnsupportedMedia` as :func:`probe_image` does, and for pixel data that is
    truncated or corrupt or a mode that cannot become RGB.
    """
    image, image_format = _open_checked(data, policy)
    try:
        image.load()
        # Same transform as exif_transpose(image) without its copy when nothing changes.
        ImageOps.exif_transpose(image, in_place=True)
    except _DECODE_ERRORS as exc:
        raise UnsupportedMedia(f"{image_format} image data is corrupt or truncated ({exc}); "
                               "re-encode the image") from None
    if image.mode == "RGB":
        return image  # convert("RGB") would return an identical copy
    try:
        return image.convert("RGB")
    except ValueError as exc:
        raise UnsupportedMedia(f"cannot convert a {image.mode} {image_format} image to RGB "
                               f"({exc}); re-encode it as 8-bit RGB") from None
