"""Row quantisation in edgevlm's C core (``edgevlm_quantize_rows``) for the types the ``gguf``
package cannot quantise: the K-quants (Q2_K ... Q6_K), IQ4_NL and IQ4_XS. The core runs
llama.cpp's reference quantisers (``quantize_row_*_ref`` / ``quantize_iq4_*``, transcribed in
``native/src/quants_k.c`` / ``quants_iq4.c``), so the bytes are what ``llama-quantize`` writes
without an importance matrix."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import numpy.typing as npt
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from .errors import ConvertError, ConvertInputError

QType = GGMLQuantizationType

# the types edgevlm_quantize_rows writes for the converter (gguf.quants does the others)
NATIVE_TYPES = frozenset({QType.Q2_K, QType.Q3_K, QType.Q4_K, QType.Q5_K, QType.Q6_K,
                          QType.IQ4_NL, QType.IQ4_XS})
_MIN_VALUES_PER_THREAD = 1 << 18


def _core() -> tuple[Any, Any]:
    try:
        from ..core.native import ffi, lib
    except ImportError as exc:
        raise ConvertInputError(f"K-quant and IQ4 types are quantised by edgevlm's native "
                                f"core, which is not built here ({exc})") from exc
    return ffi, lib


def quantize_rows(values: npt.NDArray[np.float32], qtype: QType) -> npt.NDArray[np.uint8]:
    """float32 ``values`` [rows, width] (width a multiple of ``qtype``'s block) → the bytes of
    ``qtype`` [rows, width / block * block bytes]."""
    ffi, lib = _core()
    src = np.ascontiguousarray(values, dtype=np.float32)
    n_rows, width = src.shape
    block, size = GGML_QUANT_SIZES[qtype]
    out = np.empty((n_rows, width // block * size), dtype=np.uint8)

    def rows(start: int, stop: int) -> int:
        n = stop - start
        got: int = lib.edgevlm_quantize_rows(
            int(qtype), ffi.cast("const float *", src[start:stop].ctypes.data),
            ffi.cast("void *", out[start:stop].ctypes.data), n, width)
        if got == -lib.EDGEVLM_ERR_INVALID_INPUT:
            raise ConvertInputError(f"a NaN or infinite weight cannot be quantised to "
                                    f"{qtype.name}")
        if got != n * out.shape[1]:
            raise ConvertError(f"internal error: quantising {n}x{width} values to "
                               f"{qtype.name} returned {got}, expected {n * out.shape[1]} bytes")
        return got

    # rows are independent: one chunk per core (the C call releases the GIL), as
    # llama-quantize's threads do; small tensors in one call
    chunks = min(os.cpu_count() or 1, max(1, src.size // _MIN_VALUES_PER_THREAD))
    bounds = [n_rows * i // chunks for i in range(chunks + 1)]
    if chunks == 1:
        rows(0, n_rows)
    else:
        with ThreadPoolExecutor(chunks) as pool:
            list(pool.map(rows, bounds[:-1], bounds[1:]))
    return out
