"""``convert_checkpoint``: a transformers Qwen3-VL checkpoint directory → ``model.gguf`` +
``mmproj.gguf`` in llama.cpp's layout (spec ``gguf-qwen3vl.md``)."""

from __future__ import annotations

import logging
import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ConvertError, ConvertInputError
from .gguf_stream import ProgressFn, StreamState, WrittenFile, patch_string_value, write_gguf
from .hf_config import load_generation_params, load_model_config, load_processor_params
from .metadata import FINGERPRINT_KEY, text_writer, vision_writer
from .quant_mix import MIXES, TextShape
from .safetensors_mmap import SafetensorsCheckpoint
from .tensor_plan import (
    TYPE_BY_NAME,
    VISION_TYPE_BY_NAME,
    PlannedTensor,
    QType,
    TypeChoice,
    build_plan,
    canonical_names,
    expected_text,
    expected_vision,
    file_type,
    unexpected_tensors,
    vision_file_type,
)
from .vocab import load_vocab

logger = logging.getLogger(__name__)

TEXT_FILE = "model.gguf"
VISION_FILE = "mmproj.gguf"
TEXT_TYPES = (*TYPE_BY_NAME, *MIXES)   # uniform types, then llama.cpp's K-quant / IQ4 mixes
VISION_TYPES = tuple(VISION_TYPE_BY_NAME)   # uniform: f32 ... q8_0, then q4_k, q6_k


@dataclass(frozen=True)
class ConvertResult:
    """What a conversion wrote."""

    text_path: Path
    mmproj_path: Path
    text_type: str
    vision_type: str
    text_tensors: int
    vision_tensors: int
    text_bytes: int
    vision_bytes: int
    tied_embeddings: bool
    fallback_f16: tuple[str, ...]
    fingerprint: str
    seconds: float
    peak_rss_mb: float
    # every tensor stored in another type than asked for (rows not a multiple of its blocks):
    # name -> "WANTED->STORED", e.g. "Q4_K->Q5_0"; fallback_f16 lists those stored as F16
    fallbacks: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "model": str(self.text_path), "mmproj": str(self.mmproj_path),
            "type": self.text_type, "vision_type": self.vision_type,
            "tensors": {"model": self.text_tensors, "mmproj": self.vision_tensors},
            "bytes": {"model": self.text_bytes, "mmproj": self.vision_bytes},
            "tied_embeddings": self.tied_embeddings, "fallback_f16": list(self.fallback_f16),
            "fallbacks": dict(self.fallbacks),
            "fingerprint": self.fingerprint, "seconds": round(self.seconds, 3),
            "peak_rss_mb": round(self.peak_rss_mb, 1),
        }


def default_vision_type(text_type: str) -> str:
    """f32 for an f32 conversion, else f16 (never Q4_0 for the vision tower; for the K-quant
    and IQ4 mixes F16 too, as the mmproj files published beside llama.cpp's Qwen3-VL GGUFs)."""
    return "f32" if text_type == "f32" else "f16"


def peak_rss_mb() -> float:
    """This process's peak resident set: ``VmHWM`` (per address space; ``ru_maxrss`` carries a
    forking parent's peak across exec on Linux), else ``ru_maxrss``."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _check_types(text_type: str, vision_type: str) -> None:
    if text_type not in TEXT_TYPES:
        raise ConvertInputError(f"--type {text_type!r}: choose one of {', '.join(TEXT_TYPES)}")
    if vision_type not in VISION_TYPES:
        raise ConvertInputError(f"--vision-type {vision_type!r}: choose one of "
                                f"{', '.join(VISION_TYPES)} (the vision tower is never Q4_0)")


def _n_params(plan: list[PlannedTensor]) -> int:
    return sum(int(np.prod(pt.shape, dtype=np.int64)) for pt in plan)


def _remove(*paths: Path) -> None:
    for path in paths:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            logger.warning("could not remove %s: %s", path, exc)


def convert_checkpoint(hf_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str],
                       text_type: str = "f16", vision_type: str | None = None,
                       progress: ProgressFn | None = None) -> ConvertResult:
    """Convert ``hf_dir`` into ``out_dir/model.gguf`` and ``out_dir/mmproj.gguf``.

    Raises :class:`ConvertInputError` for input that is not a convertible Qwen3-VL checkpoint
    and :class:`ConvertError` when writing fails. Files appear only when complete.
    """
    started = time.monotonic()
    vision_type = default_vision_type(text_type) if vision_type is None else vision_type
    _check_types(text_type, vision_type)
    src, dst = Path(hf_dir), Path(out_dir)
    if not src.is_dir():
        raise ConvertInputError(f"{src} is not a directory (give a Hugging Face checkpoint "
                                "directory)")
    cfg = load_model_config(src)
    proc = load_processor_params(src)
    gen = load_generation_params(src, cfg)
    vocab = load_vocab(src, cfg)
    name = src.resolve().name
    with SafetensorsCheckpoint.open_dir(src) as ckpt:
        tensors = canonical_names(ckpt.tensors)
        shape = TextShape(cfg.text.n_layers, cfg.text.n_heads // cfg.text.n_kv_heads,
                          cfg.tie_word_embeddings)
        text_plan = build_plan(expected_text(cfg), tensors, TypeChoice.named(text_type, shape))
        vision_plan = build_plan(expected_vision(cfg), tensors, TypeChoice.vision(vision_type))
        used = {pt.source for pt in [*text_plan, *vision_plan]}
        extra = unexpected_tensors(tensors, used)
        if extra:
            raise ConvertInputError(f"{len(extra)} checkpoint tensors are not part of dense "
                                    f"Qwen3-VL (first: {extra[0]})")
        try:
            dst.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConvertInputError(f"cannot create {dst}: {exc.strerror or exc}") from exc
        final = (dst / TEXT_FILE, dst / VISION_FILE)
        parts = (dst / (TEXT_FILE + ".part"), dst / (VISION_FILE + ".part"))
        state = StreamState(total=len(text_plan) + len(vision_plan), callback=progress)
        text_kv = text_writer(name, file_type(text_type), _n_params(text_plan), cfg, vocab,
                              gen)
        vision_kv = vision_writer(name, vision_file_type(vision_type), _n_params(vision_plan), cfg,
                                  proc, gen)
        try:
            written = (write_gguf(parts[0], text_kv, text_plan, tensors, ckpt, state),
                       write_gguf(parts[1], vision_kv, vision_plan, tensors, ckpt, state))
            if "lm_head.weight" in tensors and "lm_head.weight" not in used:
                logger.warning("tie_word_embeddings is true but the checkpoint stores "
                               "lm_head.weight; not written (the output projection is "
                               "token_embd.weight)")
                state.hash_source(ckpt, "lm_head.weight", tensors["lm_head.weight"])
            fingerprint = state.fingerprint(cfg.raw)
            for file in written:
                patch_string_value(file, FINGERPRINT_KEY, fingerprint)
            for part, path in zip(parts, final, strict=True):
                os.replace(part, path)
        except OSError as exc:
            _remove(*parts)
            raise ConvertError(f"writing {dst} failed: {exc.strerror or exc}") from exc
        except BaseException:
            _remove(*parts)
            raise
    return _result(final, written, text_type, vision_type, cfg.tie_word_embeddings,
                   [*text_plan, *vision_plan], fingerprint, time.monotonic() - started)


def _result(final: tuple[Path, Path], written: tuple[WrittenFile, WrittenFile], text_type: str,
            vision_type: str, tied: bool, plan: list[PlannedTensor], fingerprint: str,
            seconds: float) -> ConvertResult:
    n_text = sum(1 for pt in plan if not pt.name.startswith(("v.", "mm.")))
    return ConvertResult(
        text_path=final[0], mmproj_path=final[1], text_type=text_type, vision_type=vision_type,
        text_tensors=n_text, vision_tensors=len(plan) - n_text, text_bytes=written[0].nbytes,
        vision_bytes=written[1].nbytes, tied_embeddings=tied,
        fallback_f16=tuple(pt.name for pt in plan if pt.fallback and pt.qtype == QType.F16),
        fingerprint=fingerprint, seconds=seconds, peak_rss_mb=peak_rss_mb(),
        fallbacks=tuple((pt.name, f"{pt.wanted.name}->{pt.qtype.name}") for pt in plan
                        if pt.wanted is not None))
