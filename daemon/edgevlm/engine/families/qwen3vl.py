"""Qwen3-VL (GGUF architecture ``qwen3vl``, llama.cpp's layout): 16-px patches merged 2×2,
ChatML with ``<|vision_start|>`` + pads + ``<|vision_end|>`` per image (:mod:`..prompt`)."""

from __future__ import annotations

from ..prompt import assemble_prompt
from .base import ModelFamily

FAMILY = ModelFamily(
    architecture="qwen3vl", sizing="qwen3-vl",
    markers={"image_pad": "<|image_pad|>", "video_pad": "<|video_pad|>",
             "vision_start": "<|vision_start|>", "vision_end": "<|vision_end|>"},
    eos_texts=("<|im_end|>", "<|endoftext|>"), assemble_prompt=assemble_prompt)
