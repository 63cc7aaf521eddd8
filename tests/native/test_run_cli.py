"""`edgevlm run` on a converted tiny model: text, JSON, logits file, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tests.native.conftest import FIXTURES, golden


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edgevlm", "run", *args], capture_output=True,
                          text=True, timeout=300)


def test_run_answers_like_transformers_and_writes_logits(
        tmp_path: Path, converted: Callable[[str, str], Path]) -> None:
    model = converted("qwen3vl-tiny-a", "f32")
    g = golden("qwen3vl-tiny-a", "image")
    logits = tmp_path / "logits.npy"
    proc = run("--model", str(model), "--image",
               str(FIXTURES / "golden" / "images" / "scene_150x90.png"), "--prompt",
               "Describe this image.", "--max-tokens", "8", "--temperature", "0", "--json",
               "--logits-out", str(logits), "--threads", "2")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["usage"]["prompt_tokens"] == len(g["input_ids"])
    assert out["tokens"] == g["generated_ids"][: len(out["tokens"])].tolist()
    steps = np.load(logits)
    assert steps.shape == (len(out["tokens"]) + (out["finish_reason"] == "stop"),
                           g["decode_logits"].shape[1])
    assert "loaded" in proc.stderr  # progress on model load


def test_run_reports_bad_input_with_exit_codes(tmp_path: Path,
                                               converted: Callable[[str, str], Path]) -> None:
    proc = run("--model", str(tmp_path / "missing"), "--prompt", "hi")
    assert proc.returncode == 1 and "no such model" in proc.stderr
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8 not really")
    proc = run("--model", str(converted("qwen3vl-tiny-a", "f32")), "--image", str(bad),
               "--prompt", "hi")
    assert proc.returncode == 1 and "unsupported" not in proc.stdout and proc.stderr
