"""One test per wire error type, through the real request side, with the exact message shape.

busy and deadline_exceeded are raised by the daemon's queue; here their wire form is checked.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
import pytest

from edgevlm.engine.families.qwen3vl import render_segments as qwen3vl_chat
from edgevlm.pipeline.admission import RequestSide, admit
from edgevlm.pipeline.cache import VisionCache
from edgevlm.pipeline.limits import MMLimits, RequestLimits
from edgevlm.pipeline.preflight import PreflightContext
from edgevlm.pipeline.run import prepare_media
from edgevlm.tokenizer import ByteCountTokenizer
from edgevlm.vision.prepare import ModelFacts
from edgevlm.vision.sizing import get_family
from edgevlm.wire.errors import ERROR_TYPES, Busy, DeadlineExceeded, EdgevlmError, wire_error
from tests.helpers import image, image_bytes, text, user_request

FACTS = ModelFacts("test-model", hidden_size=8, deepstack_layers=2)


def side(**limits: Any) -> RequestSide:
    ctx = PreflightContext(family=get_family("qwen3-vl"), context_length=1024,
                           chat_template=qwen3vl_chat,
                           tokenizer=ByteCountTokenizer(), mm=MMLimits.parse({"image": 2}),
                           max_pixels=200_000)
    return RequestSide(RequestLimits(mm=MMLimits.parse({"image": 2}), **limits), ctx)


def run(payload: dict[str, Any] | bytes, **limits: Any) -> tuple[int, str, str]:
    """The (code, type, message) a client would get, or ('ok') when it runs."""
    raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    s = side(**limits)
    try:
        admitted = admit(raw, s)
        prepare_media(admitted, FACTS, s.preflight, VisionCache(1 << 20))
    except Exception as exc:
        err = wire_error(exc)
        return err.code, err.type, err.message
    return 200, "ok", ""


def vt(n_floats: int, grid: list[int]) -> dict[str, Any]:
    data = np.zeros(n_floats, dtype="<f4").tobytes()
    return {"type": "vision_tokens", "vision_tokens": {
        "grid": grid, "tokens_b64": base64.b64encode(data).decode()}}


def test_a_good_request_runs() -> None:
    assert run(user_request(image(image_bytes(64, 48)), text("hi"))) == (200, "ok", "")


def test_invalid_request() -> None:
    assert run(b"\x00not json")[:2] == (400, "invalid_request")
    code, kind, message = run({"messages": [{"role": "user", "content": [{"type": "gif"}]}]})
    assert (code, kind) == (400, "invalid_request")
    assert message.startswith("messages.0.content.0: unknown content part type; use one of text,")


def test_mm_limit_exceeded() -> None:
    jpeg = image(image_bytes(32, 32))
    assert run(user_request(jpeg, jpeg, jpeg)) == (
        400, "mm_limit_exceeded", "3 image items in the request, the limit is 2 "
        "(limits.limit_mm_per_prompt.image); send at most 2")


def test_unsupported_modality() -> None:
    assert run(user_request({"type": "audio", "audio": "x"})) == (
        400, "unsupported_modality",
        "messages.0.content.0: audio is not supported by this model; remove the audio part")


def test_invalid_vision_tokens() -> None:
    assert run(user_request(vt(4 * 8 - 1, [1, 2, 2]))) == (
        400, "invalid_vision_tokens",
        "vision_tokens.tokens_b64: expected 128 bytes (n=4 × d=8 × 4 bytes f32), got 124")


def test_payload_too_large() -> None:
    payload = json.dumps(user_request(text("x" * 200))).encode()
    assert run(payload, max_payload_bytes=100) == (
        413, "payload_too_large", f"request is {len(payload)} bytes, the limit is 100 "
        "(limits.max_payload_bytes); send smaller images or fewer of them")


def test_unsupported_media() -> None:
    gif = image(image_bytes(16, 16, "GIF"), "image/gif")
    assert run(user_request(gif)) == (
        400, "unsupported_media", "messages.0.content.0: GIF is not allowed; send JPEG, PNG, "
        "WEBP or BMP (media.formats)")
    jpeg = image_bytes(640, 480)
    code, kind, message = run(user_request(image(jpeg[: len(jpeg) // 2])))
    assert (code, kind) == (400, "unsupported_media")
    assert message.startswith("messages.0.content.0: JPEG image data is corrupt or truncated")


def test_context_length_exceeded() -> None:
    code, kind, message = run(user_request(image(image_bytes(640, 480)), text("hi"),
                                           max_tokens=900))
    assert (code, kind) == (400, "context_length_exceeded")
    # text: 6 special tokens + 18 bytes - 3 placeholder tokens; image: 640x480 capped at
    # 200,000 pixels -> 512x384 -> 16x12 = 192 tokens + 2 markers
    assert message == ("prompt is 215 tokens (text 21, vision 194: messages.0.content.0 194) + "
                       "max_tokens 900 = 1115, the context is 1024 (model.context); send smaller "
                       "images (mm_processor_kwargs.max_pixels), fewer items, or a lower "
                       "max_tokens")


def test_cache_miss() -> None:
    assert run(user_request({"type": "image_ref", "image_ref": "ab" * 16})) == (
        404, "cache_miss", f"messages.0.content.0: image_ref {'ab' * 16} is not in the vision "
        "cache (evicted or never stored); send the image bytes again")


@pytest.mark.parametrize(("exc", "code", "kind"), [
    (Busy("queue is full (8 waiting); retry later"), 503, "busy"),
    (DeadlineExceeded("deadline passed 12 ms before the work could start"), 504,
     "deadline_exceeded"),
])
def test_busy_and_deadline_wire_form(exc: EdgevlmError, code: int, kind: str) -> None:
    err = wire_error(exc)
    assert (err.code, err.type, err.message) == (code, kind, exc.message)


def test_internal_hides_the_exception_text() -> None:
    err = wire_error(KeyError("secret/path/on/the/board"))
    assert (err.code, err.type) == (500, "internal")
    assert "secret" not in err.message and err.message == (
        "internal error (KeyError); see the daemon log")


def test_every_error_type_is_covered_here() -> None:
    assert {t.type for t in ERROR_TYPES} == {
        "invalid_request", "mm_limit_exceeded", "unsupported_modality", "invalid_vision_tokens",
        "payload_too_large", "unsupported_media", "context_length_exceeded", "cache_miss",
        "id_reused", "busy", "deadline_exceeded", "internal"}


def _refused(payload: dict[str, Any]) -> EdgevlmError:
    with pytest.raises(EdgevlmError) as info:
        admit(json.dumps(payload).encode(), side())
    return info.value


def test_a_refusal_carries_the_request_id_so_the_answer_needs_no_second_parse() -> None:
    over_limit = {**user_request(*[image(image_bytes(8, 8))] * 3, text("hi")), "id": "r-3"}
    assert _refused(over_limit).type == "mm_limit_exceeded"
    assert _refused(over_limit).request_id == "r-3"
    bad_schema = {"transaction": "t-9", "messages": [{"role": "user", "content": 5}]}
    assert _refused(bad_schema).type == "invalid_request"
    assert _refused(bad_schema).request_id == "t-9"
    assert _refused({"messages": [{"role": "robot", "content": "x"}]}).request_id is None
