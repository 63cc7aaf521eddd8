"""Tiny Qwen3-VL checkpoints for the converter tests.

* :func:`write_checkpoint`: a random-weight ``Qwen3VLForConditionalGeneration`` saved with
  ``save_pretrained`` plus tokenizer, processor and generation files (imports torch and
  transformers lazily: the callers are ``reference`` tests).
* :func:`write_numpy_checkpoint`: the same files from a config dict without torch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from tests.qwen_tokenizers import ADDED_TOKENS, tokenizer_config

QWEN_CHAT_TEMPLATE = (
    "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' }}"
    "{%- if message.content is string %}{{- message.content }}{%- else %}"
    "{%- for item in message.content %}{%- if item.type == 'image' %}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' }}{%- elif item.type == 'video' %}"
    "{{- '<|vision_start|><|video_pad|><|vision_end|>' }}{%- else %}{{- item.text }}"
    "{%- endif %}{%- endfor %}{%- endif %}{{- '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")


def write_tokenizer_files(out: Path, tok: Tokenizer, chat_template: str = "json") -> None:
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(tok), indent=2))
    if chat_template == "json":
        (out / "chat_template.json").write_text(json.dumps({"chat_template":
                                                            QWEN_CHAT_TEMPLATE}))
    elif chat_template == "jinja":
        (out / "chat_template.jinja").write_text(QWEN_CHAT_TEMPLATE)


def tiny_config(tok: Tokenizer, *, tied: bool = True, vocab_rows: int | None = None,
                text: dict[str, Any] | None = None, vision: dict[str, Any] | None = None) -> Any:
    """A Qwen3VLConfig: text 64 wide, 2 layers, 4/2 heads, head_dim 16, MRoPE [4, 2, 2];
    vision 64 wide, depth 3, 4 heads, DeepStack [0, 1], 16×16 position grid. Both MLPs are 80
    wide (not a multiple of 32: the down projections exercise the Q8_0/Q4_0 → F16 fallback).
    ``text`` / ``vision`` replace any of these keys (e.g. ``text={"hidden_size": 256}``; the
    vision ``out_hidden_size`` follows the text ``hidden_size``)."""
    from transformers import Qwen3VLConfig

    ids = {c: tok.token_to_id(c) for c, _ in ADDED_TOKENS}
    rows = vocab_rows or ((tok.get_vocab_size() + 63) // 64 * 64 + 64)
    text_config = dict(vocab_size=rows, hidden_size=64, intermediate_size=80,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=16, max_position_embeddings=4096, rms_norm_eps=1e-6,
                       rope_parameters={"rope_type": "default", "rope_theta": 5000000.0,
                                        "mrope_section": [4, 2, 2],
                                        "mrope_interleaved": True},
                       bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
                       tie_word_embeddings=tied) | (text or {})
    vision_config = dict(depth=3, hidden_size=64, intermediate_size=80, num_heads=4,
                         out_hidden_size=text_config["hidden_size"], num_position_embeddings=256,
                         deepstack_visual_indexes=[0, 1], patch_size=16, temporal_patch_size=2,
                         spatial_merge_size=2) | (vision or {})
    return Qwen3VLConfig(text_config=text_config, vision_config=vision_config,
                         tie_word_embeddings=tied, image_token_id=ids["<|image_pad|>"],
                         video_token_id=ids["<|video_pad|>"],
                         vision_start_token_id=ids["<|vision_start|>"],
                         vision_end_token_id=ids["<|vision_end|>"])


def to_legacy_layout(config_path: Path) -> None:
    """Rewrite a transformers-5 config.json into the layout of the official checkpoints
    (``rope_theta`` + ``rope_scaling``, vision ``model_type: qwen3_vl``)."""
    cfg = json.loads(config_path.read_text())
    tc = cfg["text_config"]
    rope = tc.pop("rope_parameters")
    tc["rope_theta"] = rope.pop("rope_theta")
    tc["rope_scaling"] = {**rope}
    tc["tie_word_embeddings"] = cfg["tie_word_embeddings"]
    vc = cfg["vision_config"]
    vc.pop("rope_parameters", None)
    vc["model_type"] = "qwen3_vl"
    cfg["transformers_version"] = "4.57.0.dev0"
    config_path.write_text(json.dumps(cfg, indent=2))


def write_aux_files(out: Path, tok: Tokenizer) -> None:
    """preprocessor, video preprocessor and generation configs like the official ones."""
    proc = {"size": {"longest_edge": 16777216, "shortest_edge": 65536}, "patch_size": 16,
            "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5, 0.5, 0.5],
            "image_std": [0.5, 0.5, 0.5], "processor_class": "Qwen3VLProcessor",
            "image_processor_type": "Qwen2VLImageProcessorFast"}
    video = {**proc, "size": {"longest_edge": 25165824, "shortest_edge": 4096}, "fps": 2,
             "min_frames": 4, "max_frames": 768,
             "video_processor_type": "Qwen3VLVideoProcessor"}
    gen = {"bos_token_id": tok.token_to_id("<|endoftext|>"),
           "pad_token_id": tok.token_to_id("<|endoftext|>"), "do_sample": True,
           "eos_token_id": [tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")],
           "top_k": 20, "top_p": 0.8, "temperature": 0.7, "repetition_penalty": 1.0,
           "transformers_version": "4.57.0.dev0"}
    (out / "preprocessor_config.json").write_text(json.dumps(proc, indent=2))
    (out / "video_preprocessor_config.json").write_text(json.dumps(video, indent=2))
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2))


def write_checkpoint(out: Path, tok: Tokenizer, *, tied: bool = True, dtype: str = "float32",
                     legacy: bool = True, max_shard_size: str | None = None,
                     chat_template: str = "json", seed: int = 0, **config_kw: Any) -> Path:
    """Save a random-weight Qwen3-VL checkpoint directory with every file the converter
    reads. Weights are N(0, 0.5²) (norm weights around 1), not transformers' tiny init, so
    quantisation tolerances are tested on values of a useful range."""
    import torch
    from transformers import Qwen3VLForConditionalGeneration

    config = tiny_config(tok, tied=tied, **config_kw)
    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight") or ".norm1." in name or ".norm2." in name:
                param.copy_(1.0 + 0.1 * torch.randn_like(param))
            else:
                param.copy_(0.5 * torch.randn_like(param))
    model = model.to(getattr(torch, dtype))
    out.mkdir(parents=True, exist_ok=True)
    kwargs: dict[str, Any] = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
    model.save_pretrained(out, **kwargs)
    if legacy:
        to_legacy_layout(out / "config.json")
    write_tokenizer_files(out, tok, chat_template)
    write_aux_files(out, tok)
    return out


# --------------------------------------------------------------------------- without torch

def legacy_config_dict(tok: Tokenizer, *, tied: bool = True, vocab_rows: int | None = None,
                       text: dict[str, Any] | None = None,
                       vision: dict[str, Any] | None = None) -> dict[str, Any]:
    """The config.json :func:`write_checkpoint` writes (legacy layout), built without
    transformers, with optional dimension overrides."""
    ids = {c: tok.token_to_id(c) for c, _ in ADDED_TOKENS}
    rows = vocab_rows or ((tok.get_vocab_size() + 63) // 64 * 64 + 64)
    text_config = {"attention_bias": False, "attention_dropout": 0.0,
                   "bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"],
                   "head_dim": 16, "hidden_act": "silu", "hidden_size": 64,
                   "initializer_range": 0.02, "intermediate_size": 80,
                   "max_position_embeddings": 4096, "model_type": "qwen3_vl_text",
                   "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
                   "rms_norm_eps": 1e-06, "rope_scaling": {"mrope_interleaved": True,
                                                           "mrope_section": [4, 2, 2],
                                                           "rope_type": "default"},
                   "rope_theta": 5000000.0, "tie_word_embeddings": tied, "use_cache": True,
                   "vocab_size": rows, **(text or {})}
    vision_config = {"deepstack_visual_indexes": [0, 1], "depth": 3,
                     "hidden_act": "gelu_pytorch_tanh", "hidden_size": 64, "in_channels": 3,
                     "initializer_range": 0.02, "intermediate_size": 80,
                     "model_type": "qwen3_vl", "num_heads": 4, "num_position_embeddings": 256,
                     "out_hidden_size": text_config["hidden_size"], "patch_size": 16,
                     "spatial_merge_size": 2, "temporal_patch_size": 2, **(vision or {})}
    return {"architectures": ["Qwen3VLForConditionalGeneration"],
            "image_token_id": ids["<|image_pad|>"], "model_type": "qwen3_vl",
            "text_config": text_config, "tie_word_embeddings": tied,
            "transformers_version": "4.57.0.dev0", "video_token_id": ids["<|video_pad|>"],
            "vision_config": vision_config, "vision_end_token_id": ids["<|vision_end|>"],
            "vision_start_token_id": ids["<|vision_start|>"]}


def write_safetensors(path: Path, tensors: dict[str, Any], dtypes: dict[str, str] | None = None,
                      ) -> None:
    """A safetensors file from numpy arrays, written tensor by tensor (``dtypes`` may label
    a tensor with another safetensors dtype, e.g. F64 or I64, for negative tests)."""
    import numpy as np

    names = {np.dtype("float32"): "F32", np.dtype("float16"): "F16",
             np.dtype("float64"): "F64", np.dtype("int64"): "I64"}
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, arr in tensors.items():
        label = (dtypes or {}).get(name, names[arr.dtype])
        header[name] = {"dtype": label, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + arr.nbytes]}
        offset += arr.nbytes
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as fh:
        fh.write(len(blob).to_bytes(8, "little") + blob)
        for arr in tensors.values():
            fh.write(np.ascontiguousarray(arr).tobytes())


def write_numpy_checkpoint(out: Path, tok: Tokenizer, config: dict[str, Any],
                           seed: int = 0) -> int:
    """A float32 checkpoint from a config dict without torch (shapes from edgevlm's own
    tensor tables: for memory and error tests; layout tests use :func:`write_checkpoint`).
    Returns the size of model.safetensors in bytes."""
    import numpy as np

    from edgevlm.convert.hf_config import load_model_config
    from edgevlm.convert.tensor_plan import expected_text, expected_vision

    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    cfg = load_model_config(out)
    rng = np.random.default_rng(seed)
    tensors = {src: rng.standard_normal(shape, dtype=np.float32)
               for _, src, shape in [*expected_text(cfg), *expected_vision(cfg)]}
    write_safetensors(out / "model.safetensors", tensors)
    write_tokenizer_files(out, tok)
    write_aux_files(out, tok)
    return (out / "model.safetensors").stat().st_size
