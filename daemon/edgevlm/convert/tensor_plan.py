"""Which checkpoint tensor becomes which GGUF tensor, in which shape and type.

The tables follow llama.cpp's converter (``conversion/qwen3vl.py``, ``gguf-py`` tensor names)
and the spec ``gguf-qwen3vl.md``. Shapes here are numpy/PyTorch order (outermost first); GGUF
records them reversed. Type rules (llama.cpp's ``prepare_tensors``):

* 1-d tensors (norms, biases) and ``*_norm.weight``: F32; ``v.position_embd.weight``: F32;
* ``v.patch_embd.weight`` / ``.weight.1`` (the two temporal slices of the Conv3d): F16 when the
  vision type is F16, else F32;
* every other matrix: the chosen type, or for a K-quant / IQ4 ``--type`` (``q4_k_m``, ...)
  the type llama.cpp's mix gives that tensor (``quant_mix``); a matrix whose rows do not divide
  into the type's blocks falls back (``quant_mix.fit_rows``: Q8_0/Q4_0 → F16, as before; the
  vision tower's Q4_K → Q5_0 and Q6_K → Q8_0, as llama.cpp's ``tensor_type_fallback``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from .errors import ConvertInputError
from .hf_config import ModelConfig
from .quant_mix import MIXES, QuantMix, TextShape, fit_rows, mix_type
from .safetensors_mmap import TensorRecord

QType = GGMLQuantizationType
# --type values that store every matrix in one type (llama-quantize --pure)
TYPE_BY_NAME: dict[str, QType] = {
    "f32": QType.F32, "f16": QType.F16, "bf16": QType.BF16, "q8_0": QType.Q8_0,
    "q4_0": QType.Q4_0,
}
# --vision-type values: every matrix of mmproj.gguf in one type (no mix for the vision tower;
# never Q4_0). Q4_K and Q6_K as in the mmproj files users download; their rows must divide into
# 256-value blocks, the others fall back (fit_rows).
VISION_TYPE_BY_NAME: dict[str, QType] = {
    "f32": QType.F32, "f16": QType.F16, "bf16": QType.BF16, "q8_0": QType.Q8_0,
    "q4_k": QType.Q4_K, "q6_k": QType.Q6_K,
}
# general.file_type (llama.cpp LlamaFileType) of a file whose matrices are mostly this type.
# Q4_K has no plain id (only Q4_K_S 14, Q4_K_M 15): a uniform Q4_K file is MOSTLY_Q4_K_M, what
# `llama-quantize --pure ... Q4_K_M` writes over all-Q4_K matrices and the q4_k_m text model's id.
# Q6_K: MOSTLY_Q6_K (18), as the q6_k text type.
FILE_TYPE: dict[QType, int] = {QType.F32: 0, QType.F16: 1, QType.Q4_0: 2, QType.Q8_0: 7,
                               QType.Q4_K: 15, QType.Q6_K: 18, QType.BF16: 32}


def file_type(type_name: str) -> int:
    """general.file_type of ``--type type_name`` (a uniform type or a mix)."""
    mix = MIXES.get(type_name)
    return mix.file_type if mix is not None else FILE_TYPE[TYPE_BY_NAME[type_name]]


def vision_file_type(type_name: str) -> int:
    """general.file_type of ``--vision-type type_name``: its type's, as for the uniform
    ``--type`` values (Q8_0 → 7, Q4_K → 15, Q6_K → 18)."""
    return FILE_TYPE[VISION_TYPE_BY_NAME[type_name]]


@dataclass(frozen=True)
class TypeChoice:
    """How one file's matrices are typed: ``uniform`` for all of them, or llama.cpp's
    ``mix`` over a text model of ``shape`` (``uniform`` is then the mix's default type)."""

    uniform: QType
    mix: QuantMix | None = None
    shape: TextShape | None = None

    @classmethod
    def vision(cls, type_name: str) -> TypeChoice:
        """``--vision-type type_name``: every vision matrix in that type."""
        return cls(VISION_TYPE_BY_NAME[type_name])

    @classmethod
    def named(cls, type_name: str, shape: TextShape | None = None) -> TypeChoice:
        mix = MIXES.get(type_name)
        if mix is None:
            return cls(TYPE_BY_NAME[type_name])
        if shape is None:
            raise ValueError(f"the {type_name} mix needs the text model's shape")
        return cls(mix.default, mix, shape)


TEXT_PREFIX = "model.language_model."
VISION_PREFIX = "model.visual."
# HF suffix inside model.language_model.layers.N → GGUF suffix inside blk.N.
_TEXT_LAYER = (
    ("input_layernorm.weight", "attn_norm.weight"),
    ("self_attn.q_proj.weight", "attn_q.weight"),
    ("self_attn.q_norm.weight", "attn_q_norm.weight"),
    ("self_attn.k_proj.weight", "attn_k.weight"),
    ("self_attn.k_norm.weight", "attn_k_norm.weight"),
    ("self_attn.v_proj.weight", "attn_v.weight"),
    ("self_attn.o_proj.weight", "attn_output.weight"),
    ("post_attention_layernorm.weight", "ffn_norm.weight"),
    ("mlp.gate_proj.weight", "ffn_gate.weight"),
    ("mlp.up_proj.weight", "ffn_up.weight"),
    ("mlp.down_proj.weight", "ffn_down.weight"),
)
# HF suffix inside model.visual.blocks.N → GGUF suffix inside v.blk.N (each .weight and .bias).
_VISION_BLOCK = (("norm1", "ln1"), ("attn.qkv", "attn_qkv"), ("attn.proj", "attn_out"),
                 ("norm2", "ln2"), ("mlp.linear_fc1", "ffn_up"), ("mlp.linear_fc2", "ffn_down"))
_MERGER = (("norm", "v.post_ln"), ("linear_fc1", "mm.0"), ("linear_fc2", "mm.2"))
_DEEPSTACK = (("norm", "norm"), ("linear_fc1", "fc1"), ("linear_fc2", "fc2"))


@dataclass(frozen=True)
class PlannedTensor:
    """One GGUF tensor: its name, source tensor, numpy shape and storage type."""

    name: str
    source: str
    shape: tuple[int, ...]
    qtype: QType
    temporal_slice: int | None = None  # index along the Conv3d's time axis
    wanted: QType | None = None  # the type asked for when rows did not divide into its blocks

    @property
    def fallback(self) -> bool:
        return self.wanted is not None

    @property
    def nbytes(self) -> int:
        block, size = GGML_QUANT_SIZES[self.qtype]
        return int(np.prod(self.shape, dtype=np.int64)) // block * size

    @property
    def gguf_shape(self) -> list[int]:
        return list(reversed(self.shape))


def _storage_type(name: str, shape: tuple[int, ...], choice: TypeChoice) -> QType:
    """The type ``choice`` wants for tensor ``name``, before the fallback for misfit rows."""
    if len(shape) <= 1 or name.endswith("_norm.weight") or name == "v.position_embd.weight":
        return QType.F32
    if ".patch_embd.weight" in name:
        return QType.F16 if choice.uniform == QType.F16 else QType.F32
    if choice.mix is not None and choice.shape is not None:
        return mix_type(choice.mix, name, shape[-1], choice.shape)
    return choice.uniform


def _planned(name: str, source: str, shape: tuple[int, ...], choice: TypeChoice,
             temporal_slice: int | None = None) -> PlannedTensor:
    wanted = _storage_type(name, shape, choice)
    qtype = fit_rows(name, wanted, shape[-1])
    return PlannedTensor(name, source, shape, qtype, temporal_slice,
                         None if qtype == wanted else wanted)


def expected_text(cfg: ModelConfig) -> list[tuple[str, str, tuple[int, ...]]]:
    """(GGUF name, HF name, HF shape) of every text tensor, in file order."""
    t = cfg.text
    h, q, kv, ff = t.hidden_size, t.n_heads * t.head_dim, t.n_kv_heads * t.head_dim, \
        t.intermediate_size
    layer_shapes: dict[str, tuple[int, ...]] = {"attn_norm.weight": (h,), "attn_q.weight": (q, h),
                    "attn_q_norm.weight": (t.head_dim,), "attn_k.weight": (kv, h),
                    "attn_k_norm.weight": (t.head_dim,), "attn_v.weight": (kv, h),
                    "attn_output.weight": (h, q), "ffn_norm.weight": (h,),
                    "ffn_gate.weight": (ff, h), "ffn_up.weight": (ff, h),
                    "ffn_down.weight": (h, ff)}
    out: list[tuple[str, str, tuple[int, ...]]] = [
        ("token_embd.weight", TEXT_PREFIX + "embed_tokens.weight", (t.vocab_size, h))]
    for n in range(t.n_layers):
        out += [(f"blk.{n}.{g}", f"{TEXT_PREFIX}layers.{n}.{s}", layer_shapes[g])
                for s, g in _TEXT_LAYER]
    out.append(("output_norm.weight", TEXT_PREFIX + "norm.weight", (h,)))
    if not cfg.tie_word_embeddings:
        out.append(("output.weight", "lm_head.weight", (t.vocab_size, h)))
    return out


def expected_vision(cfg: ModelConfig) -> list[tuple[str, str, tuple[int, ...]]]:
    """(GGUF name, HF name, HF shape) of every vision tensor, in file order. The patch
    embedding appears once with its 5-d Conv3d shape (split into two slices later)."""
    v = cfg.vision
    c, f, d = v.hidden_size, v.intermediate_size, v.out_hidden_size
    m = c * v.spatial_merge_size ** 2
    p = VISION_PREFIX
    out: list[tuple[str, str, tuple[int, ...]]] = [
        ("v.patch_embd.weight", p + "patch_embed.proj.weight",
         (c, v.in_channels, v.temporal_patch_size, v.patch_size, v.patch_size)),
        ("v.patch_embd.bias", p + "patch_embed.proj.bias", (c,)),
        ("v.position_embd.weight", p + "pos_embed.weight", (v.num_position_embeddings, c))]
    block = {"ln1": ((c,), (c,)), "attn_qkv": ((3 * c, c), (3 * c,)),
             "attn_out": ((c, c), (c,)), "ln2": ((c,), (c,)),
             "ffn_up": ((f, c), (f,)), "ffn_down": ((c, f), (c,))}
    for n in range(v.depth):
        for hf, g in _VISION_BLOCK:
            w, b = block[g]
            out += [(f"v.blk.{n}.{g}.weight", f"{p}blocks.{n}.{hf}.weight", w),
                    (f"v.blk.{n}.{g}.bias", f"{p}blocks.{n}.{hf}.bias", b)]
    merger = {"norm": ((c,), (c,)), "linear_fc1": ((m, m), (m,)), "linear_fc2": ((d, m), (d,))}
    for j, layer in enumerate(v.deepstack_indexes):
        for hf, g in _DEEPSTACK:
            w, b = ((m,), (m,)) if hf == "norm" else merger[hf]
            src = f"{p}deepstack_merger_list.{j}.{hf}"
            out += [(f"v.deepstack.{layer}.{g}.weight", src + ".weight", w),
                    (f"v.deepstack.{layer}.{g}.bias", src + ".bias", b)]
    for hf, g in _MERGER:
        w, b = merger[hf]
        out += [(f"{g}.weight", f"{p}merger.{hf}.weight", w),
                (f"{g}.bias", f"{p}merger.{hf}.bias", b)]
    return out


def canonical_names(tensors: dict[str, TensorRecord]) -> dict[str, TensorRecord]:
    """Checkpoint tensors keyed by the transformers ≥ 4.57 names (``visual.*`` →
    ``model.visual.*``, ``model.layers.*`` → ``model.language_model.layers.*``)."""
    out: dict[str, TensorRecord] = {}
    for name, rec in tensors.items():
        if name.startswith("visual."):
            name = "model." + name
        elif name.startswith(("model.layers.", "model.embed_tokens.", "model.norm.")):
            name = TEXT_PREFIX + name.removeprefix("model.")
        out[name] = rec
    return out


def build_plan(entries: list[tuple[str, str, tuple[int, ...]]],
               tensors: dict[str, TensorRecord], chosen: TypeChoice) -> list[PlannedTensor]:
    """Check every expected tensor is there with its shape and plan its storage."""
    plan: list[PlannedTensor] = []
    for gguf_name, source, shape in entries:
        rec = tensors.get(source)
        if rec is None:
            raise ConvertInputError(f"the checkpoint has no tensor {source} (needed for "
                                    f"{gguf_name}); is it a complete Qwen3-VL checkpoint?")
        if rec.shape != shape:
            raise ConvertInputError(f"{source} has shape {list(rec.shape)}, config.json implies "
                                    f"{list(shape)}")
        if source.endswith("patch_embed.proj.weight"):
            sliced = (shape[0], shape[1], shape[3], shape[4])
            plan += [_planned("v.patch_embd.weight", source, sliced, chosen, 0),
                     _planned("v.patch_embd.weight.1", source, sliced, chosen, 1)]
        else:
            plan.append(_planned(gguf_name, source, shape, chosen))
    return plan


def unexpected_tensors(tensors: dict[str, TensorRecord], used: set[str]) -> list[str]:
    """Checkpoint tensors no GGUF tensor comes from (``lm_head.weight`` of a tied model is
    allowed and skipped; anything else means the checkpoint is not plain Qwen3-VL)."""
    return sorted(n for n in tensors if n not in used and n != "lm_head.weight")
