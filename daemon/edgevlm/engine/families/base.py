"""What a model family is to the Python side: its preprocessing rules, its special tokens and
how it lays out a prompt with its vision placeholders."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...tokenizer import ChatTemplate

if TYPE_CHECKING:
    from ...tokenizer import ChatTokens, HFTokenizer
    from ..model import SpecialTokens
    from ..prompt import PromptMedia

# (tokenized chat, media, tokenizer, special tokens, DeepStack layers) -> the prompt's inputs
PromptAssembler = Callable[["ChatTokens", "Sequence[PromptMedia]", "HFTokenizer",
                            "SpecialTokens", int], Any]


@dataclass(frozen=True)
class ModelFamily:
    """One family, keyed by its GGUF ``general.architecture``.

    ``sizing``: the name of its preprocessing rules in :mod:`edgevlm.vision.sizing`;
    ``markers``: the texts of its vision tokens (``image_pad``, ``video_pad``,
    ``vision_start``, ``vision_end``) looked up in the tokenizer when the file does not store
    their ids; ``eos_texts``: texts that end an answer; ``chat_template``: messages to the
    prompt's segments (control tokens, text, one slot per media item); ``assemble_prompt``:
    the tokenized segments and the media's features to the prompt, each slot expanded into
    the family's vision placeholder."""

    architecture: str
    sizing: str
    markers: dict[str, str]
    eos_texts: tuple[str, ...]
    chat_template: ChatTemplate
    assemble_prompt: PromptAssembler
