"""Token budget preflight: sizes from headers only, every item counted, refusals before decode."""

from __future__ import annotations

import base64
import json
from typing import Any
from unittest import mock

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from edgevlm.engine.families.qwen3vl import render_chat, render_segments
from edgevlm.pipeline.admission import RequestSide, admit
from edgevlm.pipeline.cache import VisionCache
from edgevlm.pipeline.limits import MMLimits, RequestLimits
from edgevlm.pipeline.preflight import HEADER_PREFIX_CHARS, PreflightContext, header_of, preflight
from edgevlm.tokenizer import QWEN_SPECIAL_TOKENS, ByteCountTokenizer, HFTokenizer
from edgevlm.vision.decode import MediaPolicy
from edgevlm.vision.sizing import get_family
from edgevlm.wire import strict_base64
from edgevlm.wire.errors import CacheMiss, ContextLengthExceeded, EdgevlmError, UnsupportedMedia
from edgevlm.wire.features import VisionFeatures
from edgevlm.wire.protocol import parse_request
from tests.helpers import data_url, image, image_bytes, text, user_request

QWEN3 = get_family("qwen3-vl")


def ctx(**kw: Any) -> PreflightContext:
    base: dict[str, Any] = {"family": QWEN3, "context_length": 100_000,
                            "tokenizer": ByteCountTokenizer(), "chat_template": render_segments}
    return PreflightContext(**{**base, **kw})


def small_bpe() -> HFTokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=list(QWEN_SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["who is at the door? describe the car on the left"] * 20, trainer)
    return HFTokenizer(tok)


@pytest.mark.parametrize(("width", "height", "tokens"), [
    (100, 100, 64), (640, 480, 300), (1280, 720, 880), (1080, 1920, 2040)])
def test_image_tokens_come_from_the_header_through_smart_resize(width: int, height: int,
                                                                tokens: int) -> None:
    req = parse_request(user_request(image(image_bytes(width, height)), text("hi")))
    budget = preflight(req, ctx())
    assert budget.items[0].tokens == tokens + 2
    assert budget.vision_tokens == tokens + 2


def test_text_is_counted_by_the_model_tokenizer_on_the_chat_rendering() -> None:
    tok = small_bpe()
    req = parse_request(user_request(image(image_bytes(64, 64)), text("who is at the door?")))
    budget = preflight(req, ctx(tokenizer=tok))
    rendered = render_chat(req.messages)
    assert budget.text_tokens == len(tok.encode(rendered)) - 3
    assert budget.prompt_tokens == budget.text_tokens + 66


def test_pixels_are_not_decoded(monkeypatch: pytest.MonkeyPatch) -> None:
    import PIL.ImageFile

    req = parse_request(user_request(image(image_bytes(1920, 1080)), text("x")))
    with mock.patch.object(PIL.ImageFile.ImageFile, "load",
                           side_effect=AssertionError("decoded")):
        preflight(req, ctx())


def test_header_is_read_from_a_base64_prefix_of_big_files() -> None:
    jpeg = image_bytes(1920, 1080, quality=95)
    url = data_url(jpeg)
    assert len(url) > HEADER_PREFIX_CHARS
    with mock.patch("edgevlm.pipeline.preflight.strict_base64.decode",
                    wraps=strict_base64.decode) as dec:
        header = header_of(url, MediaPolicy(), "p")
    assert (header.width, header.height) == (1920, 1080)
    assert all(len(call.args[0]) <= HEADER_PREFIX_CHARS for call in dec.call_args_list)


def test_pixel_caps_from_config_option_and_request() -> None:
    jpeg = image(image_bytes(1920, 1080))
    budget = preflight(parse_request(user_request(jpeg)), ctx(max_pixels=1_003_520))
    assert budget.items[0].detail["tokens"] == 943          # spec table: 736x1312
    limits = MMLimits.parse({"image": {"max_pixels": 262_144}})
    capped = preflight(parse_request(user_request(jpeg)), ctx(max_pixels=1_003_520, mm=limits))
    assert capped.items[0].detail["tokens"] <= 256
    asked = preflight(parse_request(user_request(jpeg, mm_processor_kwargs={
        "max_pixels": 16_777_216})), ctx(max_pixels=1_003_520))
    assert asked.items[0].detail["tokens"] == 943          # a request cannot raise the cap


def test_video_counts_groups_timestamps_and_markers() -> None:
    frames = [data_url(image_bytes(320, 240, seed=i)) for i in range(5)]
    req = parse_request(user_request({"type": "video_frames", "video_frames": frames,
                                      "fps": 2}))
    item = preflight(req, ctx()).items[0]
    assert item.detail["timestamps"] == ["<0.2 seconds>", "<1.2 seconds>", "<2.0 seconds>"]
    t, gh, gw = item.detail["grid"]
    per_group = gh * gw // 4
    ts_tokens = sum(ByteCountTokenizer().count(ts) for ts in item.detail["timestamps"])
    assert item.tokens == t * per_group + 2 * t + ts_tokens  # a marker pair per group


def test_frames_of_different_sizes_are_refused_before_decoding() -> None:
    frames = [data_url(image_bytes(320, 240)), data_url(image_bytes(240, 320))]
    req = parse_request(user_request({"type": "video_frames", "video_frames": frames}))
    with pytest.raises(UnsupportedMedia, match=r"messages.0.content.0.video_frames.1: frame is "
                       r"240x320, frame 0 is 320x240; all frames of a video must have the "
                       r"same size"):
        preflight(req, ctx())


def test_vision_tokens_and_image_ref_cost_their_grid() -> None:
    cache = VisionCache(1 << 20)
    feats = VisionFeatures(__import__("numpy").zeros((6, 4), dtype="float32"), None, (1, 2, 3))
    cache.put("ab" * 16, feats)
    vt = {"type": "vision_tokens", "vision_tokens": {"grid": [1, 3, 4], "tokens_b64": ""}}
    req = parse_request(user_request(vt, {"type": "image_ref", "image_ref": "ab" * 16}))
    budget = preflight(req, ctx(ref_tokens=lambda k: (f := cache.peek(k)) and f.n_tokens))
    assert [i.tokens for i in budget.items] == [14, 8]
    assert cache.stats().hits == 0  # a budget is not a use
    with pytest.raises(CacheMiss):
        preflight(parse_request(user_request({"type": "image_ref", "image_ref": "cd" * 16})),
                  ctx(ref_tokens=lambda k: None))


def test_over_the_context_is_refused_with_every_number() -> None:
    req = parse_request(user_request(image(image_bytes(3333, 2500)), text("describe"),
                                     max_tokens=100))
    with pytest.raises(ContextLengthExceeded) as info:
        preflight(req, ctx(context_length=8000, max_pixels=None))
    assert info.value.message.startswith(
        "prompt is 8141 tokens (text 27, vision 8114: messages.0.content.0 8114) + max_tokens "
        "100 = 8241, the context is 8000 (model.context)")


def test_budget_serialises_to_json() -> None:
    req = parse_request(user_request(image(image_bytes(100, 100)), text("hi")))
    out = json.loads(json.dumps(preflight(req, ctx()).to_json()))
    assert out["items"][0]["resized_width"] == 256 and out["items"][0]["tokens"] == 66


# ------------------------------------------------- vision_tokens structure before the budget

D, K = 8, 3  # the board's model: LLM hidden size, DeepStack layers


def admit_side(**kw: Any) -> RequestSide:
    """The request side as the daemon builds it, with a context a 4096-token grid overflows."""
    return RequestSide(RequestLimits(), ctx(**{"context_length": 1024, "hidden_size": D,
                                               "deepstack_layers": K, **kw}))


def vt_part(grid: list[int], nbytes: int, **extra: Any) -> dict[str, Any]:
    return {"type": "vision_tokens", "vision_tokens": {
        "grid": grid, "tokens_b64": base64.b64encode(b"\0" * nbytes).decode(), **extra}}


def refusal(part: dict[str, Any], side: RequestSide | None = None) -> tuple[str, str]:
    """(type, message) of the refusal admission answers ``part`` with."""
    raw = json.dumps(user_request(part, text("what is this?"), max_tokens=16)).encode()
    with pytest.raises(EdgevlmError) as info:
        admit(raw, side or admit_side())
    return info.value.type, info.value.message


@pytest.mark.parametrize("side", [None, RequestSide(RequestLimits(),
                                                    ctx(context_length=1024))],
                         ids=["model-known", "model-unknown"])
def test_a_grid_over_the_protocol_limit_is_invalid_not_over_the_context(
        side: RequestSide | None) -> None:
    # 8,192 merged tokens: malformed whatever the model's context
    assert refusal(vt_part([2, 64, 64], 64), side) == (
        "invalid_vision_tokens",
        "vision_tokens.grid: expected at most 4096 vision tokens, got n = 2×64×64 = 8192")


def test_a_grid_entry_below_one_is_invalid_before_the_budget() -> None:
    assert refusal(vt_part([0, 64, 64], 64)) == (
        "invalid_vision_tokens",
        "vision_tokens.grid: every entry of [gt, gh, gw] must be >= 1, got [0, 64, 64]")


def test_a_wrong_deepstack_count_is_invalid_before_the_budget() -> None:
    n = 64 * 64
    part = vt_part([1, 64, 64], n * D * 4)
    part["vision_tokens"]["ds_b64"] = [part["vision_tokens"]["tokens_b64"]] * 2
    assert refusal(part) == (
        "invalid_vision_tokens",
        "vision_tokens.ds_b64: expected 3 entries (the model's DeepStack layers) or none, got 2")


@pytest.mark.parametrize(("extra", "nbytes", "message"), [
    ({}, 64, "vision_tokens.tokens_b64: expected 131072 bytes (n=4096 × d=8 × 4 bytes f32), "
             "got 64"),
    ({"dtype": "f16"}, 131072, "vision_tokens.tokens_b64: expected 65536 bytes (n=4096 × d=8 × "
                               "2 bytes f16), got 131072"),
    ({"layout": "packed"}, 131072, "vision_tokens.tokens_b64: expected 524288 bytes (n=4096 × "
                                   "d=8 × (1+k=3) × 4 bytes f32, layout packed), got 131072"),
])
def test_wrong_byte_counts_are_invalid_before_the_budget_without_decoding(
        extra: dict[str, Any], nbytes: int, message: str, decoded_lengths: list[int]) -> None:
    assert refusal(vt_part([1, 64, 64], nbytes, **extra)) == ("invalid_vision_tokens", message)
    assert max(decoded_lengths, default=0) <= 8  # at most the base64 tail was looked at


def test_a_wrong_deepstack_entry_size_is_invalid_before_the_budget(
        decoded_lengths: list[int]) -> None:
    n = 64 * 64
    part = vt_part([1, 64, 64], n * D * 4)
    good = part["vision_tokens"]["tokens_b64"]
    short = base64.b64encode(b"\0" * (n * D * 4 - 4)).decode()
    part["vision_tokens"]["ds_b64"] = [good, short, good]
    assert refusal(part) == (
        "invalid_vision_tokens",
        "vision_tokens.ds_b64[1]: expected 131072 bytes (n=4096 × d=8 × 4 bytes f32), got 131068")
    assert max(decoded_lengths, default=0) <= 8


def test_well_formed_vision_tokens_over_the_context_are_still_context_length_exceeded(
        decoded_lengths: list[int]) -> None:
    n = 64 * 64
    part = vt_part([1, 64, 64], n * D * 4)
    part["vision_tokens"]["ds_b64"] = [part["vision_tokens"]["tokens_b64"]] * K
    kind, message = refusal(part)
    assert kind == "context_length_exceeded"
    assert "vision 4098: messages.0.content.0 4098" in message
    assert max(decoded_lengths, default=0) <= 8


def test_well_formed_vision_tokens_are_admitted_with_their_grid_cost() -> None:
    part = vt_part([1, 2, 2], 4 * D * 4)
    raw = json.dumps(user_request(part, text("hi"), max_tokens=16)).encode()
    admitted = admit(raw, admit_side())
    assert admitted.budget.items[0].tokens == 6
