"""llama.cpp's tensor-type mixes (``llama-quantize Q4_K_M`` and friends) for the Qwen3-VL text
model: which type each matrix of ``model.gguf`` gets, and what a matrix whose rows do not
divide into the type's blocks falls back to.

Transcribed from llama.cpp ``src/llama-quant.cpp`` at commit
007dbbf3fd17eefe9b47fee45f48f7ba5e62b714: ``llama_ftype_get_default_type`` (the mix's default
type), ``llama_tensor_get_type_impl`` (the per-tensor rules) and ``tensor_type_fallback`` (rows
not a multiple of the block size). Only the branches a dense Qwen3-VL reaches are kept:
architecture ``qwen3vl`` (never Falcon, never ``LLM_TYPE_70B``), ``n_expert`` 0, separate
``attn_q/k/v`` (no fused QKV), no importance matrix, no ``--pure``, no overrides.
llama.cpp counts ``attn_v`` / ``ffn_down`` tensors in file order, which (its loader sorts
weights by layer number) is the layer index here: one of each per layer.

The fallbacks are llama.cpp's (Q4_K → Q5_0, Q5_K → Q5_1, …; the core runs them all), then
F16 where even 32-value blocks do not divide the rows; both are logged. The uniform types
(f32, f16, bf16, q8_0, q4_0) are not mixes: every matrix gets the type (``llama-quantize
--pure``), as before.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

logger = logging.getLogger(__name__)

QType = GGMLQuantizationType


@dataclass(frozen=True)
class QuantMix:
    """One ``--type`` of llama.cpp's K-quant / IQ4 family."""

    name: str            # the --type value, llama-quantize's name in lower case
    default: QType       # llama_ftype_get_default_type
    file_type: int       # general.file_type: llama.cpp's LLAMA_FTYPE_MOSTLY_* (gguf LlamaFileType)


MIXES: dict[str, QuantMix] = {m.name: m for m in (
    QuantMix("q4_k_m", QType.Q4_K, 15),
    QuantMix("q5_k_m", QType.Q5_K, 17),
    QuantMix("q6_k", QType.Q6_K, 18),
    QuantMix("q3_k_m", QType.Q3_K, 12),
    QuantMix("iq4_xs", QType.IQ4_XS, 30),
)}


@dataclass(frozen=True)
class TextShape:
    """What the rules read from the model: layer count, query heads per KV head, and whether
    ``output.weight`` is absent (tied: ``token_embd`` is then the output projection too)."""

    n_layer: int
    n_gqa: int
    tied: bool


def use_more_bits(i_layer: int, n_layer: int) -> bool:
    """llama.cpp's ``use_more_bits``: the first and last eighth of the layers and every third
    in between (C integer division; every operand here is non-negative)."""
    return (i_layer < n_layer // 8 or i_layer >= 7 * n_layer // 8
            or (i_layer - n_layer // 8) % 3 == 2)


def _layer_of(name: str) -> int:
    return int(name.split(".")[1])


def _output_type(mix: QuantMix, row_width: int) -> QType:
    """``output.weight``, or ``token_embd.weight`` of a tied model."""
    if row_width % GGML_QUANT_SIZES[mix.default][0] != 0:
        return QType.Q8_0
    return QType.Q6_K


def mix_type(mix: QuantMix, name: str, row_width: int, shape: TextShape) -> QType:
    """The type llama.cpp's mix gives the text matrix ``name`` (rows of ``row_width`` values),
    before the fallback for rows that do not divide into blocks (:func:`fit_rows`)."""
    ftype = mix.name
    if name == "output.weight" or (shape.tied and name == "token_embd.weight"):
        return _output_type(mix, row_width)
    if name == "token_embd.weight":
        return mix.default
    if name.endswith("attn_v.weight"):
        i, n = _layer_of(name), shape.n_layer
        if ftype == "q3_k_m":
            return QType.Q5_K if i < 2 else QType.Q4_K
        if ftype == "iq4_xs" and shape.n_gqa >= 4:
            return QType.Q5_K
        if ftype in ("q4_k_m", "q5_k_m") and use_more_bits(i, n):
            return QType.Q6_K
        return mix.default
    if name.endswith("ffn_down.weight"):
        i, n = _layer_of(name), shape.n_layer
        if ftype == "q3_k_m":
            return QType.Q5_K if i < n // 16 else QType.Q4_K   # not Falcon: Q4_K
        if ftype == "q4_k_m" and use_more_bits(i, n):
            return QType.Q6_K
        if ftype == "iq4_xs" and i < n // 8:               # no importance matrix
            return QType.Q5_K
        if ftype == "q5_k_m" and use_more_bits(i, n):
            return QType.Q6_K
        return mix.default
    if name.endswith("attn_output.weight") and ftype == "q3_k_m":
        return QType.Q4_K
    return mix.default                                     # attn_q, attn_k, ffn_gate, ffn_up


# tensor_type_fallback: the type llama.cpp uses when rows do not divide into 256-value blocks
_LLAMA_FALLBACK: dict[QType, QType] = {
    QType.IQ4_XS: QType.IQ4_NL, QType.Q2_K: QType.Q4_0, QType.Q3_K: QType.Q4_0,
    QType.Q4_K: QType.Q5_0, QType.Q5_K: QType.Q5_1, QType.Q6_K: QType.Q8_0,
}


def fit_rows(name: str, wanted: QType, row_width: int) -> QType:
    """``wanted``, or what a matrix whose rows of ``row_width`` values do not divide into
    ``wanted``'s blocks is stored as: llama.cpp's fallback (IQ4_XS → IQ4_NL, Q2_K/Q3_K →
    Q4_0, Q6_K → Q8_0, Q4_K → Q5_0, Q5_K → Q5_1), then F16 when even
    that type's 32-value blocks do not divide the rows (also for Q8_0 / Q4_0 / IQ4_NL, where
    llama.cpp has no fallback). Logged."""
    if row_width % GGML_QUANT_SIZES[wanted][0] == 0:
        return wanted
    got = _LLAMA_FALLBACK.get(wanted, QType.F16)
    if row_width % GGML_QUANT_SIZES[got][0] != 0:
        got = QType.F16
    logger.info("%s: rows of %d values are not a multiple of %d; %s falls back to %s",
                name, row_width, GGML_QUANT_SIZES[wanted][0], wanted.name, got.name)
    return got
