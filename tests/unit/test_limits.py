"""limit_mm_per_prompt parsing and the admission checks that need no decoding."""

from __future__ import annotations

import base64

import pytest

from edgevlm.pipeline.limits import MMLimits, RequestLimits, check_request_limits, count_items
from edgevlm.wire.errors import MMLimitExceeded, PayloadTooLarge, UnsupportedModality
from edgevlm.wire.protocol import parse_request
from tests.helpers import data_url, image, text, user_request

VT = {"type": "vision_tokens", "vision_tokens": {"grid": [1, 1, 1], "tokens_b64": ""}}
REF = {"type": "image_ref", "image_ref": "0" * 32}


def frames(n: int, data: bytes = b"x") -> dict[str, object]:
    return {"type": "video_frames", "video_frames": [data_url(data)] * n, "fps": 2}


def test_counts_and_objects_and_json_strings_parse_the_same() -> None:
    a = MMLimits.parse({"image": 4, "video": {"count": 1, "num_frames": 16}})
    b = MMLimits.parse('{"image": 4, "video": {"count": 1, "num_frames": 16}}')
    assert a == b
    assert a.count_limit("image") == 4 and a.count_limit("video") == 1
    assert a.limit("video").num_frames == 16  # type: ignore[union-attr]
    assert a.count_limit("audio") is None  # absent = unlimited


def test_object_without_count_is_unlimited_and_extra_options_are_kept() -> None:
    limits = MMLimits.parse({"image": {"max_pixels": 200_000, "width": 512}})
    assert limits.count_limit("image") is None
    assert limits.to_json() == {"image": {"max_pixels": 200_000, "width": 512}}


@pytest.mark.parametrize(("value", "message"), [
    ({"images": 2}, "unknown modality 'images'; valid modalities are image, video, audio"),
    ({"image": -1}, "image must be a non-negative integer, got -1"),
    ({"image": True}, "image: expected a count or an object, got True"),
    ({"image": "four"}, "image: expected a count (e.g. 4) or an object"),
    ({"video": {"count": 1, "num_frames": 0}}, "video.num_frames must be at least 1, got 0"),
    ("{image: 2}", "not valid JSON"),
    ([1, 2], "expected a mapping of modality to limit"),
])
def test_bad_limits_say_what_to_change(value: object, message: str) -> None:
    with pytest.raises(ValueError) as info:
        MMLimits.parse(value)
    assert message in str(info.value)


def test_every_image_spelling_counts_as_image_and_a_clip_as_one_video() -> None:
    url_part = {"type": "image_url", "image_url": data_url(b"b")}
    req = parse_request(user_request(image(b"a"), url_part, REF, VT, frames(3), text("?")))
    assert count_items(req) == {"image": 4, "video": 1, "audio": 0}


def _check(req: dict[str, object], limits: RequestLimits, size: int = 100) -> None:
    check_request_limits(parse_request(req), size, limits)


def test_over_the_image_limit_names_modality_count_and_limit() -> None:
    limits = RequestLimits(mm=MMLimits.parse({"image": 2}))
    _check(user_request(image(b"a"), image(b"b")), limits)
    with pytest.raises(MMLimitExceeded) as info:
        _check(user_request(image(b"a"), REF, VT), limits)
    assert info.value.message == ("3 image items in the request, the limit is 2 "
                                  "(limits.limit_mm_per_prompt.image); send at most 2")
    assert (info.value.code, info.value.type) == (400, "mm_limit_exceeded")


def test_zero_video_limit_refuses_any_video() -> None:
    with pytest.raises(MMLimitExceeded, match="1 video items in the request, the limit is 0"):
        _check(user_request(frames(2)), RequestLimits(mm=MMLimits.parse({"video": 0})))


def test_audio_is_an_unsupported_modality_even_when_unlimited() -> None:
    with pytest.raises(UnsupportedModality) as info:
        _check(user_request(text("hi"), {"type": "input_audio", "input_audio": {}}),
               RequestLimits())
    assert info.value.message == ("messages.0.content.1: audio is not supported by this model; "
                                  "remove the audio part")


def test_frames_per_video_option_and_global_cap() -> None:
    opt = RequestLimits(mm=MMLimits.parse({"video": {"num_frames": 4}}))
    _check(user_request(frames(4)), opt)
    with pytest.raises(MMLimitExceeded, match=r"messages.0.content.0: 5 video frames, the limit "
                       r"is 4 \(limits.limit_mm_per_prompt.video.num_frames\)"):
        _check(user_request(frames(5)), opt)
    with pytest.raises(PayloadTooLarge, match=r"6 video frames, the limit is 5 "
                       r"\(limits.max_video_frames\)"):
        _check(user_request(frames(6)), RequestLimits(max_video_frames=5))


def test_part_and_request_bytes_are_measured_without_decoding() -> None:
    blob = b"\0" * 1001
    limits = RequestLimits(max_part_bytes=1000, max_payload_bytes=10_000)
    _check(user_request(image(blob[:1000])), limits)
    with pytest.raises(PayloadTooLarge) as info:
        _check(user_request(text("x"), {"type": "image", "image": {
            "b64": base64.b64encode(blob).decode()}}), limits)
    assert info.value.message == ("messages.0.content.1: media is 1001 bytes, the limit is 1000 "
                                  "(limits.max_part_bytes); send a smaller or more compressed "
                                  "image")
    assert info.value.code == 413
    with pytest.raises(PayloadTooLarge, match="request is 10001 bytes, the limit is 10000"):
        _check(user_request(text("x")), limits, size=10_001)
