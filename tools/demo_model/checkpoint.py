"""The demo model's shape, tokenizer and Hugging Face checkpoint directory.

Everything the tiny parity models use is reused from ``tools/make_tiny_models.py`` (the Qwen
added tokens, the legacy config layout, the chat template, the processor configs, the reload
checks); only the sizes and the tokenizer's training text are the demo model's own. The
processor is the one the golden fixtures use (``tools/make_golden_fixtures.py``): transformers'
``Qwen3VLProcessor`` on the PIL image processor, with the Qwen3-VL video processor attached.
"""

from __future__ import annotations

import copy
import json
import shutil
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from tokenizers import Tokenizer
from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

REPO = Path(__file__).resolve().parents[2]
for _path in (REPO, REPO / "tools"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import make_golden_fixtures  # noqa: E402
import make_tiny_models as tiny  # noqa: E402

from tools.demo_model.scenes import task_texts  # noqa: E402

MODEL_NAME = "qwen3vl-demo"

# Text 128 wide x 4 layers (GQA 2:1, head 32, SwiGLU 256), ViT 128 wide x 4 blocks with a
# DeepStack tap after each of the first three, patch 16, merge 2, a 16x16 learned position grid.
# Pixel bounds: a 480x320 scene becomes 128x192 (24 vision tokens), a 96x96 one 128x128 (16),
# nothing is over 32 tokens; a 4-frame clip of up to 224x128 keeps its size (2 groups of up
# to 28 tokens).
SPEC = tiny.TinySpec(
    name=MODEL_NAME, seed=4004, hidden_size=128, num_layers=4, num_heads=4, num_kv_heads=2,
    head_dim=32, intermediate_size=256, mrope_section=(6, 5, 5), tied=True,
    bpe_vocab_size=400, vocab_padding=22,
    vision_hidden_size=128, vision_depth=4, vision_heads=4, vision_intermediate_size=512,
    num_position_embeddings=256, deepstack_visual_indexes=(0, 1, 2),
    image_min_pixels=16_384, image_max_pixels=32_768,
    video_min_pixels=16_384, video_max_pixels=131_072)


def train_tokenizer() -> Tokenizer:
    """Byte-level BPE with Qwen2's pipeline and added tokens, trained on the task text.

    ``make_tiny_models.train_tokenizer`` reads its module-level corpus; the demo model swaps in
    the prompts and answers of ``scenes.py`` for the duration of the call.
    """
    corpus = "\n".join(task_texts()) + "\n"
    with mock.patch.object(tiny, "CORPUS", corpus):
        return tiny.train_tokenizer(SPEC.bpe_vocab_size)


def new_model(tok: Tokenizer) -> tuple[Qwen3VLForConditionalGeneration, dict[str, Any]]:
    """A freshly initialised model (transformers' own initialiser, seeded) and its legacy
    config.json content."""
    SPEC.check()
    ids = tiny.token_ids(tok)
    vocab_size = tok.get_vocab_size() + SPEC.vocab_padding
    legacy = tiny.legacy_config(SPEC, ids, vocab_size)
    torch.manual_seed(SPEC.seed)
    config = Qwen3VLConfig(**copy.deepcopy(legacy))
    config._attn_implementation = "sdpa"
    model = Qwen3VLForConditionalGeneration(config).to(torch.float32)
    tiny.check_config_conversion(model.config, SPEC)
    return model, legacy


def load_model(hf_dir: Path) -> tuple[Qwen3VLForConditionalGeneration, dict[str, Any]]:
    """A saved checkpoint (``save_checkpoint``'s layout) and its legacy config.json content,
    to train further."""
    legacy = json.loads((hf_dir / "config.json").read_text())
    for key in ("dtype", "transformers_version"):
        legacy.pop(key, None)
    model = Qwen3VLForConditionalGeneration.from_pretrained(
        hf_dir, dtype=torch.float32, attn_implementation="sdpa")
    tiny.check_config_conversion(model.config, SPEC)
    return model, legacy


def write_processor_files(out_dir: Path, tok: Tokenizer) -> None:
    """Tokenizer, chat template, generation and processor configs (no weights)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    ids = tiny.token_ids(tok)
    tiny.generation_config(ids).save_pretrained(out_dir)
    tok.save(str(out_dir / "tokenizer.json"))
    _write_json(out_dir / "tokenizer_config.json", tiny.tokenizer_config(tok))
    _write_json(out_dir / "chat_template.json", {"chat_template": tiny.CHAT_TEMPLATE})
    _write_json(out_dir / "preprocessor_config.json", tiny.preprocessor_config(SPEC))
    _write_json(out_dir / "video_preprocessor_config.json",
                tiny.video_preprocessor_config(SPEC))


def save_checkpoint(model: Qwen3VLForConditionalGeneration, legacy: dict[str, Any],
                    tok: Tokenizer, out_dir: Path) -> None:
    """A Hugging Face checkpoint directory laid out like the official ones (float32)."""
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    _write_json(out_dir / "config.json", {**legacy, "dtype": "float32",
                                          "transformers_version": "4.57.0.dev0"})
    write_processor_files(out_dir, tok)
    tiny.verify_reload(model, out_dir)


def load_processor(model_dir: Path) -> Any:
    """transformers' Qwen3VLProcessor with the PIL image path (spec qwen3vl.md §3.2, §14)."""
    return make_golden_fixtures.load_processor(model_dir)


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
