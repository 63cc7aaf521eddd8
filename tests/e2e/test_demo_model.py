"""The bundled demo model as an end-to-end oracle: pixels in, exactly right words out.

The demo model (``daemon/edgevlm/models/qwen3vl-demo``, trained by
``tools/demo_model/train.py``) answers questions about synthetic scenes. A bug anywhere between
pixels and text — resize, patch order, position embeddings, 2-D/3-axis rotary, DeepStack,
placeholder expansion, cache replay, vision_tokens injection, sampling, detokenising — turns
its answers wrong, so these tests check answers, not numbers. The held-out split
(``scenes.TEST_SEED``) was never used in training or model selection.

The default tests need no torch: the F32 model is committed, and the Q8_0 model is converted
here from the committed float32 checkpoint (``fixtures/qwen3vl-demo``; needs the ``gguf``
package). The ``reference`` test compares token for token with transformers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgevlm.engine import Engine
from edgevlm.pipeline.cache import VisionCache
from edgevlm.wire.vision_tokens import encode_vision_tokens
from tools.demo_model.evaluate import (
    MAX_TOKENS,
    Answer,
    engine_answers,
    held_out_items,
    is_right,
    score,
)
from tools.demo_model.scenes import Item, make_item

REPO = Path(__file__).resolve().parents[2]
MODEL_DIR = REPO / "daemon" / "edgevlm" / "models" / "qwen3vl-demo"
HF_DIR = Path(__file__).parent / "fixtures" / "qwen3vl-demo"
HELD_OUT = 200
REQUIRED_ACCURACY = 0.90   # the bar, on the 200 held-out scenes
# Single-task checks on 20 items: chance is near 0 for "what moved?" and 50 % for "which
# image", and a pipeline bug (frame order, temporal patches, the second image's positions)
# drops them far below this; the model's own error rate on these tasks is 5-11 %.
SCENARIO_ACCURACY = 0.80
MAX_MODEL_BYTES = 16 * 2**20


def _report(capsys: pytest.CaptureFixture[str], line: str) -> None:
    with capsys.disabled():
        print(f"\n[demo model] {line}")


def _ask(engine: Engine, item: Item) -> Answer:
    result = engine.generate(item.edgevlm_messages(), max_tokens=MAX_TOKENS, temperature=0.0)
    return Answer(result.text, tuple(result.tokens), result.finish_reason == "stop")


def _task_items(task: str, count: int) -> list[Item]:
    """``count`` held-out-seed items of one task (indices past the 200 scored ones)."""
    from tools.demo_model.scenes import TEST_SEED

    return [make_item(TEST_SEED, 10_000 + i, task=task) for i in range(count)]


def _convert(out: Path, *flags: str) -> Path:
    """``edgevlm convert`` of the committed checkpoint into ``out`` with ``flags``."""
    pytest.importorskip("gguf")
    from edgevlm.convert.cli import main as convert_main

    assert convert_main([str(HF_DIR), "-o", str(out), *flags, "--quiet"]) == 0
    return out


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine.load(MODEL_DIR, threads=2, context=1024)


@pytest.fixture(scope="module")
def held_out() -> list[Item]:
    return held_out_items(HELD_OUT)


@pytest.fixture(scope="module")
def f32_answers(held_out: list[Item]) -> list[Answer]:
    return engine_answers(MODEL_DIR, held_out)


def test_demo_model_files_fit_in_16_mb() -> None:
    files = sorted(p.name for p in MODEL_DIR.glob("*.gguf"))
    assert files == ["mmproj.gguf", "model.gguf"]
    assert sum(p.stat().st_size for p in MODEL_DIR.glob("*.gguf")) <= MAX_MODEL_BYTES


def test_held_out_split_is_deterministic() -> None:
    a, b = held_out_items(3), held_out_items(3)
    for x, y in zip(a, b, strict=True):
        assert (x.task, x.prompt, x.answer) == (y.task, y.prompt, y.answer)
        assert [im.tobytes() for im in x.images] == [im.tobytes() for im in y.images]


def test_f32_answers_at_least_90_percent_of_held_out_scenes_exactly(
        held_out: list[Item], f32_answers: list[Answer],
        capsys: pytest.CaptureFixture[str]) -> None:
    result = score(held_out, f32_answers)
    _report(capsys, f"edgevlm F32, greedy, {HELD_OUT} held-out scenes: "
                    f"{result['accuracy']:.1%} exactly right; per task {result['per_task']}")
    assert result["accuracy"] >= REQUIRED_ACCURACY


@pytest.fixture(scope="module")
def q8_0_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _convert(tmp_path_factory.mktemp("demo") / "q8_0", "--type", "q8_0")


def test_q8_0_answers_at_least_90_percent_of_held_out_scenes_exactly(
        held_out: list[Item], q8_0_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = score(held_out, engine_answers(q8_0_dir, held_out))
    _report(capsys, f"edgevlm Q8_0, greedy, {HELD_OUT} held-out scenes: "
                    f"{result['accuracy']:.1%} exactly right; per task {result['per_task']}")
    assert result["accuracy"] >= REQUIRED_ACCURACY


@pytest.fixture(scope="module")
def q4_k_m_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _convert(tmp_path_factory.mktemp("demo") / "q4_k_m", "--type", "q4_k_m")


def test_q4_k_m_answers_the_held_out_scenes_within_2_points_of_f32(
        held_out: list[Item], f32_answers: list[Answer], q4_k_m_dir: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """llama.cpp's Q4_K_M mix on the demo model (issue 26). Its rows are 128 wide, so most
    matrices fall back as llama-quantize does (Q4_K -> Q5_0, Q6_K -> Q8_0); ffn_down's rows
    are 256 wide and keep real Q4_K and Q6_K blocks, which this checks are in the file."""
    from tests.gguf_read import read_gguf

    kinds = {t.tensor_type.name for t in read_gguf(q4_k_m_dir / "model.gguf").tensors.values()}
    assert {"Q4_K", "Q6_K"} <= kinds, kinds
    f32 = score(held_out, f32_answers)
    q4_k_m = score(held_out, engine_answers(q4_k_m_dir, held_out))
    _report(capsys, f"edgevlm Q4_K_M ({sorted(kinds)}), greedy, {HELD_OUT} held-out scenes: "
                    f"{q4_k_m['accuracy']:.1%} exactly right (F32 {f32['accuracy']:.1%}); "
                    f"per task {q4_k_m['per_task']}")
    assert q4_k_m["accuracy"] >= f32["accuracy"] - 0.02


# --vision-type K types (issue 26): the demo's vision tower is 128 wide with a 512-wide MLP, so
# attn_qkv, attn_out and ffn_up (rows of 128) fall back as llama-quantize does, while ffn_down,
# the merger and the DeepStack mergers (rows of 512) keep real K blocks.
VISION_K_TYPES = {"q4_k": ("Q4_K", "Q5_0"), "q6_k": ("Q6_K", "Q8_0")}


@pytest.mark.parametrize("vision_type", sorted(VISION_K_TYPES))
def test_vision_k_type_mmproj_answers_the_held_out_scenes_within_2_points_of_f32(
        held_out: list[Item], f32_answers: list[Answer], vision_type: str,
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The ViT runs K-type matrices: a Q8_0 model with a Q4_K (Q6_K) mmproj, whose 512-wide
    matrices are really stored in that K type, answers as well as F32 to within 2 points."""
    from tests.gguf_read import read_gguf

    _convert(tmp_path, "--type", "q8_0", "--vision-type", vision_type)
    k_type, fallback = VISION_K_TYPES[vision_type]
    mmproj = read_gguf(tmp_path / "mmproj.gguf").tensors
    kinds = {name: t.tensor_type.name for name, t in mmproj.items()}
    assert kinds["v.blk.0.ffn_down.weight"] == kinds["mm.0.weight"] == k_type
    assert kinds["v.blk.0.attn_qkv.weight"] == kinds["v.blk.0.ffn_up.weight"] == fallback
    assert kinds["v.patch_embd.weight"] == kinds["v.position_embd.weight"] == "F32"
    f32 = score(held_out, f32_answers)
    got = score(held_out, engine_answers(tmp_path, held_out))
    _report(capsys, f"edgevlm Q8_0 + {k_type} mmproj ({sorted(set(kinds.values()))}), greedy, "
                    f"{HELD_OUT} held-out scenes: {got['accuracy']:.1%} exactly right "
                    f"(F32 {f32['accuracy']:.1%}); per task {got['per_task']}")
    assert got["accuracy"] >= f32["accuracy"] - 0.02


def test_committed_gguf_is_the_f32_conversion_of_the_committed_checkpoint(
        tmp_path: Path) -> None:
    _convert(tmp_path, "--type", "f32")
    for name in ("model.gguf", "mmproj.gguf"):
        fresh = hashlib.sha256((tmp_path / name).read_bytes()).hexdigest()
        committed = hashlib.sha256((MODEL_DIR / name).read_bytes()).hexdigest()
        assert fresh == committed, f"{name} is not what edgevlm convert makes of {HF_DIR}"


# --------------------------------------------------------------------------- serving paths


@pytest.fixture
def cached_engine() -> Iterator[Engine]:
    engine = Engine.load(MODEL_DIR, threads=2, context=1024, cache=VisionCache(64 * 2**20))
    yield engine


def test_same_image_again_is_a_cache_hit_with_the_same_answer_and_no_vit_run(
        cached_engine: Engine) -> None:
    items = _task_items("caption", 6)
    right = 0
    for item in items:
        first = cached_engine.generate(item.edgevlm_messages(), max_tokens=MAX_TOKENS,
                                       temperature=0.0)
        again = cached_engine.generate(item.edgevlm_messages(), max_tokens=MAX_TOKENS,
                                       temperature=0.0)
        assert [hit for hit, _ in first.cache] == [False]
        assert [hit for hit, _ in again.cache] == [True]
        assert again.cache[0][1] == first.cache[0][1]
        assert first.metrics["encode_ms"] > 0 and again.metrics["encode_ms"] == 0
        assert again.tokens == first.tokens
        right += first.text == item.answer
    assert right >= len(items) - 1


def test_vision_tokens_of_an_image_give_the_same_answer_as_the_image(engine: Engine) -> None:
    items = _task_items("caption", 4) + _task_items("what_at", 4)
    right = 0
    for item in items:
        (image,) = item.images
        direct = _ask(engine, item)
        payload = encode_vision_tokens(engine.encode_image(image))
        via_tokens = engine.generate(
            [{"role": "user", "content": [{"type": "vision_tokens", "vision_tokens": payload},
                                          {"type": "text", "text": item.prompt}]}],
            max_tokens=MAX_TOKENS, temperature=0.0)
        assert tuple(via_tokens.tokens) == direct.tokens
        assert via_tokens.metrics["encode_ms"] == 0
        right += is_right(item, direct)
    assert right >= len(items) - 1


def test_two_images_in_one_prompt_which_has_the_object(
        engine: Engine, capsys: pytest.CaptureFixture[str]) -> None:
    items = _task_items("which_has", 20)
    answers = [_ask(engine, item) for item in items]
    result = score(items, answers)
    _report(capsys, f"two images: {result['right']}/{result['items']} right")
    assert result["accuracy"] >= SCENARIO_ACCURACY
    # the answer depends on the order: swapping the images flips it
    item = next(i for i, a in zip(items, answers, strict=True) if is_right(i, a))
    swapped = Item(item.task, item.media, item.images[::-1], item.prompt,
                   "second" if item.answer == "first" else "first", item.scenes[::-1])
    assert is_right(swapped, _ask(engine, swapped))


def test_video_of_frames_says_what_moved(engine: Engine,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    items = _task_items("moved", 20)
    result = score(items, [_ask(engine, item) for item in items])
    _report(capsys, f"4-frame clips, 'What moved?': {result['right']}/{result['items']} right")
    assert result["accuracy"] >= SCENARIO_ACCURACY


# --------------------------------------------------------------------------- reference


@pytest.mark.reference
def test_f32_greedy_tokens_are_transformers_greedy_tokens(
        held_out: list[Item], f32_answers: list[Answer],
        capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tools.demo_model.evaluate import transformers_answers

    reference = transformers_answers(HF_DIR, held_out)
    same = sum(a.tokens == b.tokens and a.stopped == b.stopped
               for a, b in zip(f32_answers, reference, strict=True))
    result = score(held_out, reference)
    _report(capsys, f"transformers F32, greedy: {result['accuracy']:.1%} exactly right; "
                    f"edgevlm F32 token-for-token identical on {same}/{HELD_OUT}")
    assert same == HELD_OUT
