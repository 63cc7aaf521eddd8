"""``edgevlm convert``: a transformers Qwen3-VL checkpoint → the GGUF pair edgevlm loads.

Writes ``model.gguf`` (text, architecture ``qwen3vl``) and ``mmproj.gguf`` (vision, ``clip`` with
projector ``qwen3vl_merger``) exactly as llama.cpp's ``convert_hf_to_gguf.py`` lays them out
(spec ``gguf-qwen3vl.md``), plus ``edgevlm.*`` keys. Reads safetensors through mmap and streams
tensor by tensor; needs numpy and the ``gguf`` package (the ``convert`` extra), not torch.

Modules: ``safetensors_mmap`` (reading), ``hf_config`` (config.json and friends), ``vocab``
(tokenizer metadata), ``tensor_plan`` (names, shapes, types), ``quant_mix`` (llama.cpp's
K-quant / IQ4 tensor-type mixes), ``metadata`` (key/values), ``gguf_stream`` (streaming writer
and fingerprint), ``native_quantize`` (K-quant / IQ4 rows through the C core: those types need
the built native extension), ``pipeline`` (:func:`convert_checkpoint`), ``cli`` (``main`` and
``add_convert_parser``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import ConvertError, ConvertInputError

if TYPE_CHECKING:
    from .pipeline import ConvertResult, convert_checkpoint

__all__ = ["ConvertError", "ConvertInputError", "ConvertResult", "convert_checkpoint"]


def __getattr__(name: str) -> Any:
    """``pipeline`` needs the gguf package (the ``convert`` extra): it is imported on first use,
    so that importing ``edgevlm.convert.cli`` (every ``edgevlm`` command does) works without it."""
    if name in ("ConvertResult", "convert_checkpoint"):
        from . import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
