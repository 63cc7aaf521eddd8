"""The committed tiny checkpoint and golden fixtures are what the scripts produce, today.

Runs ``tools/make_tiny_models.py`` and ``tools/make_golden_fixtures.py`` for one model into
tmp_path with live transformers and compares with ``tests/fixtures``: checkpoint tensors and
files identical; token arrays, grids and prompts identical; float arrays within 1e-5 of the
array's largest magnitude (relative), the tolerance of a rerun on another BLAS/thread count.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

pytestmark = pytest.mark.reference

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "tests" / "fixtures" / "models"
GOLDEN = ROOT / "tests" / "fixtures" / "golden"
MODEL = "qwen3vl-tiny-b"  # untied lm_head, GQA 6:1, head_dim 32: the least 2B-like one
RTOL = 1e-5
CASE_KEYS_COMPARED = ("messages", "prompt", "prompt_expanded", "generated_text",
                      "prompt_tokens", "image_tokens", "video_tokens", "rope_delta",
                      "video_frames_indices", "video_timestamps", "arrays")


def run_tool(script: str, *args: str) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / script), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]


def pixels(path: Path) -> np.ndarray[Any, Any]:
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def load_npz(path: Path) -> dict[str, Any]:
    with np.load(path) as npz:
        return {k: npz[k] for k in npz.files}


def test_tiny_checkpoint_rebuilds_identically(tmp_path: Path) -> None:
    from safetensors.numpy import load_file

    run_tool("make_tiny_models.py", "--out", str(tmp_path), "--only", MODEL)
    built, committed = tmp_path / MODEL, MODELS / MODEL
    assert sorted(p.name for p in built.iterdir()) == sorted(p.name for p in committed.iterdir())
    for path in committed.glob("*.json"):
        want, got = json.loads(path.read_text()), json.loads((built / path.name).read_text())
        if path.name == "generation_config.json":  # stamped with the running version
            del want["transformers_version"], got["transformers_version"]
        assert got == want, path.name
    want_tensors = load_file(committed / "model.safetensors")
    got_tensors = load_file(built / "model.safetensors")
    assert got_tensors.keys() == want_tensors.keys()
    for name, tensor in want_tensors.items():
        np.testing.assert_array_equal(got_tensors[name], tensor, err_msg=name)


def test_golden_fixtures_regenerate_within_tolerance(tmp_path: Path) -> None:
    run_tool("make_golden_fixtures.py", "--models", str(MODELS), "--out", str(tmp_path),
             "--only", MODEL)
    want = json.loads((GOLDEN / "manifest.json").read_text())
    got = json.loads((tmp_path / "manifest.json").read_text())
    assert got["images"] == want["images"]
    for name in want["images"]:
        path = want["images"][name]
        np.testing.assert_array_equal(pixels(tmp_path / path), pixels(GOLDEN / path),
                                      err_msg=path)
    want_model, got_model = want["models"][MODEL], got["models"][MODEL]
    for key in ("config", "image_size", "video_size"):
        assert got_model[key] == want_model[key], key
    assert set(got_model["cases"]) == set(want_model["cases"])
    for case, want_meta in want_model["cases"].items():
        got_meta = got_model["cases"][case]
        for key in CASE_KEYS_COMPARED:
            assert got_meta.get(key) == want_meta.get(key), f"{case}: {key}"
        new, old = load_npz(tmp_path / got_meta["file"]), load_npz(GOLDEN / want_meta["file"])
        for key, ref in old.items():
            if ref.dtype.kind == "f":
                scale = float(np.abs(ref).max()) if ref.size else 0.0
                np.testing.assert_allclose(new[key], ref, rtol=RTOL, atol=RTOL * scale,
                                           err_msg=f"{case}: {key}")
            else:
                np.testing.assert_array_equal(new[key], ref, err_msg=f"{case}: {key}")
