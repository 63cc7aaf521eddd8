"""Qwen3-VL (GGUF architecture ``qwen3vl``, llama.cpp's layout): 16-px patches merged 2×2,
its chat template (:func:`render_segments`, ChatML) and ``<|vision_start|>`` + pads +
``<|vision_end|>`` per image (:mod:`..prompt`).

The template renders messages the way the checkpoint's ``chat_template`` does: ChatML, no
default system prompt, each image as ``<|vision_start|><|image_pad|><|vision_end|>`` and each
video as ``<|vision_start|><|video_pad|><|vision_end|>`` (one placeholder each, expanded by the
prompt assembler), the generation prompt ``<|im_start|>assistant\\n`` at the end
(tests/native/test_golden_fixtures_consistent.py compares it with the checkpoint's template).
"""

from __future__ import annotations

from collections.abc import Sequence

from ...tokenizer import (
    IM_END,
    IM_START,
    IMAGE_PLACEHOLDER,
    VIDEO_PLACEHOLDER,
    Control,
    MediaSlot,
    Segment,
)
from ...wire.protocol import (
    ImagePart,
    ImageRefPart,
    ImageUrlPart,
    Message,
    TextPart,
    VideoFramesPart,
    VisionTokensPart,
)
from ..prompt import assemble_prompt
from .base import ModelFamily


def render_segments(messages: Sequence[Message], add_generation_prompt: bool = True
                    ) -> list[Segment]:
    """Qwen3-VL's chat template as :data:`~edgevlm.tokenizer.Segment` pieces: the template's
    control tokens, text (role lines, newlines and message text; one piece between two
    non-text pieces, to encode with :meth:`HFTokenizer.encode_text`) and media slots (each
    stands for the whole ``<|vision_start|>…<|vision_end|>`` placeholder of one image or
    video, in order)."""
    out: list[Segment] = []
    text = ""

    def cut(piece: Control | MediaSlot) -> None:
        nonlocal text
        if text:
            out.append(text)
            text = ""
        out.append(piece)

    media = 0
    for m in messages:
        cut(Control(IM_START))
        text += f"{m.role}\n"
        for part in m.parts():
            if isinstance(part, TextPart):
                text += part.text
            elif isinstance(part, ImagePart | ImageUrlPart | ImageRefPart | VisionTokensPart
                            | VideoFramesPart):
                cut(media)
                media += 1
            # audio parts are refused at admission
        cut(Control(IM_END))
        text += "\n"
    if add_generation_prompt:
        cut(Control(IM_START))
        text += "assistant\n"
    if text:
        out.append(text)
    return out


def render_chat(messages: Sequence[Message], add_generation_prompt: bool = True) -> str:
    """The prompt text of the Qwen3-VL chat template, one placeholder per image or video (to
    show or compare with the checkpoint's own template: tokenizing it would read special
    strings of the message text as special tokens; the engine tokenizes
    :func:`render_segments`)."""
    kinds = [VIDEO_PLACEHOLDER if isinstance(p, VideoFramesPart) else IMAGE_PLACEHOLDER
             for m in messages for p in m.parts()
             if isinstance(p, ImagePart | ImageUrlPart | ImageRefPart | VisionTokensPart
                           | VideoFramesPart)]
    return "".join(piece.token if isinstance(piece, Control)
                   else piece if isinstance(piece, str) else kinds[piece]
                   for piece in render_segments(messages, add_generation_prompt))


FAMILY = ModelFamily(
    architecture="qwen3vl", sizing="qwen3-vl",
    markers={"image_pad": "<|image_pad|>", "video_pad": "<|video_pad|>",
             "vision_start": "<|vision_start|>", "vision_end": "<|vision_end|>"},
    eos_texts=("<|im_end|>", "<|endoftext|>"), chat_template=render_segments,
    assemble_prompt=assemble_prompt)
