"""Client-precomputed vision features: the ``vision_tokens`` content part, protocol v1.

A client that runs the same vision encoder as the board sends the rows the LLM consumes and
the board skips its ViT. Protocol v1 (seed 000): ``grid`` = [gt, gh, gw] merged grid, each
>= 1, n = gt*gh*gw <= 4096; ``tokens_b64`` = base64 of n*d float32 little-endian; optional
``ds_b64`` = at most 3 base64 strings of n*d float32 each (the DeepStack features). d is the
LLM hidden size of the board's model, never the client's word.

Two extensions, both opt-in: ``dtype: "f16"`` (half the bytes, widened to float32 here) and
``layout: "packed"`` (one buffer of n rows of d*(1+k) values: the main row then the k DeepStack
rows, the way vLLM and llama.cpp concatenate them; ``ds_b64`` must then be absent).

Every size is checked from the base64 *length* before anything is decoded, so a wrong payload
costs nothing but a few comparisons; any violation rejects the whole part with
:class:`InvalidVisionTokens` naming the field, the expected and the actual byte counts. Those
checks are :func:`check_vision_tokens`, which admission runs before the token budget (a
malformed part is invalid whatever the model's context) and decoding runs again.
Without DeepStack features the LLM runs without DeepStack injection (the answer says
``deepstack: false``); the output then differs from the board's own ViT path.
"""

from __future__ import annotations

import base64
import logging
import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from . import strict_base64
from .errors import InvalidVisionTokens, PayloadTooLarge
from .features import FloatArray, VisionFeatures
from .protocol import VisionTokensPayload

__all__ = [
    "MAX_DEEPSTACK_ENTRIES",
    "MAX_VISION_TOKENS",
    "CheckedVisionTokens",
    "FeatureDtype",
    "Layout",
    "VisionFeatures",
    "check_vision_tokens",
    "checked_grid",
    "decode_vision_tokens",
    "encode_vision_tokens",
    "expected_bytes",
]

logger = logging.getLogger(__name__)

MAX_VISION_TOKENS = 4096
MAX_DEEPSTACK_ENTRIES = 3

FeatureDtype = Literal["f32", "f16"]
Layout = Literal["separate", "packed"]

_WIRE_DTYPES: dict[str, np.dtype[Any]] = {"f32": np.dtype("<f4"), "f16": np.dtype("<f2")}


def expected_bytes(n: int, d: int, dtype: str) -> int:
    """Bytes of n rows of d values of the wire ``dtype`` ("f32" or "f16")."""
    return n * d * _wire_dtype(dtype).itemsize


@dataclass(frozen=True)
class _Field:
    """One base64 field of a payload and the byte count its length was checked against."""

    name: str  # "vision_tokens.tokens_b64", "vision_tokens.ds_b64[1]"
    text: str
    want: int
    formula: str  # how ``want`` was computed, for messages


@dataclass(frozen=True)
class CheckedVisionTokens:
    """A ``vision_tokens`` payload whose structure and byte counts fit the model.

    Made only by :func:`check_vision_tokens`; what is left to decoding is the base64 body and
    the values themselves (strict alphabet, finite numbers).
    """

    grid: tuple[int, int, int]
    n: int  # gt*gh*gw, the LLM tokens
    d: int  # the model's hidden size
    k: int  # DeepStack sets carried (0: none)
    dtype: str
    packed: bool
    fields: tuple[_Field, ...]  # tokens_b64, then each ds_b64 entry


def check_vision_tokens(payload: VisionTokensPayload, hidden_size: int, deepstack_layers: int,
                        *, max_bytes: int | None = None) -> CheckedVisionTokens:
    """Every structural check of a ``vision_tokens`` payload, with nothing decoded.

    Grid shape and range, the DeepStack entry count and each field's byte count (from its
    base64 length: ``len*3/4`` minus the padding) against the model's ``hidden_size`` and
    ``deepstack_layers``. Admission runs it before the token budget; decoding runs it again
    (a few comparisons) so a direct caller cannot skip it. ``max_bytes``: see
    :func:`decode_vision_tokens`.
    """
    if hidden_size < 1 or not 0 <= deepstack_layers <= MAX_DEEPSTACK_ENTRIES:
        raise ValueError(f"model has hidden_size={hidden_size}, deepstack_layers="
                         f"{deepstack_layers}; want >= 1 and 0..{MAX_DEEPSTACK_ENTRIES}")
    grid = checked_grid(payload.grid)
    n, d, dtype = grid[0] * grid[1] * grid[2], hidden_size, payload.dtype
    itemsize = _wire_dtype(dtype).itemsize
    k = _checked_deepstack_count(payload, deepstack_layers)
    packed = payload.layout == "packed"
    row_values = d * (1 + k) if packed else d
    if max_bytes is not None:
        total = n * d * (1 + k) * itemsize
        if total > max_bytes:
            raise PayloadTooLarge(f"vision_tokens: {total} bytes of features (n={n} × d={d} × "
                                  f"{1 + k} sets × {itemsize} bytes {dtype}) exceed this "
                                  f"board's limit of {max_bytes} bytes per part")

    main_formula = (f"n={n} × d={d} × (1+k={k}) × {itemsize} bytes {dtype}, layout packed"
                    if packed else f"n={n} × d={d} × {itemsize} bytes {dtype}")
    row_formula = f"n={n} × d={d} × {itemsize} bytes {dtype}"
    fields = [_Field("vision_tokens.tokens_b64", payload.tokens_b64, n * row_values * itemsize,
                     main_formula)]
    for i, text in enumerate(payload.ds_b64 or ()):
        fields.append(_Field(f"vision_tokens.ds_b64[{i}]", text, n * d * itemsize, row_formula))
    for f in fields:
        _check_base64_length(f)
    return CheckedVisionTokens(grid, n, d, k, dtype, packed, tuple(fields))


def decode_vision_tokens(payload: VisionTokensPayload, hidden_size: int, deepstack_layers: int,
                         *, max_bytes: int | None = None) -> VisionFeatures:
    """Validate and decode a ``vision_tokens`` payload into float32 features.

    ``hidden_size`` and ``deepstack_layers`` come from the board's model. ``max_bytes``, if
    given, is the deployment's limit on the decoded size of one part (tokens plus DeepStack):
    above it the part is refused with :class:`PayloadTooLarge` before any decoding.
    Raises :class:`InvalidVisionTokens` on any mismatch, bad base64 or non-finite value.
    """
    # Every length first (cheap: :func:`check_vision_tokens`), then decoding (expensive).
    checked = check_vision_tokens(payload, hidden_size, deepstack_layers, max_bytes=max_bytes)
    grid, n, d, k = checked.grid, checked.n, checked.d, checked.k
    main, *ds_fields = checked.fields
    if checked.packed:
        rows = _decode_rows(main, np.empty((n, d * (1 + k)), dtype=_wire_dtype(checked.dtype)))
        embeddings, deepstack = _split_packed(main.name, rows, n, d, k)
    else:
        # Decoded straight into the float32 arrays when the wire is float32 (no copies).
        embeddings = _decode_as_f32(main, checked.dtype, np.empty((n, d), dtype=np.float32))
        _check_finite(main.name, embeddings)
        deepstack = None
        if ds_fields:
            deepstack = np.empty((len(ds_fields), n, d), dtype=np.float32)
            for i, ds_field in enumerate(ds_fields):
                _decode_as_f32(ds_field, checked.dtype, deepstack[i])
                _check_finite(ds_field.name, deepstack[i])
    features = VisionFeatures(embeddings=embeddings, deepstack=deepstack, grid=grid)
    logger.info("vision_tokens client-preprocess n=%d d=%d ds=%d grid=[%d,%d,%d]",
                n, d, features.deepstack_layers, grid[0], grid[1], grid[2])
    return features


def encode_vision_tokens(features: VisionFeatures, dtype: FeatureDtype = "f32",
                         layout: Layout = "separate") -> dict[str, Any]:
    """The JSON ``vision_tokens`` object for ``features`` (the client side of the protocol).

    f32 + separate (the defaults) gives a plain protocol-v1 object without ``dtype`` and
    ``layout`` keys, which the seed engine also reads. With ``layout="packed"`` the DeepStack
    features (if any) are inside ``tokens_b64`` and the board must have the same k.
    Raises ValueError if a value does not fit ``dtype`` (float16 overflows beyond ±65504).
    """
    wire = _wire_dtype(dtype)
    n, d = features.n_tokens, features.hidden_size
    obj: dict[str, Any] = {"grid": [int(g) for g in features.grid]}
    with np.errstate(over="ignore"):  # float16 overflow becomes inf, refused by _b64_of
        if layout == "packed":
            packed = np.empty((n, 1 + features.deepstack_layers, d), dtype=wire)
            packed[:, 0, :] = features.embeddings
            if features.deepstack is not None:
                packed[:, 1:, :] = features.deepstack.transpose(1, 0, 2)
            obj["tokens_b64"] = _b64_of(packed, "embeddings and deepstack")
        elif layout == "separate":
            obj["tokens_b64"] = _b64_of(features.embeddings.astype(wire), "embeddings")
            if features.deepstack is not None:
                obj["ds_b64"] = [_b64_of(ds.astype(wire), f"deepstack[{i}]")
                                 for i, ds in enumerate(features.deepstack)]
        else:
            raise ValueError(f"layout must be 'separate' or 'packed', got {layout!r}")
    if dtype != "f32":
        obj["dtype"] = dtype
    if layout != "separate":
        obj["layout"] = layout
    return obj


# --------------------------------------------------------------------------- checks


def _wire_dtype(dtype: str) -> np.dtype[Any]:
    try:
        return _WIRE_DTYPES[dtype]
    except KeyError:
        raise ValueError(f"dtype must be 'f32' or 'f16', got {dtype!r}") from None


def checked_grid(grid: tuple[int, int, int]) -> tuple[int, int, int]:
    """The merged grid [gt, gh, gw]: each >= 1, n = gt*gh*gw <= MAX_VISION_TOKENS (protocol v1,
    whatever the model)."""
    gt, gh, gw = grid
    if min(grid) < 1:
        raise InvalidVisionTokens(f"vision_tokens.grid: every entry of [gt, gh, gw] must be "
                                  f">= 1, got [{gt}, {gh}, {gw}]")
    n = gt * gh * gw
    if n > MAX_VISION_TOKENS:
        raise InvalidVisionTokens(f"vision_tokens.grid: expected at most {MAX_VISION_TOKENS} "
                                  f"vision tokens, got n = {gt}×{gh}×{gw} = {n}")
    return (gt, gh, gw)


def _checked_deepstack_count(payload: VisionTokensPayload, deepstack_layers: int) -> int:
    """k, the DeepStack sets the payload carries (0: none)."""
    entries = payload.ds_b64
    if payload.layout == "packed":
        if entries is not None:
            raise InvalidVisionTokens(f"vision_tokens.ds_b64: expected no entries with layout "
                                      f"'packed' (the {deepstack_layers} DeepStack features "
                                      f"are inside each tokens_b64 row), got {len(entries)}")
        return deepstack_layers
    if entries is None:
        return 0
    if len(entries) > MAX_DEEPSTACK_ENTRIES:
        raise InvalidVisionTokens(f"vision_tokens.ds_b64: expected at most "
                                  f"{MAX_DEEPSTACK_ENTRIES} entries, got {len(entries)}")
    if len(entries) != deepstack_layers:
        raise InvalidVisionTokens(f"vision_tokens.ds_b64: expected {deepstack_layers} entries "
                                  f"(the model's DeepStack layers) or none, got {len(entries)}")
    return deepstack_layers


def _check_base64_length(f: _Field) -> None:
    """Reject a payload of the wrong size from its base64 length alone (nothing decoded)."""
    field, text, want, formula = f.name, f.text, f.want, f.formula
    want_chars = 4 * math.ceil(want / 3)
    if len(text) == want_chars and strict_base64.decoded_length(text) == want:
        return
    if len(text) % 4 != 0:
        raise InvalidVisionTokens(
            f"{field}: expected {want} bytes ({formula}) = {want_chars} base64 characters, "
            f"got {len(text)} characters, not strict base64 (the length must be a multiple "
            "of 4: no whitespace or line breaks, '=' padding included)")
    try:  # a malformed tail (extra '=' padding) is a base64 error, not a size
        strict_base64.decode(text[-8:])
    except strict_base64.Base64Error as exc:
        raise InvalidVisionTokens(f"{field}: not strict base64 ({exc})") from None
    raise InvalidVisionTokens(f"{field}: expected {want} bytes ({formula}), "
                              f"got {strict_base64.decoded_length(text)}")


def _decode_rows(field: _Field,
                 rows: np.ndarray[Any, np.dtype[Any]]) -> np.ndarray[Any, np.dtype[Any]]:
    """``rows`` (a C-contiguous array of ``field.want`` bytes) filled with the decoded bytes."""
    try:
        written = strict_base64.decode_into(field.text, rows)
    except strict_base64.Base64Error as exc:
        raise InvalidVisionTokens(f"{field.name}: not strict base64 ({exc})") from None
    if written != field.want:  # pragma: no cover - check_vision_tokens proved the size
        raise InvalidVisionTokens(f"{field.name}: expected {field.want} bytes "
                                  f"({field.formula}), got {written}")
    return rows


def _decode_as_f32(field: _Field, dtype: str, out: FloatArray) -> FloatArray:
    """``out`` (float32 [n, d], C-contiguous) filled from base64 rows of the wire ``dtype``:
    decoded in place when the wire is this machine's float32, else widened from a scratch."""
    wire = _wire_dtype(dtype)
    if wire == out.dtype:
        _decode_rows(field, out)
    else:
        out[...] = _decode_rows(field, np.empty(out.shape, dtype=wire))
    return out


def _check_finite(field: str, rows: FloatArray, first_column: int = 0) -> None:
    """Refuse NaN and ±Inf; ``first_column`` places ``rows`` inside a packed row."""
    # One SIMD pass: a sum is finite only if every term is (inf, -inf and NaN all propagate);
    # a non-finite sum of finite values (overflow) falls through to the exact check.
    with np.errstate(over="ignore", invalid="ignore"):
        if math.isfinite(float(np.sum(rows))):
            return
    bad = np.flatnonzero(~np.isfinite(rows))
    if bad.size == 0:
        return
    row, col = divmod(int(bad[0]), rows.shape[1])
    value = rows.reshape(-1)[bad[0]]
    raise InvalidVisionTokens(f"{field}: expected finite values, got {value} at token {row}, "
                              f"value {first_column + col} ({bad.size} non-finite values in "
                              "this block)")


def _split_packed(field: str, rows: np.ndarray[Any, np.dtype[Any]], n: int, d: int,
                  k: int) -> tuple[FloatArray, FloatArray | None]:
    """Main rows and DeepStack sets of packed rows [n, d*(1+k)], as float32 copies."""
    sets = rows.reshape(n, 1 + k, d)
    embeddings = np.ascontiguousarray(sets[:, 0, :], dtype=np.float32)
    _check_finite(field, embeddings)
    if k == 0:
        return embeddings, None
    deepstack = np.empty((k, n, d), dtype=np.float32)
    for j in range(k):
        np.copyto(deepstack[j], sets[:, 1 + j, :])
        _check_finite(field, deepstack[j], first_column=(1 + j) * d)
    return embeddings, deepstack


def _b64_of(values: np.ndarray[Any, np.dtype[Any]], name: str) -> str:
    if not np.isfinite(values).all():
        raise ValueError(f"{name}: non-finite value after conversion to {values.dtype} "
                         "(out of range for float16?)")
    return base64.b64encode(np.ascontiguousarray(values).tobytes()).decode("ascii")
