"""Tiny checkpoints converted by ``edgevlm convert`` on demand, and the golden fixtures."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgevlm.convert.cli import main as convert_main

FIXTURES = Path(__file__).parents[1] / "fixtures"
MODELS = ("qwen3vl-tiny-a", "qwen3vl-tiny-b", "qwen3vl-tiny-c")
CASES = ("image", "two_images", "video", "text")


@pytest.fixture(scope="session")
def manifest() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / "golden" / "manifest.json").read_text())
    return data


def golden(model: str, case: str) -> dict[str, np.ndarray]:
    with np.load(FIXTURES / "golden" / model / f"{case}.npz") as z:
        return {k: z[k] for k in z.files}


def bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 -> the nearest bfloat16 (ties to even), as float32."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32)


def q8_0_round(x: np.ndarray) -> np.ndarray:
    """Rows of 32-value blocks through Q8_0 and back (ggml's reference quantiser)."""
    from gguf import GGMLQuantizationType, quants

    q = quants.quantize(x.astype(np.float32), GGMLQuantizationType.Q8_0)
    return quants.dequantize(q, GGMLQuantizationType.Q8_0).reshape(x.shape).astype(np.float32)


def write_rounded_checkpoint(model: str, kind: str, out: Path) -> Path:
    """A copy of a tiny checkpoint whose weights carry exactly the rounding ``edgevlm convert
    --type kind`` applies (bf16: every weight of >= 2 dims but the position table; q8_0: the
    text model's 2-D weights), so that running it in F32 gives the exact-arithmetic answer of
    the quantised model."""
    from safetensors.numpy import load_file, save_file

    src = FIXTURES / "models" / model
    shutil.copytree(src, out)
    tensors = load_file(str(src / "model.safetensors"))
    for name, value in tensors.items():
        if kind == "bf16" and value.ndim >= 2 and "pos_embed" not in name:
            tensors[name] = bf16_round(value)
        elif (kind == "q8_0" and value.ndim == 2 and value.shape[1] % 32 == 0
              and "visual" not in name):
            tensors[name] = q8_0_round(value)
    save_file(tensors, str(out / "model.safetensors"))
    return out


@pytest.fixture(scope="session")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str], Path]:
    """converted(model, type) -> a directory with model.gguf + mmproj.gguf (cached)."""
    root = tmp_path_factory.mktemp("converted")
    done: dict[tuple[str, str], Path] = {}

    def get(model: str, wtype: str) -> Path:
        """wtype: f32, f16, bf16, q8_0, or "exact-bf16" / "exact-q8_0" (F32 files whose
        weights are rounded the way the quantised type rounds them)."""
        if (model, wtype) not in done:
            out = root / f"{model}-{wtype}"
            source = FIXTURES / "models" / model
            if wtype.startswith("exact-"):
                source = write_rounded_checkpoint(model, wtype[6:], root / f"{model}-{wtype}-hf")
            file_type = "f32" if wtype.startswith("exact-") else wtype
            vision = "f32" if file_type in ("f32", "q8_0") else file_type
            rc = convert_main([str(source), "-o", str(out), "--type", file_type,
                               "--vision-type", vision])
            assert rc == 0, f"edgevlm convert failed for {model} {wtype}"
            done[(model, wtype)] = out
        return done[(model, wtype)]

    return get
