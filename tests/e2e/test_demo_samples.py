"""The sample frames ``edgevlm demo`` sends (``daemon/edgevlm/models/samples``), answered by
the bundled demo model exactly as the demo asks: each file's bytes, greedy, ``max_tokens`` 64.

``tools/demo_model/make_samples.py`` picked these held-out scenes because the model answers
them right, so a wrong answer here is a regression in the engine (image decoding, resize,
vision, prompt, sampling, detokenising), not the model's own error rate.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from edgevlm.engine import Engine
from edgevlm.models import demo_model_dir
from tools.demo_model.make_samples import MAX_FILE_BYTES, MAX_TOKENS, sampling_is_forced

SAMPLES_DIR = demo_model_dir().parent / "samples"
SAMPLES: list[dict[str, Any]] = json.loads(
    (SAMPLES_DIR / "samples.json").read_text(encoding="utf-8"))["samples"]


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine.load(demo_model_dir(), threads=2, context=1024)


def _messages(sample: dict[str, Any]) -> list[dict[str, Any]]:
    data = (SAMPLES_DIR / sample["image"]).read_bytes()
    return [{"role": "user", "content": [{"type": "image", "image": data},
                                         {"type": "text", "text": sample["prompt"]}]}]


@pytest.mark.parametrize("sample", SAMPLES, ids=[s["image"] for s in SAMPLES])
def test_bundled_sample_is_answered_its_truth(engine: Engine, sample: dict[str, Any]) -> None:
    result = engine.generate(_messages(sample), max_tokens=MAX_TOKENS, temperature=0.0,
                             want_logits=True)
    assert (result.text, result.finish_reason) == (sample["truth"], "stop")
    if sample.get("via") == "camera":
        # the camera path sets no temperature: the model's default sampling must be unable to
        # pick anything but the greedy tokens, whatever the seed
        assert result.logits is not None
        assert sampling_is_forced(engine, result.logits)
        for seed in (0, 1, 2):
            sampled = engine.generate(_messages(sample), max_tokens=MAX_TOKENS, seed=seed)
            assert sampled.text == sample["truth"]


def test_bundled_samples_are_small_files_of_their_format() -> None:
    assert any(s.get("via") == "camera" for s in SAMPLES)
    magic = {".jpg": b"\xff\xd8\xff", ".png": b"\x89PNG\r\n\x1a\n"}
    suffixes = set()
    for sample in SAMPLES:
        path = SAMPLES_DIR / sample["image"]
        suffixes.add(path.suffix)
        assert path.read_bytes().startswith(magic[path.suffix]), path.name
        assert path.stat().st_size <= MAX_FILE_BYTES, path.name
    assert suffixes == {".jpg", ".png"}   # both decoders on the demo's path
