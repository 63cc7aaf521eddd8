"""Prompt assembly: chat template -> token ids with expanded placeholders, 3-axis MRoPE
positions (transformers' ``get_rope_index``), and the vision rows that replace the pads.

Image k becomes ``<|vision_start|>`` + n_k × ``<|image_pad|>`` + ``<|vision_end|>``. A video
becomes, per temporal group, ``<t seconds>`` ``<|vision_start|>`` pads ``<|vision_end|>`` with
no outer pair: the layout of transformers 4.57 (Qwen3-VL's release) and ≥ 5.25, whose
``Qwen3VLProcessor.get_text_with_replacements`` collapses the chat template's
``<|vision_start|><|video_pad|><|vision_end|>`` before expanding it (5.10–5.24 kept the outer
pair: 2 tokens more per video).
Positions: text tokens advance all three axes together; the pads of one group (one image, or
one temporal group of a video) with merged grid gh × gw take ``(p, p + row, p + col)`` and
advance p by ``max(gh, gw)``. ``rope_delta = max(position) + 1 − length`` shifts decoding.

Every marker (``<|im_start|>``, ``<|im_end|>``, the vision markers and pads) is put here by id;
text, the message text included, is encoded with special strings as plain text, so a message
cannot forge a turn or a pad.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ..tokenizer import ChatTokens, HFTokenizer
from ..wire.features import VisionFeatures

if TYPE_CHECKING:
    from .model import SpecialTokens  # model.py loads the families, which use this module

IntArray = npt.NDArray[np.int32]


@dataclass(frozen=True)
class PromptMedia:
    """One image or video's features, in prompt order."""

    features: VisionFeatures
    is_video: bool = False
    timestamps: tuple[str, ...] = ()  # one per temporal group (videos)


@dataclass(frozen=True)
class PromptInputs:
    tokens: IntArray                  # [L]
    positions: IntArray               # [3, L] (t, h, w)
    vision_index: IntArray            # [L]: -1 text, else row of vision_rows
    vision_rows: npt.NDArray[np.float32]       # [n_vision, d]
    deepstack_rows: npt.NDArray[np.float32] | None  # [k, n_vision, d]
    rope_delta: int
    n_vision: int


def _media_tokens(media: PromptMedia, special: SpecialTokens, tok: HFTokenizer
                  ) -> list[tuple[list[int], tuple[int, int] | None]]:
    """Runs of (token ids, merged grid of a pad run or None for text)."""
    gt, gh, gw = media.features.grid
    if not media.is_video:
        return [([special.vision_start], None), ([special.image_pad] * (gt * gh * gw), (gh, gw)),
                ([special.vision_end], None)]
    if len(media.timestamps) != gt:
        raise ValueError(f"video with {gt} temporal groups has {len(media.timestamps)} "
                         "timestamps")
    runs: list[tuple[list[int], tuple[int, int] | None]] = []
    for ts in media.timestamps:
        runs.append(([*tok.encode(ts), special.vision_start], None))
        runs.append(([special.video_pad] * (gh * gw), (gh, gw)))
        runs.append(([special.vision_end], None))
    return runs


def assemble_prompt(chat: ChatTokens, media: Sequence[PromptMedia], tok: HFTokenizer,
                    special: SpecialTokens, n_deepstack: int) -> PromptInputs:
    """The prompt of a tokenized chat (:func:`edgevlm.tokenizer.tokenize_chat`) with each
    media slot expanded to its placeholder run, in order."""
    if len(media) != sum(1 for p in chat.pieces if isinstance(p, int)):
        raise ValueError("the number of media features does not match the prompt's media parts")
    runs: list[tuple[list[int], tuple[int, int] | None]] = []
    for piece in chat.pieces:
        if isinstance(piece, tuple):
            runs.append((list(piece), None))
        else:
            runs.extend(_media_tokens(media[piece], special, tok))

    tokens: list[int] = []
    pos_t: list[npt.NDArray[np.int64]] = []
    pos_h: list[npt.NDArray[np.int64]] = []
    pos_w: list[npt.NDArray[np.int64]] = []
    vis_flags: list[npt.NDArray[np.bool_]] = []
    p = 0
    for ids, grid in runs:
        tokens.extend(ids)
        n = len(ids)
        if grid is None:
            r = np.arange(p, p + n, dtype=np.int64)
            pos_t.append(r)
            pos_h.append(r)
            pos_w.append(r)
            vis_flags.append(np.zeros(n, dtype=bool))
            p += n
        else:
            gh, gw = grid
            rows, cols = np.divmod(np.arange(n, dtype=np.int64), gw)
            pos_t.append(np.full(n, p, dtype=np.int64))
            pos_h.append(p + rows)
            pos_w.append(p + cols)
            vis_flags.append(np.ones(n, dtype=bool))
            p += max(gh, gw)
    positions = np.stack([np.concatenate(pos_t), np.concatenate(pos_h),
                          np.concatenate(pos_w)]).astype(np.int32)
    is_vision = np.concatenate(vis_flags)
    n_vision = int(is_vision.sum())
    vision_index = np.full(len(tokens), -1, dtype=np.int32)
    vision_index[is_vision] = np.arange(n_vision, dtype=np.int32)

    d = media[0].features.hidden_size if media else 0
    vision_rows = (np.concatenate([m.features.embeddings for m in media]) if media
                   else np.zeros((0, d), dtype=np.float32))
    deepstack: npt.NDArray[np.float32] | None = None
    if media and n_deepstack > 0 and any(m.features.has_deepstack for m in media):
        deepstack = np.zeros((n_deepstack, n_vision, d), dtype=np.float32)
        row = 0
        for m in media:
            n = m.features.n_tokens
            if m.features.deepstack is not None:
                deepstack[:, row:row + n] = m.features.deepstack[:n_deepstack]
            row += n
    length = len(tokens)
    rope_delta = int(positions.max()) + 1 - length if length else 0
    return PromptInputs(np.asarray(tokens, dtype=np.int32), np.ascontiguousarray(positions),
                        vision_index, np.ascontiguousarray(vision_rows), deepstack, rope_delta,
                        n_vision)
