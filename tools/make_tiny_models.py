#!/usr/bin/env python3
"""Build the tiny random-weight Qwen3-VL checkpoints the parity tests run on.

Each model is a real ``Qwen3VLForConditionalGeneration`` built from an in-code config written in
the legacy layout of the official checkpoints (``text_config.rope_theta`` +
``text_config.rope_scaling``, ``vision_config.model_type: "qwen3_vl"``; spec ``qwen3vl.md`` §1),
with weights drawn from a fixed seed, and saved the way a Hugging Face checkpoint directory looks:

  config.json                      the legacy-layout config (exactly what the official files use)
  model.safetensors                float32, written by ``save_pretrained``
  generation_config.json           the official sampling defaults, eos = [<|im_end|>, <|endoftext|>]
  tokenizer.json                   a byte-level BPE trained here on a fixed corpus, Qwen2's
                                   normaliser/pre-tokeniser, the 26 Qwen added tokens at the end
  tokenizer_config.json            ``Qwen2Tokenizer``, like the official file
  chat_template.json               a Jinja template with the Qwen3-VL Instruct output (no default
                                   system prompt; spec §5)
  preprocessor_config.json         Qwen3-VL image settings with small pixel bounds
  video_preprocessor_config.json   Qwen3-VL video settings with small pixel bounds

The three models differ in every dimension a C implementation could hard-code: GQA ratio, head
size and MRoPE sections, DeepStack taps, tied/untied output, ViT width/depth/heads, learned
position grid, vocabulary and special-token ids, pixel bounds (each bound branch of
``smart_resize`` is hit by some model on the golden images).

Weights: every tensor is redrawn from one ``torch.Generator`` per model (not transformers'
initialiser, which may change between versions): matrices N(0, 1/fan_in), norm weights
1 + N(0, 0.25²), biases N(0, 0.1²), token embeddings N(0, 0.1²) (small, so that a tied model
does not just repeat its last token), learned ViT positions N(0, 0.5²), and zero vocabulary rows
past the tokenizer (like the unused rows of the official files), every value rounded to
bfloat16 (the official checkpoints are bf16; stored here as float32). With transformers' default
(std 0.02) the ViT attention would be almost uniform and a wrong rotary or position table would
barely move the logits; with these, every part of the network visibly matters.

Usage: ``python tools/make_tiny_models.py [--out tests/fixtures/models] [--only NAME]``
(about 4 s of work after transformers is imported). ``preprocessor_config.json`` names the
"Fast" image processor like the official file; the golden script pins the PIL one.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import math
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tokenizers import (
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    normalizers,
    pre_tokenizers,
    processors,
)
from tokenizers import models as tokenizer_models
from tokenizers import trainers as bpe_trainers
from transformers import GenerationConfig, Qwen3VLConfig, Qwen3VLForConditionalGeneration

from edgevlm.tokenizer import QWEN_ADDED_TOKENS
from edgevlm.tokenizer_gguf import QWEN2_PATTERN  # Qwen2's pre-tokenisation regex

logger = logging.getLogger("make_tiny_models")

DEFAULT_OUT = Path("tests/fixtures/models")

# --------------------------------------------------------------------------- tokenizer

ADDED_TOKENS = QWEN_ADDED_TOKENS  # name, special flag; edgevlm.tokenizer owns the list

# A fixed training corpus: the words of the golden prompts, camera/home-automation language,
# digits and the timestamp text of video prompts, so prompts tokenise into a mix of merged
# tokens and bytes.
CORPUS = """\
Describe this image. What is in the picture? Compare the two pictures and say what changed.
What happens in this video? Is the garage door open or closed? Answer in one short sentence.
You are a careful camera assistant. Count the people, the cars and the animals you can see.
The quick brown fox jumps over the lazy dog near the front gate while the porch light is on.
A delivery van stopped at the driveway; a person carried a parcel to the door and left at 14:32.
The backyard camera shows wet grass, a bicycle leaning on the fence, and two cats on the wall.
At night the infrared image is grey: shapes are visible, colours are not. Motion was detected.
Temperature 21.5 degrees, humidity 48 percent, wind 3 metres per second from the north-west.
<0.2 seconds> <1.2 seconds> <2.0 seconds> <3.5 seconds> <4.8 seconds> <10.0 seconds>
The kitchen window, the living room sofa, the hallway stairs, the bedroom lamp and the office desk.
Snow covers the street; a neighbour shovels the path and a dog runs after a red ball.
License plate reading is not allowed; describe the vehicle: colour, type, direction of travel.
The doorbell rang twice. Nobody answered. The visitor waited, looked around, then walked away.
Sunrise at 06:12, sunset at 19:48. The garden sprinkler runs for fifteen minutes every morning.
An empty parking lot, one streetlight flickering, leaves moving in the wind, no vehicles present.
The baby monitor shows a sleeping child; the room is dark and quiet; the nightlight is green.
Is there smoke, fire or water on the floor? Check the basement, the attic and the laundry room.
JSON: {"person": 2, "car": 1, "dog": 0, "package": true, "confidence": 0.87, "zone": "porch"}
Frigate event: label person, score 0.91, camera front_door, zone driveway, start 1717171717.
Home Assistant automation: when motion is detected after sunset, turn on the hallway lights.
ChatML roles: system, user, assistant; the user asks, the assistant answers, the system sets rules.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 16 24 32 48 64 96 128 150 200 256 512 1024 2048 4096.
Weather words: sunny, cloudy, rainy, foggy, stormy, windy, freezing, warm, humid, clear sky.
Colours: red, orange, yellow, green, blue, purple, pink, brown, black, white, grey, silver.
Animals: cat, dog, bird, fox, deer, hedgehog, rabbit, squirrel, raccoon, horse, cow, sheep.
Objects: chair, table, bottle, cup, phone, laptop, umbrella, backpack, suitcase, bench, pot.
Actions: walking, running, standing, sitting, climbing, carrying, opening, closing, waving.
Places: street, garden, garage, kitchen, balcony, corridor, entrance, terrace, shed, barn.
"""


def train_tokenizer(bpe_vocab_size: int) -> Tokenizer:
    """A byte-level BPE with Qwen2's pipeline; the added tokens follow the BPE vocabulary."""
    tok = Tokenizer(tokenizer_models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = bpe_trainers.BpeTrainer(
        vocab_size=bpe_vocab_size, min_frequency=1, show_progress=False, special_tokens=[],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS.splitlines(), trainer)
    if tok.get_vocab_size() != bpe_vocab_size:
        raise RuntimeError(f"the corpus supports only {tok.get_vocab_size()} BPE tokens, "
                           f"{bpe_vocab_size} wanted; lower bpe_vocab_size")
    for content, special in ADDED_TOKENS:
        token = AddedToken(content, special=special, normalized=False)
        if special:
            tok.add_special_tokens([token])
        else:
            tok.add_tokens([token])
    return tok


def token_ids(tok: Tokenizer) -> dict[str, int]:
    """The id of every added token."""
    ids: dict[str, int] = {}
    for content, _ in ADDED_TOKENS:
        value = tok.token_to_id(content)
        if value is None:
            raise RuntimeError(f"{content} is missing from the tokenizer")
        ids[content] = value
    return ids


def tokenizer_config(tok: Tokenizer) -> dict[str, Any]:
    """tokenizer_config.json in the layout of the official Qwen3-VL file."""
    ids = token_ids(tok)
    decoder = {str(ids[content]): {"content": content, "lstrip": False, "normalized": False,
                                   "rstrip": False, "single_word": False, "special": special}
               for content, special in ADDED_TOKENS}
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": [c for c, special in ADDED_TOKENS[1:] if special],
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 262144,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


# --------------------------------------------------------------------------- chat template

# Renders what the Qwen3-VL Instruct template renders for system/user/assistant messages with
# text, image and video items (spec §5): ChatML, no default system prompt, one placeholder per
# image/video (optionally "Picture k: "/"Video k: " with add_vision_id), the generation prompt
# "<|im_start|>assistant\n". Tools are not supported by this template.
CHAT_TEMPLATE = """\
{%- set image_count = namespace(value=0) %}
{%- set video_count = namespace(value=0) %}
{%- for message in messages %}
    {{- '<|im_start|>' + message.role + '\\n' }}
    {%- if message.content is string %}
        {{- message.content }}
    {%- else %}
        {%- set vision = message.role == 'user' %}
        {%- for item in message.content %}
            {%- if vision and (item.type == 'image' or 'image' in item or 'image_url' in item) %}
                {%- set image_count.value = image_count.value + 1 %}
                {%- if add_vision_id %}
                    {{- 'Picture ' ~ image_count.value ~ ': ' }}
                {%- endif %}
                {{- '<|vision_start|><|image_pad|><|vision_end|>' }}
            {%- elif vision and (item.type == 'video' or 'video' in item) %}
                {%- set video_count.value = video_count.value + 1 %}
                {%- if add_vision_id %}
                    {{- 'Video ' ~ video_count.value ~ ': ' }}
                {%- endif %}
                {{- '<|vision_start|><|video_pad|><|vision_end|>' }}
            {%- elif 'text' in item %}
                {{- item.text }}
            {%- endif %}
        {%- endfor %}
    {%- endif %}
    {{- '<|im_end|>\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

# --------------------------------------------------------------------------- model specs


@dataclass(frozen=True)
class TinySpec:
    """One tiny checkpoint: the dimensions that vary between the models."""

    name: str
    seed: int
    # text
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    mrope_section: tuple[int, int, int]
    tied: bool
    bpe_vocab_size: int  # BPE tokens; the tokenizer has 26 added tokens on top
    vocab_padding: int  # config vocab_size = tokenizer size + this (unused embedding rows)
    # vision
    vision_hidden_size: int
    vision_depth: int
    vision_heads: int
    vision_intermediate_size: int
    num_position_embeddings: int
    deepstack_visual_indexes: tuple[int, ...]
    # processors (pixels)
    image_min_pixels: int
    image_max_pixels: int
    video_min_pixels: int
    video_max_pixels: int

    def check(self) -> None:
        side = math.isqrt(self.num_position_embeddings)
        problems = [
            (self.num_heads % self.num_kv_heads, "num_heads must be a multiple of num_kv_heads"),
            (sum(self.mrope_section) * 2 != self.head_dim, "sum(mrope_section) must be head_dim/2"),
            (side * side != self.num_position_embeddings, "num_position_embeddings not a square"),
            (self.vision_hidden_size % (4 * self.vision_heads),
             "vision head_dim must be a multiple of 4 (2-D rotary)"),
            (len(self.deepstack_visual_indexes) > self.num_layers,
             "more DeepStack taps than decoder layers"),
            (max(self.deepstack_visual_indexes) >= self.vision_depth, "tap past the last block"),
        ]
        bad = [message for failed, message in problems if failed]
        if bad:
            raise ValueError(f"{self.name}: " + "; ".join(bad))


SPECS: tuple[TinySpec, ...] = (
    # 2B/4B-like: tied output, GQA 2:1, head_dim 16, the real 48x48 position grid, 3 taps.
    TinySpec(name="qwen3vl-tiny-a", seed=1001, hidden_size=64, num_layers=4, num_heads=4,
             num_kv_heads=2, head_dim=16, intermediate_size=128, mrope_section=(4, 2, 2),
             tied=True, bpe_vocab_size=900, vocab_padding=98,
             vision_hidden_size=32, vision_depth=5, vision_heads=2, vision_intermediate_size=64,
             num_position_embeddings=2304, deepstack_visual_indexes=(0, 2, 3),
             image_min_pixels=4096, image_max_pixels=65536,
             video_min_pixels=4096, video_max_pixels=65536),
    # 8B-like: untied lm_head, GQA 6:1 (q width 192 > hidden 64), head_dim 32, vocab exactly
    # the tokenizer size, ViT intermediate not a multiple of 16, a small max_pixels.
    TinySpec(name="qwen3vl-tiny-b", seed=2002, hidden_size=64, num_layers=3, num_heads=6,
             num_kv_heads=1, head_dim=32, intermediate_size=96, mrope_section=(6, 5, 5),
             tied=False, bpe_vocab_size=640, vocab_padding=0,
             vision_hidden_size=48, vision_depth=3, vision_heads=3, vision_intermediate_size=72,
             num_position_embeddings=1024, deepstack_visual_indexes=(1, 2),
             image_min_pixels=1024, image_max_pixels=12288,
             video_min_pixels=1024, video_max_pixels=32768),
    # MHA (4 q = 4 kv heads), head_dim 32 with an uneven section, one tap, ViT head_dim 32.
    TinySpec(name="qwen3vl-tiny-c", seed=3003, hidden_size=48, num_layers=2, num_heads=4,
             num_kv_heads=4, head_dim=32, intermediate_size=128, mrope_section=(8, 4, 4),
             tied=True, bpe_vocab_size=970, vocab_padding=156,
             vision_hidden_size=64, vision_depth=2, vision_heads=2, vision_intermediate_size=128,
             num_position_embeddings=576, deepstack_visual_indexes=(0,),
             image_min_pixels=2048, image_max_pixels=200000,
             video_min_pixels=2048, video_max_pixels=200000),
)

PATCH_SIZE = 16
TEMPORAL_PATCH_SIZE = 2
MERGE_SIZE = 2
IMAGE_MEAN = [0.5, 0.5, 0.5]
IMAGE_STD = [0.5, 0.5, 0.5]


def legacy_config(spec: TinySpec, ids: dict[str, int], vocab_size: int) -> dict[str, Any]:
    """config.json in the layout of the official checkpoints (transformers 4.57 era)."""
    return {
        "architectures": ["Qwen3VLForConditionalGeneration"],
        "image_token_id": ids["<|image_pad|>"],
        "model_type": "qwen3_vl",
        "text_config": {
            "attention_bias": False,
            "attention_dropout": 0.0,
            "bos_token_id": ids["<|endoftext|>"],
            "dtype": "float32",
            "eos_token_id": ids["<|im_end|>"],
            "head_dim": spec.head_dim,
            "hidden_act": "silu",
            "hidden_size": spec.hidden_size,
            "initializer_range": 0.02,
            "intermediate_size": spec.intermediate_size,
            "max_position_embeddings": 262144,
            "model_type": "qwen3_vl_text",
            "num_attention_heads": spec.num_heads,
            "num_hidden_layers": spec.num_layers,
            "num_key_value_heads": spec.num_kv_heads,
            "rms_norm_eps": 1e-06,
            "rope_scaling": {"mrope_interleaved": True, "mrope_section": list(spec.mrope_section),
                             "rope_type": "default"},
            "rope_theta": 5000000,
            "tie_word_embeddings": spec.tied,
            "use_cache": True,
            "vocab_size": vocab_size,
        },
        "tie_word_embeddings": spec.tied,
        "video_token_id": ids["<|video_pad|>"],
        "vision_config": {
            "deepstack_visual_indexes": list(spec.deepstack_visual_indexes),
            "depth": spec.vision_depth,
            "hidden_act": "gelu_pytorch_tanh",
            "hidden_size": spec.vision_hidden_size,
            "in_channels": 3,
            "initializer_range": 0.02,
            "intermediate_size": spec.vision_intermediate_size,
            "model_type": "qwen3_vl",
            "num_heads": spec.vision_heads,
            "num_position_embeddings": spec.num_position_embeddings,
            "out_hidden_size": spec.hidden_size,
            "patch_size": PATCH_SIZE,
            "spatial_merge_size": MERGE_SIZE,
            "temporal_patch_size": TEMPORAL_PATCH_SIZE,
        },
        "vision_end_token_id": ids["<|vision_end|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
    }


def preprocessor_config(spec: TinySpec) -> dict[str, Any]:
    return {"size": {"longest_edge": spec.image_max_pixels, "shortest_edge": spec.image_min_pixels},
            "patch_size": PATCH_SIZE, "temporal_patch_size": TEMPORAL_PATCH_SIZE,
            "merge_size": MERGE_SIZE, "image_mean": IMAGE_MEAN, "image_std": IMAGE_STD,
            "processor_class": "Qwen3VLProcessor",
            "image_processor_type": "Qwen2VLImageProcessorFast"}


def video_preprocessor_config(spec: TinySpec) -> dict[str, Any]:
    return {"size": {"longest_edge": spec.video_max_pixels, "shortest_edge": spec.video_min_pixels},
            "patch_size": PATCH_SIZE, "temporal_patch_size": TEMPORAL_PATCH_SIZE,
            "merge_size": MERGE_SIZE, "image_mean": IMAGE_MEAN, "image_std": IMAGE_STD,
            "processor_class": "Qwen3VLProcessor",
            "video_processor_type": "Qwen3VLVideoProcessor"}


def generation_config(ids: dict[str, int]) -> GenerationConfig:
    """The official sampling defaults (spec §9) with this tokenizer's ids."""
    return GenerationConfig(
        bos_token_id=ids["<|endoftext|>"], pad_token_id=ids["<|endoftext|>"],
        eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]], do_sample=True,
        temperature=0.7, top_p=0.8, top_k=20, repetition_penalty=1.0)


# --------------------------------------------------------------------------- weights

def randomize_weights(model: torch.nn.Module, seed: int, used_vocab: int) -> None:
    """Redraw every parameter from one generator, in sorted-name order (see module docstring).

    Vocabulary rows at and past ``used_vocab`` (ids the tokenizer never produces) are zero, so
    greedy decoding never picks an id the tokenizer cannot decode.
    """
    gen = torch.Generator().manual_seed(seed)
    params = dict(model.named_parameters())  # tied weights appear once
    with torch.no_grad():
        for name in sorted(params):
            p = params[name]
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if name.endswith(("embed_tokens.weight", "lm_head.weight")):
                value = 0.1 * noise if "embed" in name else noise / math.sqrt(p.shape[1])
                value[used_vocab:] = 0.0
            elif name.endswith("pos_embed.weight"):
                value = 0.5 * noise
            elif p.dim() == 1 and name.endswith("bias"):
                value = 0.1 * noise
            elif p.dim() == 1:  # LayerNorm / RMSNorm weights
                value = 1.0 + 0.25 * noise
            else:
                fan_in = math.prod(p.shape[1:])
                value = noise / math.sqrt(fan_in)
            # bfloat16 values stored as float32, as in the official checkpoints (published in
            # bf16): a BF16 conversion is then lossless, as it is for the real models
            p.copy_(value.to(torch.bfloat16).to(torch.float32))


# --------------------------------------------------------------------------- build


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def build_model(spec: TinySpec, out_dir: Path) -> dict[str, Any]:
    """Write one checkpoint directory; returns a summary for the log."""
    spec.check()
    tok = train_tokenizer(spec.bpe_vocab_size)
    ids = token_ids(tok)
    vocab_size = tok.get_vocab_size() + spec.vocab_padding
    legacy = legacy_config(spec, ids, vocab_size)

    torch.manual_seed(spec.seed)
    config = Qwen3VLConfig(**copy.deepcopy(legacy))
    model = Qwen3VLForConditionalGeneration(config).to(torch.float32).eval()
    randomize_weights(model, spec.seed, tok.get_vocab_size())
    check_config_conversion(model.config, spec)

    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    # save_pretrained writes the converted 5.x layout; the official files use the legacy one.
    _write_json(out_dir / "config.json", {**legacy, "dtype": "float32",
                                          "transformers_version": "4.57.0.dev0"})
    generation_config(ids).save_pretrained(out_dir)
    tok.save(str(out_dir / "tokenizer.json"))
    _write_json(out_dir / "tokenizer_config.json", tokenizer_config(tok))
    _write_json(out_dir / "chat_template.json", {"chat_template": CHAT_TEMPLATE})
    _write_json(out_dir / "preprocessor_config.json", preprocessor_config(spec))
    _write_json(out_dir / "video_preprocessor_config.json", video_preprocessor_config(spec))

    verify_reload(model, out_dir)
    n_params = sum(p.numel() for p in model.parameters())
    size = sum(f.stat().st_size for f in out_dir.iterdir())
    return {"name": spec.name, "params": n_params, "bytes": size,
            "tokenizer_size": tok.get_vocab_size(), "vocab_size": vocab_size}


def check_config_conversion(config: Qwen3VLConfig, spec: TinySpec) -> None:
    """The legacy layout must convert to what transformers 5 uses (spec §1 notes)."""
    rope = config.text_config.rope_parameters
    want = {"rope_type": "default", "mrope_section": list(spec.mrope_section),
            "mrope_interleaved": True, "rope_theta": 5000000}
    got = {k: rope.get(k) for k in want}
    if got != want or config.vision_config.model_type != "qwen3_vl_vision":
        raise RuntimeError(f"{spec.name}: legacy config converted to {rope!r}, "
                           f"vision model_type {config.vision_config.model_type!r}")
    if list(config.vision_config.deepstack_visual_indexes) != list(spec.deepstack_visual_indexes):
        raise RuntimeError(f"{spec.name}: deepstack_visual_indexes not taken from the config")


_NOT_COMPARED = frozenset({"transformers_version", "dtype", "_name_or_path", "architectures"})


def _comparable(config: dict[str, Any]) -> dict[str, Any]:
    """A config dict without the keys that legitimately differ after a save/load round trip."""
    return {k: _comparable(v) if isinstance(v, dict) else v
            for k, v in config.items() if k not in _NOT_COMPARED}


def verify_reload(model: Qwen3VLForConditionalGeneration, out_dir: Path) -> None:
    """Reload the directory the way the golden script does and compare weights and config."""
    again = Qwen3VLForConditionalGeneration.from_pretrained(out_dir, dtype=torch.float32)
    want, got = model.state_dict(), again.state_dict()
    if want.keys() != got.keys() or any(not torch.equal(want[k], got[k]) for k in want):
        raise RuntimeError(f"{out_dir}: reloaded weights differ from the built ones")
    if _comparable(model.config.to_dict()) != _comparable(again.config.to_dict()):
        raise RuntimeError(f"{out_dir}: the legacy config.json does not reload to the same config")
    check_tokenizer_files(out_dir)


SAMPLE_PROMPT = ("<|im_start|>system\nYou are a careful camera assistant.<|im_end|>\n"
                 "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>"
                 "Describe this image. <1.2 seconds><think>\n</think><|im_end|>\n"
                 "<|im_start|>assistant\n")


def check_tokenizer_files(out_dir: Path) -> None:
    """transformers reads the tokenizer and chat template like the raw ``tokenizers`` file.

    ``AutoProcessor.from_pretrained`` itself needs torchvision for Qwen3-VL in transformers
    5.24 (its video processor); it is exercised only when torchvision is installed.
    """
    from transformers import AutoTokenizer
    from transformers.utils import is_torchvision_available

    raw = Tokenizer.from_file(str(out_dir / "tokenizer.json"))
    hf = AutoTokenizer.from_pretrained(out_dir)
    if hf(SAMPLE_PROMPT)["input_ids"] != raw.encode(SAMPLE_PROMPT).ids:
        raise RuntimeError(f"{out_dir}: transformers and tokenizers tokenise differently")
    template = json.loads((out_dir / "chat_template.json").read_text())["chat_template"]
    messages = [{"role": "system", "content": "You are a careful camera assistant."},
                {"role": "user", "content": [{"type": "image"},
                                             {"type": "text", "text": "Describe this image. "},
                                             {"type": "text", "text": "<1.2 seconds>"},
                                             {"type": "text", "text": "<think>\n</think>"}]}]
    text = hf.apply_chat_template(messages, chat_template=template, tokenize=False,
                                  add_generation_prompt=True)
    if text != SAMPLE_PROMPT:
        raise RuntimeError(f"{out_dir}: the chat template renders {text!r}")
    if is_torchvision_available():
        from transformers import AutoProcessor

        AutoProcessor.from_pretrained(out_dir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help="directory receiving one sub-directory per model")
    parser.add_argument("--only", action="append", default=None,
                        help="build only this model (repeatable)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    unknown = set(args.only or ()) - {spec.name for spec in SPECS}
    if unknown:
        parser.error(f"unknown model(s) {sorted(unknown)}; known: {[s.name for s in SPECS]}")
    started = time.perf_counter()
    for spec in SPECS:
        if args.only and spec.name not in args.only:
            continue
        summary = build_model(spec, args.out / spec.name)
        logger.info("%(name)s: %(params)d parameters, %(bytes)d bytes on disk, tokenizer "
                    "%(tokenizer_size)d tokens, config vocab %(vocab_size)d", summary)
    logger.info("done in %.1f s", time.perf_counter() - started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
