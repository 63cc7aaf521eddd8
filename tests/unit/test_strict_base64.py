"""Strict base64: the native decoder (SIMD and scalar reference) accepts exactly what
``binascii.a2b_base64(strict_mode=True)`` accepts, with the same bytes, and
``strict_base64`` gives the same answers and error messages on the native path and on the
binascii fallback."""

from __future__ import annotations

import base64
import binascii
import sys
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import edgevlm.core
from edgevlm.core import base64_native
from edgevlm.wire import strict_base64

ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
# Characters a broken or foreign encoder produces, next to the alphabet and '='.
JUNK = " \t\r\n-_.,:;!*\\\"'@[]`{}~?\x00\x7f\x80é€"
INVALID_MESSAGE = ("contains characters outside A-Z a-z 0-9 + / or misplaced '=' padding (no "
                   "whitespace, no URL-safe alphabet)")
BOTH_DECODERS = pytest.mark.parametrize("scalar", [False, True], ids=["best", "scalar"])


def binascii_strict(text: str | bytes) -> bytes | None:
    """The oracle: binascii's strict decode as CPython 3.12-3.14 do it, None when it refuses
    (the length checked first, as strict_base64 does). CPython 3.11 also accepts whole groups
    of excess padding ("QUJD====", gh-118314), refused here as in later versions."""
    if len(text) % 4 or text[-3:] in ("===", b"==="):
        return None
    try:
        return binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError):
        return None


def native(text: str | bytes, scalar: bool) -> bytes | None:
    try:
        out = base64_native.decode_strict(text, scalar=scalar)
    except base64_native.Base64DecodeError:
        return None
    buffer = np.full(len(out) + 5, 0xA5, dtype=np.uint8)  # decode_into agrees, writes no more
    assert base64_native.decode_into(text, buffer, scalar=scalar) == len(out)
    assert buffer[:len(out)].tobytes() == out and (buffer[len(out):] == 0xA5).all()
    return out


def hide_native_decoder(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the import of the native decoder fail, as on an install without the core."""
    monkeypatch.setitem(sys.modules, "edgevlm.core.base64_native", None)
    monkeypatch.delattr(edgevlm.core, "base64_native")
    strict_base64._native.cache_clear()
    assert strict_base64._native() is None


@pytest.fixture
def binascii_fallback(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """strict_base64 as it runs without the native core (binascii decodes)."""
    hide_native_decoder(monkeypatch)
    yield
    monkeypatch.undo()
    strict_base64._native.cache_clear()


def strict_results(text: str | bytes) -> tuple[bytes | None, str | None]:
    """(bytes, None) or (None, error message) of strict_base64.decode."""
    try:
        return strict_base64.decode(text), None
    except strict_base64.Base64Error as exc:
        return None, str(exc)


def test_the_native_decoder_is_what_strict_base64_runs() -> None:
    assert strict_base64._native() is base64_native
    assert base64_native.kernels(scalar=True) == "scalar"
    assert base64_native.kernels() in {"avx2", "neon", "scalar"}


# --------------------------------------------------------------------------- valid inputs


@settings(max_examples=300, deadline=None)
@given(raw=st.binary(max_size=700), as_str=st.booleans())
def test_native_decodes_every_encoding_like_binascii(raw: bytes, as_str: bool) -> None:
    text: str | bytes = base64.b64encode(raw)
    if as_str:
        text = text.decode("ascii")
    assert binascii_strict(text) == raw
    assert native(text, scalar=False) == raw
    assert native(text, scalar=True) == raw
    assert strict_base64.decode(text) == raw


@pytest.mark.parametrize("size", [0, 1, 2, 3, 47, 48, 49, 4095, 4096, 1 << 20, (1 << 20) + 2])
def test_native_round_trips_long_payloads(size: int) -> None:
    raw = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    text = base64.b64encode(raw).decode("ascii")
    assert native(text, scalar=False) == native(text, scalar=True) == raw
    out = np.empty(size, dtype=np.uint8)
    assert strict_base64.decode_into(text, out) == size and out.tobytes() == raw


@pytest.mark.parametrize("text, raw", [("QR==", b"A"), ("QUJ=", b"AB"), ("Q///", b"C\xff\xff"),
                                       ("////", b"\xff\xff\xff"), ("", b"")])
def test_unused_low_bits_before_padding_are_ignored_as_binascii_does(text: str,
                                                                     raw: bytes) -> None:
    assert binascii_strict(text) == raw
    assert native(text, scalar=False) == native(text, scalar=True) == raw


# --------------------------------------------------------------------------- invalid inputs

INVALID = {
    "length 1": "A",
    "length 3": "QUJ",
    "length 5": "QUJDR",
    "truncated padding": "QQ=",
    "extra padding": "QUI==",
    "padding group of its own": "QUJD====",
    "three '='": "Q===",
    "'=' only": "====",
    "'=' in the middle": "QQ==QUJD",
    "'=' inside a group": "QU=D",
    "data after padding": "QQ=A",
    "space": "QUJD QUJD  ",
    "leading space": " QUJ",
    "newline": "QUJD\nQUJD",
    "CRLF": "QU\r\nQUJD",
    "tab": "QUJ\t",
    "URL-safe '-'": "QUJ-",
    "URL-safe '_'": "_UJD",
    "dot": "QU.D",
    "NUL": "QU\x00D",
    "DEL": "QUJ\x7f",
    "non-ASCII": "QUJé",
    "non-ASCII, 4 bytes in UTF-8": "QUé",
}


@pytest.mark.parametrize("text", INVALID.values(), ids=INVALID.keys())
@pytest.mark.parametrize("as_bytes", [False, True], ids=["str", "bytes"])
def test_malformed_text_is_refused_by_both_paths_with_the_same_message(
        text: str, as_bytes: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    data: str | bytes = text.encode("utf-8") if as_bytes else text
    assert binascii_strict(data) is None
    assert native(data, scalar=False) is None and native(data, scalar=True) is None
    on_native = strict_results(data)
    hide_native_decoder(monkeypatch)
    on_fallback = strict_results(data)
    monkeypatch.undo()
    strict_base64._native.cache_clear()
    assert on_native == on_fallback
    expected = (f"length {len(data)} is not a multiple of 4 (truncated or padded wrong)"
                if len(data) % 4 else INVALID_MESSAGE)
    assert on_native == (None, expected)


@pytest.mark.parametrize("text, offset", [("QUJD QUJD", 9), ("QUJD QUJ", 4), ("====", 0),
                                          ("Q===", 1), ("QQ=A", 2), ("QUJDQUJD====", 8),
                                          ("QUJé", 3), ("QUJDQU-D", 6)])
def test_native_error_names_the_first_bad_offset(text: str, offset: int) -> None:
    for scalar in (False, True):
        with pytest.raises(base64_native.Base64DecodeError) as info:
            base64_native.decode_strict(text, scalar=scalar)
        assert info.value.offset == offset
        assert str(info.value) == f"not strict base64 at offset {offset}"


text_parts = st.lists(st.sampled_from([*ALPHABET, "=", "==", *JUNK]), max_size=40)


@settings(max_examples=1500, deadline=None)
@given(parts=text_parts, pad_to_4=st.booleans())
def test_native_accepts_exactly_what_binascii_accepts_on_mixed_text(parts: list[str],
                                                                     pad_to_4: bool) -> None:
    text = "".join(parts)
    if pad_to_4:
        text += "A" * (-len(text) % 4)
    want = binascii_strict(text)
    assert native(text, scalar=False) == want
    assert native(text, scalar=True) == want
    encoded = text.encode("utf-8")
    assert native(encoded, scalar=False) == native(encoded, scalar=True) == \
        binascii_strict(encoded)
    on_native = strict_results(text)
    with pytest.MonkeyPatch.context() as monkeypatch:
        hide_native_decoder(monkeypatch)
        on_fallback = strict_results(text)
    strict_base64._native.cache_clear()
    assert on_native == on_fallback and on_native[0] == want


def test_excess_padding_groups_are_refused_on_every_python() -> None:
    """CPython 3.11's strict binascii accepts "QUJD====" (gh-118314); strict_base64 never."""
    for text in ("QUJD====", "QUJDQUJD========", b"QUJD===="):
        assert strict_results(text) == (None, INVALID_MESSAGE)
        with pytest.MonkeyPatch.context() as monkeypatch:
            hide_native_decoder(monkeypatch)
            assert strict_results(text) == (None, INVALID_MESSAGE)
        strict_base64._native.cache_clear()


@BOTH_DECODERS
def test_every_junk_character_at_every_position_of_long_texts(scalar: bool) -> None:
    """Texts long enough for the SIMD blocks (32 and 64 characters), ending in data, '=' and
    '==': each junk character and '=' at each position is refused or accepted as binascii."""
    rng = np.random.default_rng(7)
    for size in (150, 151, 152):
        text = base64.b64encode(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
        for pos in range(len(text)):
            for junk in (b"=", b" ", b"\n", b"-", b"_", b"\x80", b"\xff", b"@", b"\x00"):
                bad = text[:pos] + junk + text[pos + 1:]
                assert native(bad, scalar) == binascii_strict(bad), (size, pos, junk)


# --------------------------------------------------------------------------- fallback and buffers


def test_fallback_decodes_like_the_native_path(binascii_fallback: None) -> None:
    raw = bytes(range(256)) * 40
    text = base64.b64encode(raw).decode("ascii")
    assert strict_base64.decode(text) == raw
    out = bytearray(len(raw) + 3)
    assert strict_base64.decode_into(text, out) == len(raw) and bytes(out[:len(raw)]) == raw
    with pytest.raises(strict_base64.Base64Error, match="misplaced '=' padding"):
        strict_base64.decode_into("QQ==QUJD", out)


@pytest.mark.parametrize("path", ["native", "fallback"])
def test_decode_into_a_too_small_buffer_is_a_value_error(path: str,
                                                         request: pytest.FixtureRequest) -> None:
    if path == "fallback":
        request.getfixturevalue("binascii_fallback")
    with pytest.raises(ValueError, match="too small") as info:
        strict_base64.decode_into("QUJD", np.empty(2, dtype=np.uint8))
    assert not isinstance(info.value, strict_base64.Base64Error)


def test_decode_into_fills_a_float32_array_in_place() -> None:
    values = np.arange(12, dtype="<f4").reshape(3, 4) / 7
    out = np.empty((3, 4), dtype="<f4")
    assert strict_base64.decode_into(base64.b64encode(values.tobytes()), out) == 48
    assert np.array_equal(out, values)
