"""Strict base64: the standard alphabet, padding only where required, nothing else.

The language is the one ``binascii.a2b_base64(strict_mode=True)`` documents: no whitespace,
no other alphabet, no leading, discontinuous or excess padding; the length (a multiple of 4)
is checked here first, so a truncated payload is named as such. Decoding runs in the native
core (:mod:`edgevlm.core.base64_native`, SIMD, 20-40 times faster than binascii; a
``vision_tokens`` payload is 34 MB of base64) and falls back to binascii when the core is not
built. Both paths accept exactly the same texts and give the same bytes:

- CPython 3.11's binascii also accepts whole groups of excess padding after unpadded data
  ("QUJD====", fixed in 3.12 by gh-118314); the fallback refuses them itself.
- Non-zero unused bits before the padding ("QR==" for "A") are accepted, as binascii does
  up to 3.14 (3.15 refuses them in strict mode, gh-146311; the fallback there would too).
"""

from __future__ import annotations

import binascii
import functools
from types import ModuleType
from typing import Any

__all__ = ["Base64Error", "decode", "decode_into", "decoded_length"]

_INVALID = ("contains characters outside A-Z a-z 0-9 + / or misplaced '=' padding (no "
            "whitespace, no URL-safe alphabet)")


class Base64Error(ValueError):
    """Not strict base64; the message says what is wrong."""


def decoded_length(text: str | bytes) -> int:
    """Bytes that ``text`` decodes to, without decoding it (for size limits before work).

    Assumes well-formed input; ``decode`` checks the form.
    """
    n = len(text)
    if n == 0:
        return 0
    tail = text[-2:]
    pad = 2 if tail in ("==", b"==") else 1 if tail[-1:] in ("=", b"=") else 0
    return (n // 4) * 3 - pad if n % 4 == 0 else (n * 3) // 4


def decode(text: str | bytes) -> bytes:
    """Decode strict base64, raising :class:`Base64Error` on whitespace, junk or bad padding."""
    _check_length(text)
    native = _native()
    try:
        if native is not None:
            return bytes(native.decode_strict(text))
        if text[-3:] in ("===", b"==="):  # CPython 3.11 accepts "QUJD====" (gh-118314)
            raise ValueError("excess padding")
        return binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError) as exc:  # ValueError: non-ASCII characters in a str
        raise Base64Error(_INVALID) from exc


def decode_into(text: str | bytes, out: Any) -> int:
    """Decode strict base64 into ``out`` (a writable C-contiguous buffer such as a numpy
    array, at least ``decoded_length(text)`` bytes) and return the bytes written; no
    intermediate copy on the native path. Raises :class:`Base64Error` like :func:`decode`
    (``out`` then holds garbage) and ValueError when ``out`` is too small."""
    _check_length(text)
    native = _native()
    if native is not None:
        try:
            return int(native.decode_into(text, out))
        except native.Base64DecodeError as exc:
            raise Base64Error(_INVALID) from exc
    raw = decode(text)
    view = memoryview(out).cast("B")
    if len(raw) > len(view):
        raise ValueError(f"output buffer of {len(view)} bytes is too small for the {len(raw)} "
                         "decoded bytes")
    view[:len(raw)] = raw
    return len(raw)


def _check_length(text: str | bytes) -> None:
    if len(text) % 4 != 0:
        raise Base64Error(f"length {len(text)} is not a multiple of 4 (truncated or padded "
                          "wrong)")


@functools.cache
def _native() -> ModuleType | None:
    """The native decoder, or None when the core is not built (then binascii decodes)."""
    try:
        from ..core import base64_native
    except ImportError:
        return None
    return base64_native
