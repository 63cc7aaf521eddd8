"""Text tokenizer of the model, and the rendered chat every family's template produces.

The tokenizer is a Hugging Face ``tokenizers`` tokenizer loaded from a ``tokenizer.json``
(the model file carries it once the engine loads one). Without a model, token budgets use
:class:`ByteCountTokenizer`, an upper bound (a byte-level BPE token is at least one byte).

A family's chat template (``render_segments`` of its module in :mod:`edgevlm.engine.families`)
gives the prompt as :data:`Segment` pieces: the template's own markers as :class:`Control`
pieces (the prompt holds their ids), media slots, and text. Every text piece, the message text
included, is tokenized with :meth:`HFTokenizer.encode_text`, which reads a special token's
string (``<|im_start|>``, ``<|image_pad|>``…) as plain text: a client cannot forge a turn or a
vision placeholder. This is transformers' ``split_special_tokens=True``; non-special added
tokens (``<think>``, ``<tool_call>``) stay single tokens there as here. Text without special
strings gets the ids it always had (the tokenizer splits at special tokens first too).
:func:`count_chat` and :func:`tokenize_chat` read those segments.
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from tokenizers import Tokenizer, models

from .wire.protocol import Message

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
VISION_START = "<|vision_start|>"
VISION_END = "<|vision_end|>"
IMAGE_PAD = "<|image_pad|>"
VIDEO_PAD = "<|video_pad|>"
ENDOFTEXT = "<|endoftext|>"

# The 26 tokens Qwen2/Qwen3 add after their 151,643 BPE tokens, in id order, with the
# "special" flag of the official tokenizer_config.json (tool/fim/think tokens are not special).
QWEN_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    (ENDOFTEXT, True), (IM_START, True), (IM_END, True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
    ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
    (VISION_START, True), (VISION_END, True), ("<|vision_pad|>", True),
    (IMAGE_PAD, True), (VIDEO_PAD, True), ("<tool_call>", False),
    ("</tool_call>", False), ("<|fim_prefix|>", False), ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False), ("<|fim_pad|>", False), ("<|repo_name|>", False),
    ("<|file_sep|>", False), ("<tool_response>", False), ("</tool_response>", False),
    ("<think>", False), ("</think>", False),
)
QWEN_SPECIAL_TOKENS = tuple(token for token, special in QWEN_ADDED_TOKENS if special)
IMAGE_PLACEHOLDER = VISION_START + IMAGE_PAD + VISION_END
VIDEO_PLACEHOLDER = VISION_START + VIDEO_PAD + VISION_END


class TextTokenizer(Protocol):
    """What the request side needs from a tokenizer."""

    name: str
    # the most bytes of (normalised) text one token covers; None: no length bound known
    max_token_bytes: int | None
    # every token covers at least one byte of the text (byte-level BPE, NFC or no normaliser)
    byte_level: bool
    # count_text costs about what measuring the text's bytes costs (no tokenizing)
    exact_is_cheap: bool

    def count(self, text: str) -> int: ...

    def count_text(self, text: str) -> int: ...


@runtime_checkable
class IdTokenizer(Protocol):
    """A tokenizer that gives ids (:class:`HFTokenizer`): what :func:`tokenize_chat` needs."""

    def encode_text(self, text: str) -> list[int]: ...

    def control_id(self, token: str) -> int: ...


def utf8_bounds(text: str) -> tuple[int, int]:
    """(smaller, larger) of the UTF-8 sizes of ``text`` and of its NFC form: the size a
    tokenizer sees lies between them whether it normalises with NFC or not at all. Linear C
    code (ASCII: constant time); ``text`` must be valid Unicode (protocol.UnicodeText)."""
    if text.isascii():
        return len(text), len(text)
    raw = len(text.encode("utf-8"))
    if unicodedata.is_normalized("NFC", text):
        return raw, raw
    nfc = len(unicodedata.normalize("NFC", text).encode("utf-8"))
    return min(raw, nfc), max(raw, nfc)


def _length_facts(tok: Tokenizer) -> tuple[int | None, bool]:
    """(max_token_bytes, byte_level) of a tokenizer; (None, False) unless it is a byte-level
    BPE with an NFC normaliser or none (the bounds of the module docstring need both)."""
    pre = tok.pre_tokenizer
    norm = tok.normalizer
    byte_level = (isinstance(tok.model, models.BPE) and pre is not None
                  and b'"type":"ByteLevel"' in pre.__getstate__()
                  and (norm is None or json.loads(norm.__getstate__()) == {"type": "NFC"}))
    if not byte_level:
        return None, False
    # a byte-level token is one character per byte (ByteLevel's alphabet); non-special added
    # tokens (<think>) are matched as their UTF-8 text; special ones never are in text that
    # encode_text tokenizes (the bound is for that text)
    # token by token: get_vocab() would build a 151k-entry dict whose ~23 MiB the allocator
    # keeps after it is freed (the board's RSS); this is also twice as fast
    longest = max((len(tok.id_to_token(i) or "")
                   for i in range(tok.get_vocab_size(with_added_tokens=False))), default=1)
    added = max((len(a.content.encode("utf-8"))
                 for a in tok.get_added_tokens_decoder().values() if not a.special), default=1)
    return max(longest, added, 1), True


class HFTokenizer:
    """A ``tokenizers`` tokenizer: :meth:`encode` parses special tokens in the text (template
    text), :meth:`encode_text` does not (message text).

    The tokenizer is owned: its ``encode_special_tokens`` flag is set once, here, and never
    toggled, so two threads may encode at once (the worker a prompt, the network thread a
    short text) without a lock; :meth:`encode` cuts the special tokens out itself.
    """

    exact_is_cheap = False

    @property
    def backend(self) -> Tokenizer:
        """The ``tokenizers.Tokenizer`` (for a grammar engine that reads its token table)."""
        return self._tok

    def __init__(self, tokenizer: Tokenizer, name: str = "tokenizer.json") -> None:
        self._tok = tokenizer
        self.name = name
        tokenizer.encode_special_tokens = True
        specials = {a.content: i for i, a in tokenizer.get_added_tokens_decoder().items()
                    if a.special}
        self._special_ids = specials
        # leftmost-longest, as the tokenizer's own added-token matcher
        self._special_re = re.compile("|".join(
            re.escape(t) for t in sorted(specials, key=len, reverse=True))) if specials else None
        self.max_token_bytes, self.byte_level = _length_facts(tokenizer)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> HFTokenizer:
        return cls(Tokenizer.from_file(os.fspath(path)), name=os.fspath(path))

    @classmethod
    def from_json(cls, text: str | bytes, name: str = "model file") -> HFTokenizer:
        try:
            if isinstance(text, bytes):   # UTF-8 as stored: no str decoded on the way
                return cls(Tokenizer.from_buffer(text), name=name)
            return cls(Tokenizer.from_str(text), name=name)
        except Exception as exc:  # tokenizers raises a bare Exception with serde's message
            # Parsed again only on failure (1 s for Qwen's 151k-token vocabulary): Python's
            # JSON error is clearer than serde's when the text is not JSON at all.
            json.loads(text)
            raise ValueError(f"{name}: not a tokenizer.json the tokenizers library can load: "
                             f"{exc}") from exc

    def encode(self, text: str) -> list[int]:
        """Ids of ``text``; a special token's string in it becomes that token."""
        if self._special_re is None:
            return self.encode_text(text)
        ids: list[int] = []
        start = 0
        for match in self._special_re.finditer(text):
            if match.start() > start:
                ids += self.encode_text(text[start:match.start()])
            ids.append(self._special_ids[match.group()])
            start = match.end()
        if start < len(text):
            ids += self.encode_text(text[start:])
        return ids

    def encode_text(self, text: str) -> list[int]:
        """Ids of untrusted ``text``: a special token's string is tokenized as ordinary bytes
        (decoding gives the same characters back), never as the special token. The GIL is
        released while it runs (``encode_batch``; ``encode`` holds it)."""
        ids: list[int] = self._tok.encode_batch([text], add_special_tokens=False)[0].ids
        return ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        text: str = self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)
        return text

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def count_text(self, text: str) -> int:
        return len(self.encode_text(text))

    def control_id(self, token: str) -> int:
        """The id of a control token the template writes; ``ValueError`` if there is none."""
        value = self.token_id(token)
        if value is None:
            raise ValueError(f"{self.name}: the tokenizer has no {token} token")
        return value

    def token_id(self, token: str) -> int | None:
        value: int | None = self._tok.token_to_id(token)
        return value


_SPECIAL_SPLIT = re.compile("|".join(re.escape(t) for t in QWEN_SPECIAL_TOKENS))


class ByteCountTokenizer:
    """Upper bound without a model: one token per UTF-8 byte, one per special token."""

    name = "byte-count upper bound (no model tokenizer)"
    max_token_bytes: int | None = 1
    byte_level = True
    exact_is_cheap = True

    def count(self, text: str) -> int:
        specials = len(_SPECIAL_SPLIT.findall(text))
        plain = _SPECIAL_SPLIT.sub("", text)
        return specials + len(plain.encode("utf-8"))

    def count_text(self, text: str) -> int:
        return len(text.encode("utf-8"))


@dataclass(frozen=True)
class Control:
    """A control token the chat template writes (``<|im_start|>``, ``<|im_end|>``): the prompt
    holds its id; it is never parsed out of text."""

    token: str


MediaSlot = int  # index of a media item (image or video) in prompt order
Segment = str | Control | MediaSlot
# A family's chat template (edgevlm.engine.families): messages, add_generation_prompt -> the
# prompt as segments: its control tokens, text pieces (one between two non-text segments,
# to encode with HFTokenizer.encode_text) and media slots (one per image or video, in order,
# each standing for the family's whole vision placeholder of that item).
ChatTemplate = Callable[[Sequence[Message], bool], list[Segment]]


def count_chat(segments: Sequence[Segment], tokenizer: TextTokenizer) -> int:
    """Tokens of the prompt the engine assembles from a chat template's ``segments``: one per
    control token, the text pieces as :meth:`HFTokenizer.encode_text` reads them, and 3 per
    media slot (start, pad, end; the caller counts the item's real tokens)."""
    total = 0
    for piece in segments:
        if isinstance(piece, Control):
            total += 1
        elif isinstance(piece, str):
            total += tokenizer.count_text(piece)
        else:
            total += 3
    return total


@dataclass(frozen=True)
class ChatTokens:
    """The chat template rendered and tokenized (:func:`tokenize_chat`): runs of ids (a
    control token by its id, a text piece as :meth:`HFTokenizer.encode_text` reads it) and
    the media slots between them, in order. Admission counts it and the engine lays the
    prompt out from it: the text is tokenized once per request."""

    pieces: tuple[tuple[int, ...] | MediaSlot, ...]

    @property
    def tokens(self) -> int:
        """Tokens as :func:`count_chat` counts them (3 per media slot)."""
        return sum(len(p) if isinstance(p, tuple) else 3 for p in self.pieces)


def tokenize_chat(segments: Sequence[Segment], tokenizer: IdTokenizer) -> ChatTokens:
    """A chat template's ``segments`` with every control token and text piece turned into
    ids."""
    pieces: list[tuple[int, ...] | MediaSlot] = []
    for piece in segments:
        if isinstance(piece, Control):
            pieces.append((tokenizer.control_id(piece.token),))
        elif isinstance(piece, str):
            pieces.append(tuple(tokenizer.encode_text(piece)))
        else:
            pieces.append(piece)
    return ChatTokens(tuple(pieces))
