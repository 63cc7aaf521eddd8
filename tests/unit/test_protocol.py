"""The wire schema: what parses, what is refused and how the refusal reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgevlm.wire.errors import InvalidRequest, UnsupportedMedia
from edgevlm.wire.protocol import (
    AnswerData,
    ImagePart,
    Metrics,
    Response,
    TextPart,
    Usage,
    media_bytes,
    parse_request,
    request_id_of,
    request_schema,
)
from tests.helpers import data_url, image, text, user_request

SCHEMA_FILE = Path(__file__).parents[2] / "daemon" / "edgevlm" / "schema" / "protocol-v1.json"


def test_string_content_and_transaction_alias_parse() -> None:
    req = parse_request(json.dumps({"transaction": "t-9",
                                    "messages": [{"role": "user", "content": "hello"}]}))
    assert req.id == "t-9"
    assert req.parts() == [TextPart(type="text", text="hello")]


def test_openai_image_url_object_and_inline_bytes_parse() -> None:
    req = parse_request(user_request(
        {"type": "image_url", "image_url": {"url": data_url(b"abc")}},
        {"type": "image", "image": {"b64": "YWJj", "mime": "image/png"}}, text("what?")))
    assert len(req.parts()) == 3
    assert isinstance(req.parts()[1], ImagePart)
    assert media_bytes(req.parts()[1].image) == b"abc"  # type: ignore[union-attr]


def test_generation_parameters_and_stop_string_become_a_list() -> None:
    req = parse_request(user_request(text("x"), max_tokens=7, temperature=0.2, top_p=0.9,
                                     top_k=20, repetition_penalty=1.1, seed=3, stop="END",
                                     stream=True, deadline_ms=500,
                                     mm_processor_kwargs={"max_pixels": 65536}))
    assert (req.max_tokens, req.stop, req.stream, req.deadline_ms) == (7, ["END"], True, 500)
    assert req.mm_processor_kwargs is not None
    assert req.mm_processor_kwargs.max_pixels == 65536


@pytest.mark.parametrize(("payload", "expected"), [
    (b"not json", "payload is not JSON"),
    (b"\xff\xfe", "payload is not JSON"),
    (b"[1, 2]", "payload is a JSON list; send a JSON object with 'messages'"),
    (json.dumps({"messages": []}), "messages: List should have at least 1 item"),
    (json.dumps(user_request({"type": "sticker"})),
     "messages.0.content.0: unknown content part type; use one of text, image, image_url"),
    (json.dumps(user_request(text("x"), colour="red")),
     "colour: unknown field; remove it (see `edgevlm schema` for the request schema)"),
    (json.dumps(user_request({"type": "image"})), "messages.0.content.0.image: field required"),
    (json.dumps(user_request({"type": "image_url", "image_url": "http://example.com/a.jpg"})),
     "messages.0.content.0.image_url: Value error, only data: URLs are accepted"),
    (json.dumps(user_request(text("x"), max_tokens=0)),
     "max_tokens: Input should be greater than or equal to 1"),
    (json.dumps(user_request(text("x"), v=2)), "v: Input should be 1"),
    (json.dumps(user_request({"type": "image_ref", "image_ref": "../etc/passwd"})),
     "messages.0.content.0.image_ref: String should match pattern"),
    (json.dumps({"messages": [{"role": "system", "content": "be brief"}]}),
     "messages need at least one user or assistant message"),
    (json.dumps(user_request(text("x"), stop=[""])), "stop strings must not be empty"),
])
def test_invalid_requests_name_the_field(payload: bytes | str, expected: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_request(payload)
    assert expected in info.value.message
    assert (info.value.code, info.value.type) == (400, "invalid_request")


def test_id_of_an_unparseable_request_is_recovered_for_the_error_answer() -> None:
    assert request_id_of(json.dumps({"transaction": "abc", "messages": 3})) == "abc"
    assert request_id_of(b"{broken") is None
    assert request_id_of(json.dumps({"id": "x" * 500})) is None


@pytest.mark.parametrize("url", ["data:image/png,AAAA", "data:image/png;base64,AA A=",
                                 "data:image/png;base64,AAAA=", "data:image/png;base64,AA_-"])
def test_media_bytes_refuses_non_strict_base64(url: str) -> None:
    with pytest.raises(UnsupportedMedia):
        media_bytes(url)


def test_response_envelope_echoes_id_as_transaction() -> None:
    data = AnswerData(text="a cat", finish_reason="stop",
                      usage=Usage(prompt_tokens=10, vision_tokens=4, completion_tokens=2),
                      metrics=Metrics(total_ms=3.0), model="demo")
    ok = json.loads(Response.ok("r1", data).to_json())
    assert ok["id"] == ok["transaction"] == "r1"
    assert ok["status"] == "ok" and ok["data"]["text"] == "a cat" and "error" not in ok
    err = json.loads(Response.fail("r2", 503, "busy", "queue full").to_json())
    assert err["error"] == {"code": 503, "type": "busy", "message": "queue full"}


def test_committed_schema_matches_the_code() -> None:
    """`edgevlm schema -o daemon/edgevlm/schema/protocol-v1.json` regenerates it."""
    committed = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    assert committed == json.loads(json.dumps(request_schema(), sort_keys=True))


def test_image_helper_builds_a_data_url() -> None:
    part = image(b"\x89PNG", "image/png")
    assert part["image"].startswith("data:image/png;base64,")


# --------------------------------------------------------------------------- error answers


def _refusal_messages() -> list[str]:
    """Error messages the daemon really sends, plus text that needs JSON escapes."""
    messages = []
    for payload in (b"\xff\xfe not json", b"[1, 2]", b'{"v": 1, "prompt": "x"}',
                    b'{"messages": []}', b'{"messages": [{"role": "user", "content": '
                    b'[{"type": "hologram"}]}], "stop": [""]}'):
        with pytest.raises(InvalidRequest) as info:
            parse_request(payload)
        messages.append(info.value.message)
    return [*messages, "", "tab\there, new\nline, quote \" and \\ and /",
            "".join(chr(c) for c in range(0x20)) + "\x7f\x80\x9f",
            "caf\u00e9 \u2028\u2029 \ufeff \U0001f600 \ud7ff\ue000\uffff"]


ERROR_IDS = [None, "", "q1", "t-7", "a" * 128, "caf\u00e9", "\U0001f600", "\u2028",
             '"quoted" \\ back', *[chr(c) for c in range(0x80)]]


def test_error_answer_json_is_byte_for_byte_the_pydantic_answer() -> None:
    from edgevlm.wire.errors import ERROR_TYPES
    from edgevlm.wire.protocol import error_answer_json

    compared = 0
    for error in ERROR_TYPES:
        for message in _refusal_messages():
            for rid in ERROR_IDS:
                expected = Response.fail(rid, error.code, error.type, message).to_json()
                assert error_answer_json(rid, error.code, error.type, message) == expected, \
                    (rid, error.type, message)
                compared += 1
    assert compared > 10_000


def test_error_answer_json_echoes_an_id_that_is_not_valid_unicode() -> None:
    from edgevlm.wire.protocol import error_answer_json

    with pytest.raises(InvalidRequest) as info:
        parse_request(b'{"v": 1, "id": "a\\ud800", "messages": []}')
    rid = info.value.request_id
    assert rid == "a\ud800"
    body = error_answer_json(rid, 400, "invalid_request", info.value.message)
    assert json.loads(body) == {"v": 1, "id": rid, "transaction": rid, "status": "error",
                                "error": {"code": 400, "type": "invalid_request",
                                          "message": info.value.message}}
