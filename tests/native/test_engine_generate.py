"""The whole path from image files to text, against the golden fixtures: edgevlm's own
preprocessing, prompt assembly (chat template, placeholders, timestamps, 3-axis positions) and
greedy generation reproduce transformers' input_ids, position_ids and generated tokens."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgevlm.engine import Engine
from edgevlm.pipeline.preflight import bounds_for, preflight_context
from edgevlm.tokenizer import tokenize_chat
from edgevlm.vision.prepare import Preparation, prepare_media
from edgevlm.wire.protocol import parse_request
from tests.native.conftest import CASES, FIXTURES, MODELS, golden

GOLDEN = FIXTURES / "golden"


def edgevlm_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The manifest's chat messages (HF processor form) in edgevlm's Python API form."""
    out = []
    for message in messages:
        content = message["content"]
        if isinstance(content, list):
            parts = []
            for part in content:
                if part["type"] == "image":
                    parts.append({"type": "image", "image": str(GOLDEN / part["image"])})
                elif part["type"] == "video":
                    parts.append({"type": "video_frames", "fps": part["fps"],
                                  "video_frames": [str(GOLDEN / f) for f in part["video"]]})
                else:
                    parts.append(part)
            content = parts
        out.append({"role": message["role"], "content": content})
    return out


@pytest.fixture(scope="module")
def engines(converted: Callable[[str, str], Path]) -> dict[str, Engine]:
    return {m: Engine.load(converted(m, "f32"), threads=2, context=256) for m in MODELS}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("model", MODELS)
def test_prompt_assembly_matches_transformers(model: str, case: str, engines: dict[str, Engine],
                                              manifest: dict[str, Any]) -> None:
    engine = engines[model]
    g = golden(model, case)
    messages = edgevlm_messages(manifest["models"][model]["cases"][case]["messages"])
    from edgevlm.engine.engine import _normalise_messages

    request = parse_request({"messages": _normalise_messages(messages)})
    ctx = preflight_context(engine)
    prepared = prepare_media(request, Preparation(engine.facts, ctx.family,
                                                  bounds_for(ctx, request), ctx.media))
    for kind, key in (("image", "pixel_values"), ("video", "pixel_values_videos")):
        ours = [p.pixels.pixel_values for p in prepared if p.kind == kind and p.pixels]
        if ours:
            np.testing.assert_array_max_ulp(np.concatenate(ours), g[key], maxulp=1)
    media, _ = engine.encode_prepared(prepared)
    segments = engine.architecture.chat_template(request.messages, True)
    prompt = engine.prompt_for(tokenize_chat(segments, engine.tokenizer), media)
    assert prompt.tokens.tolist() == g["input_ids"].tolist()
    assert prompt.positions.tolist() == g["position_ids"].tolist()
    assert prompt.rope_delta == int(g["rope_delta"])


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("model", MODELS)
def test_greedy_generation_reproduces_transformers(model: str, case: str,
                                                   engines: dict[str, Engine],
                                                   manifest: dict[str, Any]) -> None:
    g = golden(model, case)
    messages = edgevlm_messages(manifest["models"][model]["cases"][case]["messages"])
    result = engines[model].generate(messages, max_tokens=8, temperature=0.0, want_logits=True)
    expected = g["generated_ids"].tolist()
    eos = engines[model].special.eos
    cut = next((i for i, t in enumerate(expected) if t in eos), len(expected))
    assert result.tokens == expected[:cut]
    assert result.finish_reason == ("stop" if cut < len(expected) else "length")
    assert result.logits is not None
    ref = g["decode_logits"][: len(result.logits)]
    assert float(np.abs(result.logits - ref).max()) < 1e-4 * float(np.abs(ref).max())


@pytest.mark.parametrize("model", MODELS)
def test_prefault_maps_both_files_and_the_engine_still_answers(model: str,
                                                               engines: dict[str, Engine]
                                                               ) -> None:
    """Engine.load maps the weights' pages beside the tokenizer's construction (the text
    file before the first answer, the mmproj file after); mapping them again reports each
    file's size, and a model freshly loaded that way answers the same."""
    engine = engines[model]
    files = engine.files
    assert files.mmproj is not None
    text, mmproj = files.text.stat().st_size, files.mmproj.stat().st_size
    assert engine.model.prefault() == text + mmproj
    assert engine.model.prefault(0) == text
    assert engine.model.prefault(1) == mmproj
    assert engine.model.prefault(2) == 0          # no such file: nothing, no error
    messages = [{"role": "user", "content": "Hello"}]
    again = Engine.load(files.text.parent, threads=1, context=64)
    assert (again.generate(messages, max_tokens=3, temperature=0.0).tokens
            == engine.generate(messages, max_tokens=3, temperature=0.0).tokens)


def test_precision_selects_the_kernel_mode_and_refuses_unknown_names(
        engines: dict[str, Engine]) -> None:
    engine = engines[MODELS[0]]
    assert engine.precision == "exact"
    text = engine.files.text.parent
    # auto on F32 weights is exact (K-quant weights: tests/native/test_convert_kquants.py)
    assert Engine.load(text, threads=1, context=64, precision="auto").precision == "exact"
    fast = Engine.load(text, threads=1, context=64, precision="fast")
    assert fast.precision == "fast"
    messages = [{"role": "user", "content": "Hello"}]
    # an F32 model: both precisions run the same float kernels
    assert (fast.generate(messages, max_tokens=3, temperature=0.0).tokens
            == engine.generate(messages, max_tokens=3, temperature=0.0).tokens)
    with pytest.raises(ValueError, match="unknown precision 'turbo'; use one of auto, exact, fast"):
        Engine.load(text, threads=1, context=64, precision="turbo")


def _mapped_rss_kib(path: Path) -> int:
    """Resident KiB of this process's maps of ``path`` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5:  # a map's header line
            inside = head[-1] == str(path)
        elif inside and line.startswith("Rss:"):
            total += int(head[1])
    return total


@pytest.mark.parametrize("model", MODELS)
def test_released_metadata_leaves_the_resident_memory_and_reads_back_the_same(
        model: str, engines: dict[str, Engine]) -> None:
    """Engine.load returns the text file's metadata pages (the tokenizer's ~15 MiB in a
    Qwen-sized file) to the page cache once it has read them; reading the metadata again
    maps them again, with the same bytes."""
    engine = engines[model]
    key = "tokenizer.huggingface.json"
    first = engine.model.meta_bytes(0, key)  # resident again
    assert first and len(first) > 8 * 1024, "the test needs a tokenizer of some size"
    text = engine.files.text.resolve()
    before = _mapped_rss_kib(text)
    engine.model.release_metadata()
    after = _mapped_rss_kib(text)
    assert before - after >= len(first) // 1024 - 8, (before, after, len(first))
    assert engine.model.meta_bytes(0, key) == first
    messages = [{"role": "user", "content": "Hello"}]
    assert engine.generate(messages, max_tokens=2, temperature=0.0).tokens
