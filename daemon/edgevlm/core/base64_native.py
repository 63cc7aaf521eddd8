"""Strict base64 decoding in the native core (``edgevlm_base64_decode``: AVX2/NEON, ~7 GB/s
where CPython's strict binascii manages 0.3-0.4 GB/s).

The language and the bytes are those of ``binascii.a2b_base64(text, strict_mode=True)`` in
CPython 3.12-3.14 on texts whose length is a multiple of 4 (edgevlm.h spells it out;
:mod:`edgevlm.wire.strict_base64` says where 3.11 and 3.15 differ). The text is read in
place and the bytes are written straight into the caller's buffer: no copy on either side.
An ASCII ``str`` is read through ``PyUnicode_AsUTF8AndSize``, which hands out CPython's own
character buffer for such strings (encoding a 34 MB str to bytes first cost more than the
decoding itself: a copy into freshly mapped pages); where ctypes cannot reach that function
the str is encoded once. :mod:`edgevlm.wire.strict_base64` is the user: it owns the error messages
and falls back to binascii when the core is not built.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from .native import ffi, lib, raise_for_status

__all__ = ["Base64DecodeError", "decode_into", "decode_strict", "decoded_size", "kernels"]


class Base64DecodeError(ValueError):
    """Not strict base64; ``offset`` is the first character that cannot be where it is (the
    length itself when it is not a multiple of 4)."""

    def __init__(self, offset: int) -> None:
        super().__init__(f"not strict base64 at offset {offset}")
        self.offset = offset


def kernels(scalar: bool = False) -> str:
    """The decoder that runs: "avx2", "neon" or "scalar" (the reference)."""
    mode = lib.EDGEVLM_KERNELS_SCALAR if scalar else lib.EDGEVLM_KERNELS_BEST
    return str(ffi.string(lib.edgevlm_base64_kernels(mode)).decode("ascii"))


def decoded_size(text: bytes | str) -> int:
    """Bytes ``text`` decodes to (from its length and its last two characters; nothing is
    decoded). Raises :class:`Base64DecodeError` when the length is not a multiple of 4."""
    src, n = _text_view(text)
    return _size(src, n)


def decode_into(text: bytes | str, out: Any, *, scalar: bool = False) -> int:
    """Decode ``text`` into ``out`` (a writable C-contiguous buffer: a numpy array, bytearray,
    memoryview) and return the bytes written; ``out`` may be larger than needed.

    Raises :class:`Base64DecodeError` on anything but strict base64 (``out`` then holds
    garbage), ValueError when ``out`` is too small. ``scalar`` picks the reference decoder.
    """
    src, n = _text_view(text)
    need = _size(src, n)
    dst = ffi.from_buffer("uint8_t[]", out, require_writable=True)
    if len(dst) < need:
        raise ValueError(f"output buffer of {len(dst)} bytes is too small for the {need} "
                         "decoded bytes")
    return _decode(src, n, dst, len(dst), scalar)


def decode_strict(text: bytes | str, *, scalar: bool = False) -> bytes:
    """The decoded bytes of strict base64 ``text``; :class:`Base64DecodeError` otherwise."""
    src, n = _text_view(text)
    out = np.empty(_size(src, n), dtype=np.uint8)  # not zero-filled
    _decode(src, n, ffi.from_buffer("uint8_t[]", out), out.size, scalar)
    return out.tobytes()


def _utf8_of_str() -> Any:
    """CPython's ``PyUnicode_AsUTF8AndSize`` through ctypes (holding the GIL), or None."""
    try:
        fn = ctypes.pythonapi.PyUnicode_AsUTF8AndSize
    except (AttributeError, OSError):  # pragma: no cover - not CPython
        return None
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.py_object, ctypes.POINTER(ctypes.c_ssize_t)]
    return fn


_UTF8_OF_STR = _utf8_of_str()


def _text_view(text: bytes | str) -> tuple[Any, int]:
    """(char pointer, length) of the text, valid while ``text`` lives; nothing is copied
    (except a str's encoding where CPython's buffer cannot be reached)."""
    if not isinstance(text, str):
        src = ffi.from_buffer(text)
        return src, len(src)
    if not text.isascii():  # O(1) in CPython; a non-ASCII character is never base64
        try:
            text.encode("ascii")
        except UnicodeEncodeError as exc:
            raise Base64DecodeError(exc.start) from None
    if _UTF8_OF_STR is None:  # pragma: no cover - not CPython
        data = text.encode("ascii")
        return ffi.from_buffer(data), len(data)
    size = ctypes.c_ssize_t()
    address = _UTF8_OF_STR(text, ctypes.byref(size))  # an ASCII str's own characters
    if not address:  # pragma: no cover - only on a failed allocation
        raise MemoryError("PyUnicode_AsUTF8AndSize failed")
    return ffi.cast("const char *", address), int(size.value)


def _size(src: Any, n: int) -> int:
    """The decoded size, from edgevlm_base64_decode with no output room (O(1))."""
    out_len = ffi.new("size_t *")
    bad = ffi.new("size_t *")
    status = lib.edgevlm_base64_decode(src, n, ffi.NULL, 0, lib.EDGEVLM_KERNELS_BEST, out_len,
                                       bad)
    if status == lib.EDGEVLM_ERR_INVALID_INPUT:
        raise Base64DecodeError(int(bad[0]))
    if n and status != lib.EDGEVLM_ERR_ARGUMENT:
        raise_for_status(status, "edgevlm_base64_decode: sizing failed")
    return int(out_len[0])


def _decode(src: Any, n: int, dst: Any, cap: int, scalar: bool) -> int:
    out_len = ffi.new("size_t *")
    bad = ffi.new("size_t *")
    mode = lib.EDGEVLM_KERNELS_SCALAR if scalar else lib.EDGEVLM_KERNELS_BEST
    status = lib.edgevlm_base64_decode(src, n, dst, cap, mode, out_len, bad)
    if status == lib.EDGEVLM_ERR_INVALID_INPUT:
        raise Base64DecodeError(int(bad[0]))
    raise_for_status(status, "edgevlm_base64_decode failed")
    return int(out_len[0])
