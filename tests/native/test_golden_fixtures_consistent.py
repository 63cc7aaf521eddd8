"""The golden fixtures agree with themselves, with the tiny checkpoints and with the spec.

``tests/fixtures/models`` (``tools/make_tiny_models.py``) and ``tests/fixtures/golden``
(``tools/make_golden_fixtures.py``) are what the native core's parity tests load. These checks
need no torch: every array has the shape the config and the grids give it, the prompt tokens
are the chat-template prompt with each placeholder expanded as transformers 5.x does, the
positions follow the 3-axis rule of spec §7 (re-derived here), the greedy tokens are the argmax
of their logits, and the whole set fits the size budget. ``test_golden_regenerate.py`` proves
the files come from the scripts.
"""

from __future__ import annotations

import base64
import functools
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from PIL import Image
from tokenizers import Tokenizer

from edgevlm.engine.families.qwen3vl import render_chat
from edgevlm.vision.sizing import smart_resize, video_smart_resize
from edgevlm.wire.protocol import Message

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "tests" / "fixtures" / "models"
GOLDEN = ROOT / "tests" / "fixtures" / "golden"
MANIFEST: dict[str, Any] = json.loads((GOLDEN / "manifest.json").read_text(encoding="utf-8"))
CASE_NAMES = {"image", "two_images", "video", "text"}
SIZE_BUDGET = 12_000_000  # bytes, models + golden together
CHECKPOINT_BUDGET = 2_600_000  # bytes per model directory
IMAGE_PAD, VIDEO_PAD = "<|image_pad|>", "<|video_pad|>"
VISION_START, VISION_END = "<|vision_start|>", "<|vision_end|>"

Array = npt.NDArray[Any]
PAIRS = [(m, c) for m, entry in MANIFEST["models"].items() for c in entry["cases"]]


@functools.cache
def arrays(model: str, case: str) -> dict[str, Array]:
    with np.load(GOLDEN / MANIFEST["models"][model]["cases"][case]["file"]) as npz:
        return {k: npz[k] for k in npz.files}


@functools.cache
def tokenizer(model: str) -> Tokenizer:
    return Tokenizer.from_file(str(MODELS / model / "tokenizer.json"))


def config(model: str) -> dict[str, Any]:
    cfg: dict[str, Any] = MANIFEST["models"][model]["config"]
    return cfg


def grids(a: dict[str, Array], key: str) -> list[list[int]]:
    """``image_grid_thw`` / ``video_grid_thw`` rows, [] when the case has none."""
    return a[key].tolist() if key in a else []


def items(meta: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [item for m in meta["messages"] if isinstance(m["content"], list)
            for item in m["content"] if item["type"] == kind]


@pytest.fixture(params=PAIRS, ids=[f"{m}/{c}" for m, c in PAIRS])
def case(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any], dict[str, Array]]:
    model, name = request.param
    return model, MANIFEST["models"][model]["cases"][name], arrays(model, name)


# --------------------------------------------------------------------------- the set as a whole


def test_manifest_lists_every_checkpoint_with_all_four_cases_and_their_arrays() -> None:
    on_disk = {p.name for p in MODELS.iterdir() if (p / "config.json").is_file()}
    assert set(MANIFEST["models"]) == on_disk
    assert len(on_disk) >= 3
    for model, entry in MANIFEST["models"].items():
        assert set(entry["cases"]) == CASE_NAMES, model
        assert entry["config"] == json.loads((MODELS / model / "config.json").read_text())
        for name, meta in entry["cases"].items():
            got = {k: {"shape": list(v.shape), "dtype": str(v.dtype)}
                   for k, v in arrays(model, name).items()}
            assert got == meta["arrays"], f"{model}/{name}"


def test_tiny_models_differ_in_every_dimension_a_kernel_could_hard_code() -> None:
    texts = [config(m)["text_config"] for m in MANIFEST["models"]]
    visions = [config(m)["vision_config"] for m in MANIFEST["models"]]
    ratios = {t["num_attention_heads"] // t["num_key_value_heads"] for t in texts}
    assert {1, 2, 6} <= ratios
    assert {t["head_dim"] for t in texts} == {16, 32}
    for t in texts:
        scaling = t["rope_scaling"]  # the legacy layout of the official files
        assert sum(scaling["mrope_section"]) * 2 == t["head_dim"] and scaling["mrope_interleaved"]
        assert "rope_theta" in t and "rope_parameters" not in t
    assert {len(v["deepstack_visual_indexes"]) for v in visions} == {1, 2, 3}
    assert len({tuple(v["deepstack_visual_indexes"]) for v in visions}) == len(visions)
    assert {config(m)["tie_word_embeddings"] for m in MANIFEST["models"]} == {True, False}
    assert len({(v["depth"], v["hidden_size"], v["num_heads"]) for v in visions}) == len(visions)
    positions = [v["num_position_embeddings"] for v in visions]
    assert 2304 in positions and all(math.isqrt(n) ** 2 == n for n in positions)
    assert all(v["model_type"] == "qwen3_vl" for v in visions)
    padding = [config(m)["text_config"]["vocab_size"] - tokenizer(m).get_vocab_size()
               for m in MANIFEST["models"]]
    assert min(padding) == 0 and max(padding) > 0


def test_token_ids_in_the_config_are_the_tokenizer_ids() -> None:
    for model in MANIFEST["models"]:
        cfg, tok = config(model), tokenizer(model)
        assert cfg["image_token_id"] == tok.token_to_id(IMAGE_PAD)
        assert cfg["video_token_id"] == tok.token_to_id(VIDEO_PAD)
        assert cfg["vision_start_token_id"] == tok.token_to_id(VISION_START)
        assert cfg["vision_end_token_id"] == tok.token_to_id(VISION_END)
        assert cfg["text_config"]["eos_token_id"] == tok.token_to_id("<|im_end|>")
        assert cfg["text_config"]["bos_token_id"] == tok.token_to_id("<|endoftext|>")


def test_committed_fixtures_fit_the_size_budget() -> None:
    def size(path: Path) -> int:
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())

    assert size(MODELS) + size(GOLDEN) <= SIZE_BUDGET
    for model in MANIFEST["models"]:
        assert size(MODELS / model) <= CHECKPOINT_BUDGET, model


# --------------------------------------------------------------------------- one case


def expanded_prompt(model: str, meta: dict[str, Any], a: dict[str, Array]) -> str:
    """The chat-template prompt with placeholders expanded the transformers >= 5.25 way (§5,
    §6): an image pad becomes its pads; a video's whole ``<|vision_start|><|video_pad|>
    <|vision_end|>`` becomes, per temporal group, ``<t seconds><|vision_start|>pads
    <|vision_end|>`` (no outer pair; ``processing_qwen3_vl.py: get_text_with_replacements``)."""
    merge = config(model)["vision_config"]["spatial_merge_size"] ** 2
    images = iter(grids(a, "image_grid_thw"))
    videos = iter(zip(grids(a, "video_grid_thw"), meta.get("video_timestamps", []), strict=True))
    out = []
    for i, piece in enumerate(meta["prompt"].split(IMAGE_PAD)):
        if i:
            out.append(IMAGE_PAD * (math.prod(next(images)) // merge))
        for j, part in enumerate(piece.split(VISION_START + VIDEO_PAD + VISION_END)):
            if j:
                (t, h, w), stamps = next(videos)
                assert len(stamps) == t
                out.append("".join(f"<{ts:.1f} seconds>{VISION_START}"
                                   f"{VIDEO_PAD * (h * w // merge)}{VISION_END}" for ts in stamps))
            out.append(part)
    return "".join(out)


def test_input_ids_are_the_prompt_with_each_placeholder_expanded(case: Any) -> None:
    model, meta, a = case
    text = expanded_prompt(model, meta, a)
    assert text == meta["prompt_expanded"]
    assert tokenizer(model).encode(text).ids == a["input_ids"].tolist()
    assert a["input_ids"].dtype == np.int32 and a["input_ids"].shape == (meta["prompt_tokens"],)


def test_video_timestamps_are_group_means_of_the_frame_times(case: Any) -> None:
    _, meta, _ = case
    for indices, stamps, item in zip(meta.get("video_frames_indices", []),
                                     meta.get("video_timestamps", []), items(meta, "video"),
                                     strict=True):
        assert indices == list(range(len(item["video"])))  # fps 2 frames at fps 2: all kept
        padded = indices + indices[-1:] * (len(indices) % 2)
        want = [(padded[g] + padded[g + 1]) / 2 / item["fps"] for g in range(0, len(padded), 2)]
        assert stamps == want


def test_mm_token_type_ids_mark_exactly_the_image_and_video_pads(case: Any) -> None:
    model, _, a = case
    ids = a["input_ids"]
    want = np.where(ids == config(model)["image_token_id"], 1,
                    np.where(ids == config(model)["video_token_id"], 2, 0))
    np.testing.assert_array_equal(a["mm_token_type_ids"], want)


def test_vision_arrays_have_the_shapes_the_grids_and_config_give(case: Any) -> None:
    model, meta, a = case
    vision, text = config(model)["vision_config"], config(model)["text_config"]
    merge = vision["spatial_merge_size"] ** 2
    patch_dim = vision["in_channels"] * vision["temporal_patch_size"] * vision["patch_size"] ** 2
    taps = len(vision["deepstack_visual_indexes"])
    for kind, pixels, grid_key, pad_type in (("image", "pixel_values", "image_grid_thw", 1),
                                            ("video", "pixel_values_videos", "video_grid_thw", 2)):
        item_grids = grids(a, grid_key)
        assert len(item_grids) == len(items(meta, kind))
        if not item_grids:
            assert pixels not in a and f"{kind}0_embeds" not in a
            continue
        assert a[pixels].shape == (sum(math.prod(g) for g in item_grids), patch_dim)
        for k, (t, h, w) in enumerate(item_grids):
            n = t * h * w
            assert h % 2 == 0 and w % 2 == 0 and (kind == "video" or t == 1)
            assert a[f"{kind}{k}_vit_hidden"].shape == (n, vision["hidden_size"])
            assert a[f"{kind}{k}_embeds"].shape == (n // merge, text["hidden_size"])
            assert a[f"{kind}{k}_deepstack"].shape == (taps, n // merge, text["hidden_size"])
        pads = int((a["mm_token_type_ids"] == pad_type).sum())
        assert pads == sum(math.prod(g) // merge for g in item_grids) == meta[f"{kind}_tokens"]


def test_grids_are_smart_resize_of_the_pngs_under_the_model_bounds(case: Any) -> None:
    model, meta, a = case
    entry, vision = MANIFEST["models"][model], config(model)["vision_config"]
    patch, temporal = vision["patch_size"], vision["temporal_patch_size"]
    factor = patch * vision["spatial_merge_size"]
    for k, item in enumerate(items(meta, "image")):
        width, height = Image.open(GOLDEN / item["image"]).size
        size = entry["image_size"]
        h, w = smart_resize(height, width, factor, size["shortest_edge"], size["longest_edge"])
        assert a["image_grid_thw"][k].tolist() == [1, h // patch, w // patch]
    for k, item in enumerate(items(meta, "video")):
        width, height = Image.open(GOLDEN / item["video"][0]).size
        size, frames = entry["video_size"], len(item["video"])
        h, w = video_smart_resize(frames, height, width, temporal, factor,
                                  size["shortest_edge"], size["longest_edge"])
        assert (h, w) == (height, width)  # the golden script needs unresized frames
        assert a["video_grid_thw"][k].tolist() == [-(-frames // temporal), h // patch, w // patch]


def rope_index(types: Array, image_grids: list[list[int]], video_grids: list[list[int]],
               merge: int) -> tuple[Array, int]:
    """Spec §7, written from the spec: 3-axis positions and the rope delta."""
    runs = {1: iter(image_grids), 2: iter([[1, h, w] for t, h, w in video_grids
                                           for _ in range(t)])}
    out, pos, i = [], 0, 0
    while i < len(types):
        j = i
        while j < len(types) and types[j] == types[i]:
            j += 1
        if types[i] == 0:
            out += [[pos + n] * 3 for n in range(j - i)]
            pos += j - i
        else:  # one run per image / per video temporal group
            _, gh, gw = next(runs[int(types[i])])
            gh, gw = gh // merge, gw // merge
            assert j - i >= gh * gw
            j = i + gh * gw
            out += [[pos, pos + r, pos + c] for r in range(gh) for c in range(gw)]
            pos += max(gh, gw)
        i = j
    positions = np.array(out, dtype=np.int64).T
    return positions, int(positions.max()) + 1 - len(types)


def test_position_ids_follow_the_3d_rope_rule_and_decode_uses_the_delta(case: Any) -> None:
    model, meta, a = case
    merge = config(model)["vision_config"]["spatial_merge_size"]
    want, delta = rope_index(a["mm_token_type_ids"], grids(a, "image_grid_thw"),
                             grids(a, "video_grid_thw"), merge)
    assert a["position_ids"].dtype == np.int32
    np.testing.assert_array_equal(a["position_ids"], want)
    assert int(a["rope_delta"]) == delta == meta["rope_delta"]
    assert (delta < 0) == ("pixel_values" in a or "pixel_values_videos" in a)
    length = len(a["input_ids"])
    np.testing.assert_array_equal(a["decode_positions"], length + np.arange(8) + delta)


def test_logits_cover_every_position_and_greedy_tokens_are_their_argmax(case: Any) -> None:
    model, meta, a = case
    vocab, used = config(model)["text_config"]["vocab_size"], tokenizer(model).get_vocab_size()
    logits, decode = a["prompt_logits"], a["decode_logits"]
    assert logits.shape == (len(a["input_ids"]), vocab) and logits.dtype == np.float32
    assert decode.shape == (8, vocab) and a["generated_ids"].shape == (8,)
    assert np.isfinite(logits).all() and np.isfinite(decode).all()
    np.testing.assert_array_equal(a["generated_ids"], decode.argmax(-1))
    assert a["generated_ids"].max() < used
    # Row 0 of the decode is the prefill's last row (computed by generate, with the cache).
    scale = float(np.abs(logits).max())
    assert float(np.abs(decode[0] - logits[-1]).max()) <= 1e-5 * scale
    assert meta["max_abs_logit"] == pytest.approx(scale, rel=1e-6)
    assert not logits[:, used:].any()  # zero embedding rows past the tokenizer


def test_render_chat_reproduces_the_checkpoint_chat_template(case: Any) -> None:
    _, meta, _ = case

    def media(path: str) -> dict[str, str]:
        return {"b64": base64.b64encode((GOLDEN / path).read_bytes()).decode(),
                "mime": "image/png"}

    def part(item: dict[str, Any]) -> dict[str, Any]:
        if item["type"] == "image":
            return {"type": "image", "image": media(item["image"])}
        if item["type"] == "video":
            return {"type": "video_frames", "fps": item["fps"],
                    "video_frames": [media(f) for f in item["video"]]}
        return item

    messages = [Message.model_validate(
        {"role": m["role"], "content": m["content"] if isinstance(m["content"], str)
         else [part(i) for i in m["content"]]}) for m in meta["messages"]]
    assert render_chat(messages) == meta["prompt"]
