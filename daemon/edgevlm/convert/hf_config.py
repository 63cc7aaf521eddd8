"""The Hugging Face side of a Qwen3-VL checkpoint: ``config.json`` and the processor and
generation configs, validated and reduced to what the GGUF pair records.

Both config layouts are read: the legacy one of the official checkpoints
(``text_config.rope_theta`` + ``text_config.rope_scaling{mrope_section, ...}``) and the one
transformers ≥ 5 writes (``text_config.rope_parameters{rope_theta, mrope_section, ...}``).
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ConvertInputError

logger = logging.getLogger(__name__)

QWEN3VL_MODEL_TYPE = "qwen3_vl"
# transformers' Qwen3VLTextConfig.default_theta, used when a config names no theta.
_DEFAULT_TEXT_ROPE_THETA = 500000.0
# Qwen3VLVisionRotaryEmbedding's default; not stored in config.json (spec qwen3vl.md §1).
_DEFAULT_VISION_ROPE_THETA = 10000.0


@dataclass(frozen=True)
class TextParams:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    context_length: int
    rope_theta: float
    mrope_section: tuple[int, ...]
    mrope_interleaved: bool


@dataclass(frozen=True)
class VisionParams:
    depth: int
    hidden_size: int
    intermediate_size: int
    n_heads: int
    in_channels: int
    patch_size: int
    temporal_patch_size: int
    spatial_merge_size: int
    out_hidden_size: int
    num_position_embeddings: int
    deepstack_indexes: tuple[int, ...]
    rope_theta: float

    @property
    def image_size(self) -> int:
        """llama.cpp's nominal image size: side of the learned position grid in pixels."""
        return int(self.num_position_embeddings ** 0.5 * self.patch_size)


@dataclass(frozen=True)
class ModelConfig:
    """``config.json`` of a Qwen3-VL checkpoint (dense)."""

    text: TextParams
    vision: VisionParams
    tie_word_embeddings: bool
    token_ids: dict[str, int | None]  # image/video/vision_start/vision_end; None = look up
    bos_token_id: int | None
    eos_token_id: int | None
    raw: dict[str, Any]


@dataclass(frozen=True)
class ProcessorParams:
    image_mean: tuple[float, ...]
    image_std: tuple[float, ...]
    image_min_pixels: int | None
    image_max_pixels: int | None
    video_min_pixels: int | None
    video_max_pixels: int | None
    video_fps: float | None
    video_min_frames: int | None
    video_max_frames: int | None


@dataclass(frozen=True)
class GenerationParams:
    top_k: int | None
    top_p: float | None
    temperature: float | None
    repetition_penalty: float | None
    eos_token_ids: tuple[int, ...]


def read_json(path: Path, *, required: bool = True) -> dict[str, Any] | None:
    """A JSON object from ``path``; ``None`` when it is absent and not required."""
    if not path.is_file():
        if required:
            raise ConvertInputError(f"{path} is missing")
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConvertInputError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise ConvertInputError(f"{path}: expected a JSON object")
    return data


def _get(section: dict[str, Any], key: str, where: str, kind: type, default: Any = None) -> Any:
    value = section.get(key, default)
    if value is None:
        raise ConvertInputError(f"config.json: {where}.{key} is missing")
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool) != (kind is bool):
        raise ConvertInputError(f"config.json: {where}.{key} = {value!r} is not a {kind.__name__}")
    return value


def _text_params(tc: dict[str, Any]) -> TextParams:
    rope = tc.get("rope_parameters") or tc.get("rope_scaling") or {}
    if not isinstance(rope, dict):
        raise ConvertInputError("config.json: text_config.rope_parameters is not an object")
    section = rope.get("mrope_section")
    if not (isinstance(section, list) and section and all(isinstance(s, int) for s in section)):
        raise ConvertInputError("config.json: text_config has no rope mrope_section (expected "
                                "rope_scaling or rope_parameters with mrope_section [t, h, w])")
    theta = rope.get("rope_theta", tc.get("rope_theta"))
    if theta is None:
        logger.warning("config.json names no text rope_theta; using transformers' default %g",
                       _DEFAULT_TEXT_ROPE_THETA)
        theta = _DEFAULT_TEXT_ROPE_THETA
    hidden = _get(tc, "hidden_size", "text_config", int)
    heads = _get(tc, "num_attention_heads", "text_config", int)
    head_dim = _get(tc, "head_dim", "text_config", int, hidden // max(heads, 1))
    if sum(section) * 2 != head_dim:
        raise ConvertInputError(f"config.json: mrope_section {section} does not cover head_dim "
                                f"{head_dim} (sum must be head_dim / 2)")
    return TextParams(
        vocab_size=_get(tc, "vocab_size", "text_config", int),
        hidden_size=hidden,
        intermediate_size=_get(tc, "intermediate_size", "text_config", int),
        n_layers=_get(tc, "num_hidden_layers", "text_config", int),
        n_heads=heads,
        n_kv_heads=_get(tc, "num_key_value_heads", "text_config", int, heads),
        head_dim=head_dim,
        rms_norm_eps=_get(tc, "rms_norm_eps", "text_config", float, 1e-6),
        context_length=_get(tc, "max_position_embeddings", "text_config", int),
        rope_theta=float(theta),
        mrope_section=tuple(section),
        mrope_interleaved=bool(rope.get("mrope_interleaved", True)),
    )


def _vision_params(vc: dict[str, Any], text_hidden: int) -> VisionParams:
    rope = vc.get("rope_parameters") or {}
    theta = (rope.get("rope_theta") if isinstance(rope, dict) else None) or vc.get("rope_theta")
    indexes = vc.get("deepstack_visual_indexes", [])
    if not (isinstance(indexes, list) and all(isinstance(i, int) for i in indexes)):
        raise ConvertInputError("config.json: vision_config.deepstack_visual_indexes is not a "
                                "list of integers")
    params = VisionParams(
        depth=_get(vc, "depth", "vision_config", int),
        hidden_size=_get(vc, "hidden_size", "vision_config", int),
        intermediate_size=_get(vc, "intermediate_size", "vision_config", int),
        n_heads=_get(vc, "num_heads", "vision_config", int),
        in_channels=_get(vc, "in_channels", "vision_config", int, 3),
        patch_size=_get(vc, "patch_size", "vision_config", int),
        temporal_patch_size=_get(vc, "temporal_patch_size", "vision_config", int, 2),
        spatial_merge_size=_get(vc, "spatial_merge_size", "vision_config", int, 2),
        out_hidden_size=_get(vc, "out_hidden_size", "vision_config", int),
        num_position_embeddings=_get(vc, "num_position_embeddings", "vision_config", int),
        deepstack_indexes=tuple(indexes),
        rope_theta=float(theta) if theta is not None else _DEFAULT_VISION_ROPE_THETA,
    )
    if any(not 0 <= i < params.depth for i in indexes) or len(set(indexes)) != len(indexes):
        raise ConvertInputError(f"config.json: deepstack_visual_indexes {indexes} must be "
                                f"distinct blocks in [0, {params.depth})")
    if params.out_hidden_size != text_hidden:
        raise ConvertInputError(f"config.json: vision out_hidden_size {params.out_hidden_size} "
                                f"!= text hidden_size {text_hidden}")
    if params.temporal_patch_size != 2:
        raise ConvertInputError("config.json: temporal_patch_size must be 2 (the GGUF layout "
                                "stores the two temporal slices of the patch embedding)")
    side = math.isqrt(params.num_position_embeddings)
    if side * side != params.num_position_embeddings:
        raise ConvertInputError("config.json: num_position_embeddings "
                                f"{params.num_position_embeddings} is not a square grid")
    return params


def load_model_config(hf_dir: Path) -> ModelConfig:
    """Read and validate ``config.json``; a clear error for anything but dense Qwen3-VL."""
    raw = read_json(hf_dir / "config.json")
    assert raw is not None
    model_type = raw.get("model_type")
    if model_type != QWEN3VL_MODEL_TYPE:
        archs = raw.get("architectures")
        hint = " (the MoE variant is not supported)" if model_type == "qwen3_vl_moe" else ""
        raise ConvertInputError(f"{hf_dir / 'config.json'}: not a Qwen3-VL config: model_type "
                                f"{model_type!r}, architectures {archs!r}{hint}")
    tc, vc = raw.get("text_config"), raw.get("vision_config")
    if not isinstance(tc, dict) or not isinstance(vc, dict):
        raise ConvertInputError("config.json: text_config and vision_config must be objects")
    text = _text_params(tc)
    vision = _vision_params(vc, text.hidden_size)
    tie = raw.get("tie_word_embeddings", tc.get("tie_word_embeddings", False))

    def token(key: str) -> int | None:
        value = raw.get(key, tc.get(key))
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    return ModelConfig(
        text=text, vision=vision, tie_word_embeddings=bool(tie),
        token_ids={k: token(f"{k}_token_id")
                   for k in ("image", "video", "vision_start", "vision_end")},
        bos_token_id=token("bos_token_id"), eos_token_id=token("eos_token_id"), raw=raw)


def _pixels(cfg: dict[str, Any], edge: str, legacy: str) -> int | None:
    size = cfg.get("size")
    value = size.get(edge) if isinstance(size, dict) else None
    value = cfg.get(legacy) if value is None else value
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _floats(value: Any, name: str) -> tuple[float, ...]:
    if value is None:
        logger.warning("preprocessor_config.json has no %s; using 0.5", name)
        return (0.5, 0.5, 0.5)
    if not (isinstance(value, list) and all(isinstance(v, int | float) for v in value)):
        raise ConvertInputError(f"preprocessor_config.json: {name} is not a list of numbers")
    return tuple(float(v) for v in value)


def load_processor_params(hf_dir: Path) -> ProcessorParams:
    image = read_json(hf_dir / "preprocessor_config.json")
    assert image is not None
    video = read_json(hf_dir / "video_preprocessor_config.json", required=False) or {}
    fps, min_frames, max_frames = video.get("fps"), video.get("min_frames"), video.get("max_frames")
    return ProcessorParams(
        image_mean=_floats(image.get("image_mean"), "image_mean"),
        image_std=_floats(image.get("image_std"), "image_std"),
        image_min_pixels=_pixels(image, "shortest_edge", "min_pixels"),
        image_max_pixels=_pixels(image, "longest_edge", "max_pixels"),
        video_min_pixels=_pixels(video, "shortest_edge", "min_pixels"),
        video_max_pixels=_pixels(video, "longest_edge", "max_pixels"),
        video_fps=float(fps) if isinstance(fps, int | float) else None,
        video_min_frames=min_frames if isinstance(min_frames, int) else None,
        video_max_frames=max_frames if isinstance(max_frames, int) else None,
    )


def load_generation_params(hf_dir: Path, config: ModelConfig) -> GenerationParams:
    gen = read_json(hf_dir / "generation_config.json", required=False) or {}

    def number(key: str) -> float | None:
        value = gen.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        return None

    eos = gen.get("eos_token_id", config.eos_token_id)
    eos_ids = [eos] if isinstance(eos, int) else eos if isinstance(eos, list) else []
    top_k = gen.get("top_k")
    return GenerationParams(
        top_k=top_k if isinstance(top_k, int) and not isinstance(top_k, bool) else None,
        top_p=number("top_p"), temperature=number("temperature"),
        repetition_penalty=number("repetition_penalty"),
        eos_token_ids=tuple(int(i) for i in eos_ids if isinstance(i, int)))
