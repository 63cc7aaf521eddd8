"""Strict base64: the standard alphabet, padding only where required, nothing else.

``binascii.a2b_base64(strict_mode=True)`` refuses whitespace, other alphabets, leading,
discontinuous and excess padding; the length (a multiple of 4) is checked here first, so a
truncated payload is named as such.
"""

from __future__ import annotations

import binascii


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
    if len(text) % 4 != 0:
        raise Base64Error(f"length {len(text)} is not a multiple of 4 (truncated or padded "
                          "wrong)")
    try:
        return binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError) as exc:  # ValueError: non-ASCII characters in a str
        raise Base64Error("contains characters outside A-Z a-z 0-9 + / or misplaced '=' "
                          "padding (no whitespace, no URL-safe alphabet)") from exc
