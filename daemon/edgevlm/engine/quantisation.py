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
    weight_type = int(model.info.get("weight_type", -1))
    return WEIGHT_TYPES.get(weight_type, f"type{weight_type}")
