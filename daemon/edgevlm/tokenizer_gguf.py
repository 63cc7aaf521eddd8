"""A Hugging Face tokenizer rebuilt from llama.cpp's ``tokenizer.ggml.*`` metadata.

GGUF files written by llama.cpp's converter carry the byte-level BPE vocabulary as arrays
(``tokenizer.ggml.tokens`` / ``token_type`` / ``merges`` / ``pre``) instead of the
``tokenizer.json`` that ``edgevlm convert`` also stores. :func:`tokenizer_from_ggml` turns the
arrays back into a ``tokenizers.Tokenizer`` that encodes and decodes like the original HF one:

* NORMAL (and BYTE/UNKNOWN) tokens form the BPE vocabulary at their ids, merges in file order;
* CONTROL tokens become added special tokens, USER_DEFINED ones added non-special tokens
  (``<think>``, ``<tool_call>``), both matched verbatim before normalisation; UNUSED rows
  (``[PAD151669]``…, embedding rows past the tokenizer) are left out, as in the HF tokenizer;
* the pre-tokenizer named by ``pre`` ("qwen2": NFC normalisation, Qwen2's split regex, then
  byte-level mapping without prefix space), the byte-level decoder.

llama.cpp's token types are ``gguf.TokenType``: 1 normal, 2 unknown, 3 control,
4 user-defined, 5 unused, 6 byte.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tokenizers import Tokenizer

logger = logging.getLogger(__name__)

TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = (
    1, 2, 3, 4, 5, 6)

# The split regex of Qwen2's tokenizer.json (transformers tokenization_qwen2.PRETOKENIZE_REGEX);
# llama.cpp names this pre-tokenizer "qwen2" (Qwen2, Qwen2.5, Qwen3, Qwen3-VL).
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


@dataclass(frozen=True)
class PreTokenizerSpec:
    """How a llama.cpp ``tokenizer.ggml.pre`` name pre-tokenizes in HF terms."""

    pattern: str
    nfc: bool


PRE_TOKENIZERS: dict[str, PreTokenizerSpec] = {
    "qwen2": PreTokenizerSpec(pattern=QWEN2_PATTERN, nfc=True),
}


def _byte_level(**extra: Any) -> dict[str, Any]:
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
            "use_regex": False, **extra}


def tokenizer_json_from_ggml(tokens: Sequence[str], merges: Sequence[str],
                             token_types: Sequence[int], pre: str) -> dict[str, Any]:
    """The ``tokenizer.json`` document :func:`tokenizer_from_ggml` loads."""
    spec = PRE_TOKENIZERS.get(pre)
    if spec is None:
        raise ValueError(f"tokenizer.ggml.pre {pre!r} is not supported (known: "
                         f"{', '.join(sorted(PRE_TOKENIZERS))})")
    if len(tokens) != len(token_types):
        raise ValueError(f"{len(tokens)} tokens but {len(token_types)} token types")
    vocab: dict[str, int] = {}
    added: list[dict[str, Any]] = []
    for tid, (token, kind) in enumerate(zip(tokens, token_types, strict=True)):
        if kind in (TOKEN_CONTROL, TOKEN_USER_DEFINED):
            added.append({"id": tid, "content": token, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False,
                          "special": kind == TOKEN_CONTROL})
        elif kind != TOKEN_UNUSED:
            if token in vocab:
                logger.warning("token %r appears twice (ids %d and %d); keeping the first",
                               token, vocab[token], tid)
                continue
            vocab[token] = tid
    for merge in merges:
        left, sep, right = merge.partition(" ")
        if not sep or not left or not right or " " in right:
            raise ValueError(f"malformed merge {merge!r} (expected 'left right')")
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"} if spec.nfc else None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": spec.pattern}, "behavior": "Isolated",
             "invert": False},
            _byte_level()]},
        "post_processor": _byte_level(),
        "decoder": _byte_level(),
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": False,
                  "byte_fallback": False, "ignore_merges": False, "vocab": vocab,
                  "merges": list(merges)},
    }


def tokenizer_from_ggml(tokens: Sequence[str], merges: Sequence[str],
                        token_types: Sequence[int], pre: str) -> Tokenizer:
    """Rebuild the HF byte-level BPE tokenizer from llama.cpp-style vocabulary metadata.

    Raises ``ValueError`` for an unknown ``pre`` or inconsistent arrays."""
    doc = tokenizer_json_from_ggml(tokens, merges, token_types, pre)
    return Tokenizer.from_str(json.dumps(doc, ensure_ascii=False))
