"""edgevlm convert writes the GGUF pair exactly as spec gguf-qwen3vl.md lays it out.

Checkpoints are real ``Qwen3VLForConditionalGeneration`` models (random weights) saved with
``save_pretrained``; the files are read back with ``gguf.GGUFReader`` and the source with the
``safetensors`` package, independently of the converter's own reader and tables.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType
from gguf.quants import dequantize, quantize
from tokenizers import Tokenizer

from edgevlm.convert import ConvertResult, convert_checkpoint
from edgevlm.tokenizer_gguf import tokenizer_from_ggml
from tests.qwen3vl_checkpoints import QWEN_CHAT_TEMPLATE, write_checkpoint
from tests.qwen_tokenizers import ggml_arrays, train_tiny_tokenizer

pytestmark = pytest.mark.reference

Q = GGMLQuantizationType
TYPES = {"f32": Q.F32, "f16": Q.F16, "bf16": Q.BF16, "q8_0": Q.Q8_0, "q4_0": Q.Q4_0}
FILE_TYPE = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 7, "bf16": 32}
Converted = tuple[ConvertResult, GGUFReader, GGUFReader]


@pytest.fixture(scope="session")
def tiny_tok() -> Tokenizer:
    return train_tiny_tokenizer()


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory: pytest.TempPathFactory, tiny_tok: Tokenizer) -> dict[str, Path]:
    """tied (legacy config layout, like the official files), the same weights sharded, untied
    (transformers-5 layout, chat_template.jinja), tied in bfloat16, tied with another seed."""
    root = tmp_path_factory.mktemp("ckpt")
    return {
        "tied": write_checkpoint(root / "tied", tiny_tok),
        "sharded": write_checkpoint(root / "sharded", tiny_tok, max_shard_size="100KB"),
        "untied": write_checkpoint(root / "untied", tiny_tok, tied=False, legacy=False,
                                   chat_template="jinja"),
        "bf16": write_checkpoint(root / "bf16", tiny_tok, dtype="bfloat16"),
        "seed1": write_checkpoint(root / "seed1", tiny_tok, seed=1),
    }


@pytest.fixture(scope="session")
def convert(tmp_path_factory: pytest.TempPathFactory,
            checkpoints: dict[str, Path]) -> Callable[..., Converted]:
    cache: dict[tuple[str, str, str | None], Converted] = {}

    def run(variant: str, text_type: str = "f32", vision_type: str | None = None) -> Converted:
        key = (variant, text_type, vision_type)
        if key not in cache:
            out = tmp_path_factory.mktemp(f"gguf-{variant}-{text_type}")
            result = convert_checkpoint(checkpoints[variant], out, text_type, vision_type)
            cache[key] = (result, GGUFReader(result.text_path), GGUFReader(result.mmproj_path))
        return cache[key]

    return run


def source_tensors(ckpt: Path) -> dict[str, np.ndarray]:
    """Every checkpoint tensor as float32, read with the safetensors package (via torch for
    bfloat16)."""
    from safetensors.torch import load_file

    out: dict[str, np.ndarray] = {}
    for path in sorted(ckpt.glob("*.safetensors")):
        out.update({k: v.float().numpy() for k, v in load_file(path).items()})
    return out


def spec_layout(cfg: dict[str, Any]) -> dict[str, tuple[list[int], str, str]]:
    """GGUF name → (GGUF shape, innermost first; kind; HF source) per the spec's tables."""
    t, v = cfg["text_config"], cfg["vision_config"]
    h, hd, ff, vocab = t["hidden_size"], t["head_dim"], t["intermediate_size"], t["vocab_size"]
    q, kv = t["num_attention_heads"] * hd, t["num_key_value_heads"] * hd
    lm, vis = "model.language_model.", "model.visual."
    out = {"token_embd.weight": ([h, vocab], "matrix", lm + "embed_tokens.weight"),
           "output_norm.weight": ([h], "f32", lm + "norm.weight")}
    if not cfg["tie_word_embeddings"]:
        out["output.weight"] = ([h, vocab], "matrix", "lm_head.weight")
    layer = {"attn_norm": ([h], "f32", "input_layernorm"),
             "attn_q": ([h, q], "matrix", "self_attn.q_proj"),
             "attn_k": ([h, kv], "matrix", "self_attn.k_proj"),
             "attn_v": ([h, kv], "matrix", "self_attn.v_proj"),
             "attn_output": ([q, h], "matrix", "self_attn.o_proj"),
             "attn_q_norm": ([hd], "f32", "self_attn.q_norm"),
             "attn_k_norm": ([hd], "f32", "self_attn.k_norm"),
             "ffn_norm": ([h], "f32", "post_attention_layernorm"),
             "ffn_gate": ([h, ff], "matrix", "mlp.gate_proj"),
             "ffn_up": ([h, ff], "matrix", "mlp.up_proj"),
             "ffn_down": ([ff, h], "matrix", "mlp.down_proj")}
    for n in range(t["num_hidden_layers"]):
        for g, (shape, kind, hf) in layer.items():
            out[f"blk.{n}.{g}.weight"] = (shape, kind, f"{lm}layers.{n}.{hf}.weight")
    c, f, p, d = v["hidden_size"], v["intermediate_size"], v["patch_size"], v["out_hidden_size"]
    m = 4 * c
    out["v.patch_embd.weight"] = ([p, p, 3, c], "patch", vis + "patch_embed.proj.weight")
    out["v.patch_embd.weight.1"] = ([p, p, 3, c], "patch", vis + "patch_embed.proj.weight")
    out["v.patch_embd.bias"] = ([c], "f32", vis + "patch_embed.proj.bias")
    out["v.position_embd.weight"] = ([c, v["num_position_embeddings"]], "f32",
                                     vis + "pos_embed.weight")

    def pair(name: str, w: list[int], b: list[int], src: str, kind: str = "matrix") -> None:
        out[f"{name}.weight"] = (w, kind, f"{src}.weight")
        out[f"{name}.bias"] = (b, "f32", f"{src}.bias")

    for n in range(v["depth"]):
        blk = f"{vis}blocks.{n}."
        pair(f"v.blk.{n}.ln1", [c], [c], blk + "norm1", "f32")
        pair(f"v.blk.{n}.attn_qkv", [c, 3 * c], [3 * c], blk + "attn.qkv")
        pair(f"v.blk.{n}.attn_out", [c, c], [c], blk + "attn.proj")
        pair(f"v.blk.{n}.ln2", [c], [c], blk + "norm2", "f32")
        pair(f"v.blk.{n}.ffn_up", [c, f], [f], blk + "mlp.linear_fc1")
        pair(f"v.blk.{n}.ffn_down", [f, c], [c], blk + "mlp.linear_fc2")
    pair("v.post_ln", [c], [c], vis + "merger.norm", "f32")
    pair("mm.0", [m, m], [m], vis + "merger.linear_fc1")
    pair("mm.2", [m, d], [d], vis + "merger.linear_fc2")
    for j, layer_index in enumerate(v["deepstack_visual_indexes"]):
        src = f"{vis}deepstack_merger_list.{j}."
        pair(f"v.deepstack.{layer_index}.norm", [m], [m], src + "norm", "f32")
        pair(f"v.deepstack.{layer_index}.fc1", [m, m], [m], src + "linear_fc1")
        pair(f"v.deepstack.{layer_index}.fc2", [m, d], [d], src + "linear_fc2")
    return out


def expected_type(kind: str, ne0: int, chosen: str) -> Q:
    if kind == "f32":
        return Q.F32
    if kind == "patch":
        return Q.F16 if chosen == "f16" else Q.F32
    if TYPES[chosen] in (Q.Q8_0, Q.Q4_0) and ne0 % 32:
        return Q.F16
    return TYPES[chosen]


def source_value(name: str, src: dict[str, np.ndarray], hf: str) -> np.ndarray:
    value = src[hf]
    if name.startswith("v.patch_embd.weight"):
        return np.ascontiguousarray(value[:, :, 1 if name.endswith(".1") else 0])
    return value


def check_values(name: str, qtype: Q, data: np.ndarray, want: np.ndarray) -> None:
    got = dequantize(data, qtype).reshape(want.shape)
    if qtype == Q.F32:
        np.testing.assert_array_equal(got, want, err_msg=name)
    elif qtype == Q.F16:
        np.testing.assert_array_equal(got, want.astype(np.float16).astype(np.float32), name)
    elif qtype == Q.BF16:
        assert np.all(np.abs(got - want) <= np.abs(want) * 2.0 ** -8), name
    else:  # block types: per-block error bound, and bytes equal to quantising whole tensor
        blocks, got_b = want.reshape(-1, 32), got.reshape(-1, 32)
        step = np.abs(blocks).max(axis=1, keepdims=True) / (127 if qtype == Q.Q8_0 else 8)
        # half a step, plus the f16 rounding of the scale (≤ 127·2⁻¹¹ steps); Q4_0 clips the
        # extreme opposite to the scale sign to 7 steps: one step
        limit = step * (0.57 if qtype == Q.Q8_0 else 1.01) + 1e-7
        assert np.all(np.abs(got_b - blocks) <= limit), name
    whole = quantize(want.reshape(-1, want.shape[-1]) if want.ndim > 1 else want, qtype)
    assert np.asarray(data).tobytes() == np.asarray(whole).tobytes(), f"{name}: chunking"


def tensors_of(reader: GGUFReader) -> dict[str, Any]:
    return {t.name: t for t in reader.tensors}


def kv(reader: GGUFReader) -> dict[str, Any]:
    return {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}


@pytest.mark.parametrize("variant", ["tied", "untied"])
@pytest.mark.parametrize("text_type", ["f32", "f16", "bf16", "q8_0", "q4_0"])
def test_every_tensor_has_the_spec_name_shape_type_and_source_values(
        convert: Callable[..., Converted], checkpoints: dict[str, Path], variant: str,
        text_type: str) -> None:
    vision_type = "q8_0" if text_type == "q4_0" else None  # q4_0 text, q8_0 vision
    result, text, mmproj = convert(variant, text_type, vision_type)
    cfg = json.loads((checkpoints[variant] / "config.json").read_text())
    layout, src = spec_layout(cfg), source_tensors(checkpoints[variant])
    got = {**tensors_of(text), **tensors_of(mmproj)}
    assert sorted(got) == sorted(layout)
    assert not any(n.startswith(("v.", "mm.")) for n in tensors_of(text))
    for name, (shape, kind, hf) in layout.items():
        tensor = got[name]
        chosen = result.vision_type if name.startswith(("v.", "mm.")) else result.text_type
        assert [int(x) for x in tensor.shape] == shape, name
        assert tensor.tensor_type == expected_type(kind, shape[0], chosen), name
        check_values(name, tensor.tensor_type, tensor.data, source_value(name, src, hf))


def test_tied_model_has_no_output_weight_and_untied_keeps_lm_head(
        convert: Callable[..., Converted], checkpoints: dict[str, Path]) -> None:
    assert "output.weight" not in tensors_of(convert("tied")[1])
    assert not (checkpoints["tied"] / "model.safetensors.index.json").exists()
    untied = tensors_of(convert("untied")[1])["output.weight"]
    np.testing.assert_array_equal(untied.data.reshape(-1, 64),
                                  source_tensors(checkpoints["untied"])["lm_head.weight"])
    assert convert("untied")[0].tied_embeddings is False


@pytest.mark.parametrize("text_type", ["q8_0", "q4_0"])
def test_rows_not_a_multiple_of_32_fall_back_to_f16(convert: Callable[..., Converted],
                                                    text_type: str) -> None:
    result, text, mmproj = convert("tied", text_type, "q8_0")
    # both MLPs are 80 wide: ffn_down rows (text and vision) hold 80 values
    fallback = {n for n, t in {**tensors_of(text), **tensors_of(mmproj)}.items()
                if t.tensor_type == Q.F16}
    assert fallback == {"blk.0.ffn_down.weight", "blk.1.ffn_down.weight",
                        *(f"v.blk.{n}.ffn_down.weight" for n in range(3))}
    assert set(result.fallback_f16) == fallback
    assert tensors_of(text)["blk.0.ffn_up.weight"].tensor_type == TYPES[text_type]


def test_bf16_checkpoint_is_read_exactly(convert: Callable[..., Converted],
                                         checkpoints: dict[str, Path]) -> None:
    import torch
    from safetensors import safe_open

    with safe_open(checkpoints["bf16"] / "model.safetensors", "pt") as f:
        raw = f.get_tensor("model.language_model.layers.0.mlp.up_proj.weight")
    assert raw.dtype == torch.bfloat16
    as_bf16 = tensors_of(convert("bf16", "bf16")[1])["blk.0.ffn_up.weight"]
    assert as_bf16.tensor_type == Q.BF16
    assert np.asarray(as_bf16.data).tobytes() == raw.view(torch.int16).numpy().tobytes()
    as_f32 = tensors_of(convert("bf16", "f32")[1])["blk.0.ffn_up.weight"]
    np.testing.assert_array_equal(as_f32.data, raw.float().numpy())


def test_metadata_follows_the_spec(convert: Callable[..., Converted],
                                   checkpoints: dict[str, Path], tiny_tok: Tokenizer) -> None:
    result, text, mmproj = convert("tied", "q8_0")
    t, v = kv(text), kv(mmproj)
    ids = {c: tiny_tok.token_to_id(c) for c in ("<|endoftext|>", "<|im_end|>", "<|image_pad|>",
                                                 "<|video_pad|>", "<|vision_start|>",
                                                 "<|vision_end|>")}
    assert t["general.architecture"] == "qwen3vl" and t["general.type"] == "model"
    assert t["general.file_type"] == FILE_TYPE["q8_0"] and v["general.file_type"] == 1
    assert t["general.quantization_version"] == 2
    assert (t["general.sampling.top_k"], t["general.sampling.penalty_repeat"]) == (20, 1.0)
    assert t["general.sampling.top_p"] == pytest.approx(0.8)
    assert t["general.sampling.temp"] == pytest.approx(0.7)
    expected_text = {
        "qwen3vl.block_count": 2, "qwen3vl.context_length": 4096,
        "qwen3vl.embedding_length": 64, "qwen3vl.feed_forward_length": 80,
        "qwen3vl.attention.head_count": 4, "qwen3vl.attention.head_count_kv": 2,
        "qwen3vl.attention.key_length": 16, "qwen3vl.attention.value_length": 16,
        "qwen3vl.rope.freq_base": 5e6, "qwen3vl.rope.dimension_sections": [4, 2, 2, 0],
        "qwen3vl.n_deepstack_layers": 2, "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "qwen2", "tokenizer.ggml.eos_token_id": ids["<|im_end|>"],
        "tokenizer.ggml.bos_token_id": ids["<|endoftext|>"],
        "tokenizer.ggml.padding_token_id": ids["<|endoftext|>"],
        "tokenizer.ggml.add_bos_token": False, "tokenizer.ggml.add_eos_token": False,
        "tokenizer.chat_template": QWEN_CHAT_TEMPLATE,
        "edgevlm.image_token_id": ids["<|image_pad|>"],
        "edgevlm.video_token_id": ids["<|video_pad|>"],
        "edgevlm.vision_start_token_id": ids["<|vision_start|>"],
        "edgevlm.vision_end_token_id": ids["<|vision_end|>"],
        "edgevlm.eos_token_ids": [ids["<|im_end|>"], ids["<|endoftext|>"]],
    }
    assert {k: t.get(k) for k in expected_text} == expected_text
    assert t["qwen3vl.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-6)
    expected_vision = {
        "general.architecture": "clip", "general.type": "mmproj",
        "clip.has_vision_encoder": True, "clip.projector_type": "qwen3vl_merger",
        "clip.use_gelu": True, "clip.vision.image_size": 256, "clip.vision.patch_size": 16,
        "clip.vision.embedding_length": 64, "clip.vision.feed_forward_length": 80,
        "clip.vision.block_count": 3, "clip.vision.attention.head_count": 4,
        "clip.vision.projection_dim": 64, "clip.vision.spatial_merge_size": 2,
        "clip.vision.image_mean": [0.5] * 3, "clip.vision.image_std": [0.5] * 3,
        "clip.vision.is_deepstack_layers": [True, True, False],
        "edgevlm.vision.temporal_patch_size": 2, "edgevlm.vision.rope_theta": 10000.0,
        "edgevlm.vision.min_pixels": 65536, "edgevlm.vision.max_pixels": 16777216,
        "edgevlm.video.min_pixels": 4096, "edgevlm.video.max_pixels": 25165824,
    }
    assert {k: v.get(k) for k in expected_vision} == expected_vision
    assert v["clip.vision.attention.layer_norm_epsilon"] == pytest.approx(1e-6)
    assert re.fullmatch(r"[0-9a-f]{64}", t["edgevlm.fingerprint"])
    assert t["edgevlm.fingerprint"] == v["edgevlm.fingerprint"] == result.fingerprint
    types = {k: f.types for k, f in text.fields.items()}
    assert types["qwen3vl.block_count"] == [GGUFValueType.UINT32]
    assert types["general.sampling.top_k"] == [GGUFValueType.INT32]
    assert types["qwen3vl.rope.dimension_sections"] == [GGUFValueType.ARRAY, GGUFValueType.INT32]
    assert types["tokenizer.ggml.token_type"] == [GGUFValueType.ARRAY, GGUFValueType.INT32]


@pytest.mark.parametrize("variant", ["tied", "untied"])
def test_tokenizer_arrays_and_hf_json_tokenize_like_the_checkpoint(
        convert: Callable[..., Converted], checkpoints: dict[str, Path], variant: str) -> None:
    t = kv(convert(variant)[1])
    hf_json = (checkpoints[variant] / "tokenizer.json").read_text()
    # the same document, stored compact (merges as "a b" strings)
    stored = json.loads(t["tokenizer.huggingface.json"])
    original_doc = json.loads(hf_json)
    assert {k: v for k, v in stored.items() if k != "model"} == \
        {k: v for k, v in original_doc.items() if k != "model"}
    assert stored["model"]["vocab"] == original_doc["model"]["vocab"]
    assert stored["model"]["merges"] == [m if isinstance(m, str) else " ".join(m)
                                         for m in original_doc["model"]["merges"]]
    assert t["tokenizer.chat_template"] == QWEN_CHAT_TEMPLATE  # from .json and from .jinja
    original = Tokenizer.from_str(hf_json)
    n_vocab = json.loads((checkpoints[variant] / "config.json").read_text())[
        "text_config"]["vocab_size"]
    tokens, types, merges = ggml_arrays(original, n_vocab)
    assert (t["tokenizer.ggml.tokens"], t["tokenizer.ggml.token_type"],
            t["tokenizer.ggml.merges"]) == (tokens, types, merges)
    rebuilt = tokenizer_from_ggml(tokens, merges, types, t["tokenizer.ggml.pre"])
    text = "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Describe 我想 🚀\n\n\n "
    assert rebuilt.encode(text).ids == original.encode(text).ids
    assert Tokenizer.from_str(t["tokenizer.huggingface.json"]).encode(text).ids == \
        original.encode(text).ids


def test_fingerprint_identifies_weights_and_config_not_storage(
        convert: Callable[..., Converted]) -> None:
    tied = convert("tied")[0].fingerprint
    assert convert("tied", "q4_0")[0].fingerprint == tied
    assert convert("sharded")[0].fingerprint == tied  # same weights, 100 KB shards
    assert convert("seed1")[0].fingerprint != tied
    assert convert("untied")[0].fingerprint != tied
    sharded, single = convert("sharded")[1:], convert("tied")[1:]
    for a, b in zip(sharded, single, strict=True):
        for name, tensor in tensors_of(a).items():
            assert np.asarray(tensor.data).tobytes() == \
                np.asarray(tensors_of(b)[name].data).tobytes(), name
