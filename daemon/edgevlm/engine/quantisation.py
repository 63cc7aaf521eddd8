"""The name of a model file's quantisation, as llama.cpp and Ollama show it ("Q4_K_M").

A mixed file (``llama-quantize Q4_K_M``: Q4_K and Q6_K matrices) is named by its
``general.file_type`` (llama.cpp's ``llama_ftype``); a file without one by the type of its
first layer's matrices (``edgevlm_model_info.weight_type``, a ggml type id).
"""

from __future__ import annotations

from typing import Any

# llama.cpp's llama_ftype (gguf-py LlamaFileType) of the files edgevlm reads
FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
              10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S",
              15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 25: "IQ4_NL", 30: "IQ4_XS",
              32: "BF16"}
# ggml tensor types of the weights (edgevlm_model_info.weight_type)
WEIGHT_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0",
                10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 20: "IQ4_NL",
                23: "IQ4_XS", 30: "BF16"}


def quantisation_name(model: Any) -> str:
    """"Q4_K_M" for a llama-quantize Q4_K_M file, "Q8_0" for a Q8_0 one, …"""
    file_type = model.meta_int(0, "general.file_type")
    if file_type is not None and file_type in FILE_TYPES:
        return FILE_TYPES[file_type]
    return weight_type_name(model)


# Weight types whose products llama.cpp always takes against activations rounded to Q8_K
# (the K-quants) or Q8_0 (IQ4_NL): for them precision "auto" is "fast"
ROUNDED_BY_LLAMA_CPP = frozenset({"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS"})


def weight_type_name(model: Any) -> str:
    """The ggml type of the first layer's matrices ("Q4_K" in a Q4_K_M file)."""
    weight_type = int(model.info.get("weight_type", -1))
    return WEIGHT_TYPES.get(weight_type, f"type{weight_type}")


def auto_precision(model: Any) -> str:
    """What precision ``auto`` means for this model: ``fast`` for K-quant and IQ4 weights (a
    file that is already llama.cpp's rounding of the weights, run with llama.cpp's rounding of
    the activations: ~1.3-1.8x the exact prefill speed), ``exact`` for F32/F16/BF16/Q8_0/Q4_0
    (within ~1e-5 of float32 over the file's weights)."""
    return "fast" if weight_type_name(model) in ROUNDED_BY_LLAMA_CPP else "exact"
