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


def test_run_prints_the_answer_as_one_line_and_its_metrics_on_stderr() -> None:
    """Text mode streams the answer to stdout and ends the line (issue 19: the output had no
    final newline, so a shell prompt or the next command's output followed on its line)."""
    from edgevlm.models import demo_model_dir

    image = demo_model_dir().parent / "samples" / "garden.jpg"
    proc = run("--model", str(demo_model_dir()), "--image", str(image), "--prompt",
               "How many objects are there?", "--temperature", "0", "--threads", "1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.endswith("\n") and proc.stdout.count("\n") == 1 and proc.stdout.strip()
    last = proc.stderr.splitlines()[-1]
    assert last.startswith("[stop] prompt ") and "tok/s" in last
