"""Camera sources without a broker: routing, Frigate joins, dedupe, prompts, enable/disable."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from edgevlm.config import CameraConfig
from edgevlm.sources.cameras import CameraFrame, CameraSources, fill_prompt, image_kind
from edgevlm.wire.errors import WireError
from tests.helpers import image_bytes

JPEG = image_bytes(64, 48)
PNG = image_bytes(64, 48, "PNG")
ROOT = "edgevlm/n1/camera"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(cameras: dict[str, dict[str, Any]], clock: Clock | None = None
         ) -> tuple[CameraSources, list[CameraFrame]]:
    frames: list[CameraFrame] = []
    configs = {name: CameraConfig.model_validate(cfg) for name, cfg in cameras.items()}
    sources = CameraSources(configs, "edgevlm", "n1", frames.append,
                            snapshot_wait_s=5.0, clock=clock or Clock())
    return sources, frames


def event(kind: str, event_id: str, camera: str = "front", label: str = "person",
          sub_label: Any = None, **extra: Any) -> bytes:
    after = {"id": event_id, "camera": camera, "label": label, "sub_label": sub_label,
             "top_score": 0.9, "start_time": 999.0, "end_time": None,
             "snapshot": {"frame_time": 1000.0}, **extra}  # Clock() starts at 1000.0
    return json.dumps({"type": kind, "before": after, "after": after}).encode()


def test_magic_bytes_tell_jpeg_and_png_from_anything_else() -> None:
    assert image_kind(JPEG) == "jpeg" and image_kind(PNG) == "png"
    assert image_kind(b"GIF89a....") is None and image_kind(b"") is None


def test_subscriptions_cover_image_set_and_frigate_topics() -> None:
    sources, _ = make({"door": {}, "front": {"frigate": True},
                       "yard": {"topic": "cams/yard/jpeg"}})
    assert sorted(sources.subscriptions()) == sorted([
        f"{ROOT}/door/image", f"{ROOT}/front/image", "cams/yard/jpeg",
        f"{ROOT}/door/set", f"{ROOT}/front/set", f"{ROOT}/yard/set",
        *(f"{ROOT}/{cam}/{option}/set" for cam in ("door", "front", "yard")
          for option in ("prompt", "max_tokens")),
        "frigate/events", "frigate/front/+/snapshot"])


def test_a_jpeg_on_the_camera_topic_is_submitted_with_the_camera_prompt() -> None:
    sources, frames = make({"door": {"prompt": "What is at the {camera}?", "max_tokens": 20}})
    assert sources.handle(f"{ROOT}/door/image", JPEG) == []
    assert frames == [CameraFrame("door", None, None, JPEG, "What is at the door?", 20)]
    sources.handle(f"{ROOT}/door/image", PNG)
    assert len(frames) == 2


def test_a_payload_that_is_not_an_image_is_refused_with_a_log_line(
        caplog: pytest.LogCaptureFixture) -> None:
    sources, frames = make({"door": {}})
    with caplog.at_level(logging.WARNING, "edgevlm.sources.cameras"):
        assert sources.handle(f"{ROOT}/door/image", b'{"image": "base64..."}') == []
    assert frames == []
    assert "neither JPEG nor PNG" in caplog.text


def test_topics_that_are_not_camera_topics_are_not_handled() -> None:
    sources, _ = make({"door": {}, "front": {"frigate": True}})
    assert sources.handle("edgevlm/n1/request/describe", b"{}") is None
    assert sources.handle(f"{ROOT}/other/image", JPEG) is None
    assert sources.handle("frigate/other/person/snapshot", JPEG) == []  # Frigate's, not ours


def test_a_custom_topic_with_a_wildcard_routes_to_its_camera() -> None:
    sources, frames = make({"yard": {"topic": "cams/+/yard"}})
    sources.handle("cams/east/yard", JPEG)
    assert [f.camera for f in frames] == ["yard"]


def test_set_off_stops_frames_and_publishes_the_retained_state() -> None:
    sources, frames = make({"door": {}})
    assert sources.state_messages() == [(f"{ROOT}/door/state", b"ON", True)]
    assert sources.handle(f"{ROOT}/door/set", b"off") == [(f"{ROOT}/door/state", b"OFF", True)]
    sources.handle(f"{ROOT}/door/image", JPEG)
    assert frames == []
    assert sources.state_messages() == [(f"{ROOT}/door/state", b"OFF", True)]
    assert sources.handle(f"{ROOT}/door/set", b"maybe") == []
    assert sources.handle(f"{ROOT}/door/set", b"ON\n") == [(f"{ROOT}/door/state", b"ON", True)]
    sources.handle(f"{ROOT}/door/image", JPEG)
    assert len(frames) == 1


def test_a_camera_disabled_in_the_config_starts_off() -> None:
    sources, frames = make({"door": {"enabled": False}})
    assert sources.state_messages() == [(f"{ROOT}/door/state", b"OFF", True)]
    sources.handle(f"{ROOT}/door/image", JPEG)
    assert frames == []


def test_frigate_end_event_describes_the_latest_snapshot_once() -> None:
    clock = Clock()
    sources, frames = make({"front": {"frigate": True}}, clock)
    sources.handle("frigate/front/person/snapshot", JPEG)
    clock.now += 0.3
    sources.handle("frigate/front/person/snapshot", PNG)  # a better one: its best frame
    best = {"snapshot": {"frame_time": clock.now}}
    sources.handle("frigate/events", event("new", "e1", **best))
    sources.handle("frigate/events", event("update", "e1", **best))
    assert frames == []  # default trigger: end only
    sources.handle("frigate/events", event("end", "e1", **best))
    sources.handle("frigate/events", event("end", "e1", **best))  # repeated
    assert len(frames) == 1
    frame = frames[0]
    assert (frame.camera, frame.label, frame.event_id, frame.image) == ("front", "person",
                                                                        "e1", PNG)


def test_frigate_event_before_its_snapshot_waits_for_it() -> None:
    clock = Clock()
    sources, frames = make({"front": {"frigate": True, "frigate_events": ["new"]}}, clock)
    sources.handle("frigate/events", event("new", "e1", label="car"))
    assert frames == []
    clock.now += 2
    sources.handle("frigate/front/car/snapshot", JPEG)
    assert [(f.event_id, f.label) for f in frames] == [("e1", "car")]


def test_frigate_event_whose_snapshot_comes_too_late_is_not_described() -> None:
    clock = Clock()
    sources, frames = make({"front": {"frigate": True, "frigate_events": ["new"]}}, clock)
    sources.handle("frigate/events", event("new", "e1", label="car"))
    clock.now += 6
    sources.handle("frigate/front/car/snapshot", JPEG)
    assert frames == []
    sources.handle("frigate/events", event("new", "e2", label="car", start_time=clock.now,
                                           snapshot={"frame_time": clock.now}))  # its own
    assert [f.event_id for f in frames] == ["e2"]


def test_frigate_snapshot_of_another_label_does_not_answer_a_waiting_event() -> None:
    sources, frames = make({"front": {"frigate": True}})
    sources.handle("frigate/events", event("end", "e1", label="car"))
    sources.handle("frigate/front/person/snapshot", JPEG)
    assert frames == []


def test_frigate_labels_filter_and_other_cameras_are_ignored() -> None:
    sources, frames = make({"front": {"frigate": True, "labels": ["person"]}})
    sources.handle("frigate/front/car/snapshot", JPEG)
    sources.handle("frigate/front/person/snapshot", JPEG)
    sources.handle("frigate/events", event("end", "e1", label="car"))
    sources.handle("frigate/events", event("end", "e2", camera="back"))
    sources.handle("frigate/events", event("end", "e3", false_positive=True))
    assert frames == []
    sources.handle("frigate/events", event("end", "e4"))
    assert [f.event_id for f in frames] == ["e4"]


def test_frigate_per_label_prompt_with_sub_label_in_either_shape() -> None:
    sources, frames = make({"front": {
        "frigate": True, "prompt": "Describe the {label} at the {camera}.",
        "label_prompts": {"person": "Is {sub_label} carrying something? ({camera})"}}})
    sources.handle("frigate/front/person/snapshot", JPEG)
    sources.handle("frigate/front/car/snapshot", JPEG)
    sources.handle("frigate/events", event("end", "e1", sub_label=["Alice", 0.93]))
    sources.handle("frigate/events", event("end", "e2", sub_label="Bob"))
    sources.handle("frigate/events", event("end", "e3", label="car"))
    assert [f.prompt for f in frames] == ["Is Alice carrying something? (front)",
                                          "Is Bob carrying something? (front)",
                                          "Describe the car at the front."]


def test_bad_frigate_event_payloads_are_logged_and_ignored(
        caplog: pytest.LogCaptureFixture) -> None:
    sources, frames = make({"front": {"frigate": True}})
    sources.handle("frigate/front/person/snapshot", JPEG)
    with caplog.at_level(logging.WARNING, "edgevlm.sources.cameras"):
        for payload in (b"not json", b"[]", b'{"type": "end"}', b'{"type": "end", "after": 3}'):
            assert sources.handle("frigate/events", payload) == []
    assert frames == [] and "frigate event ignored" in caplog.text


def test_fill_prompt_keeps_unknown_and_broken_placeholders() -> None:
    assert fill_prompt("{camera}: {zone}", "door", None, None) == "door: {zone}"
    assert fill_prompt("a {label}", "door", None, None) == "a object"
    assert fill_prompt("broken {", "door", "car", None) == "broken {"
    assert fill_prompt("{label} {sub_label}", "door", "car", None) == "car"


def test_submit_that_raises_never_escapes_handle() -> None:
    def submit(frame: CameraFrame) -> None:
        raise RuntimeError("queue gone")

    sources = CameraSources({"door": CameraConfig()}, "edgevlm", "n1", submit)
    assert sources.handle(f"{ROOT}/door/image", JPEG) == []


def test_result_messages_for_a_camera_frame_and_a_frigate_event() -> None:
    sources, _ = make({"door": {}})
    frame = CameraFrame("door", None, None, JPEG, "p", 16)
    (desc_topic, desc, retain), snapshot = sources.result_messages(
        frame, "a red car", None, "qwen3vl-demo", {"total_ms": 12.345})
    body = json.loads(desc)
    assert (desc_topic, retain) == (f"{ROOT}/door/description", True)
    assert {k: body[k] for k in ("camera", "label", "event_id", "text", "model", "metrics")} == {
        "camera": "door", "label": None, "event_id": None, "text": "a red car",
        "model": "qwen3vl-demo", "metrics": {"total_ms": 12.35}}
    assert "T" in body["at"] and "description" not in body
    assert snapshot == (f"{ROOT}/door/snapshot", JPEG, True)

    event_frame = CameraFrame("door", "person", "e9", JPEG, "p", 16)
    body = json.loads(sources.result_messages(event_frame, "a person", None, "m", {})[0][1])
    assert (body["type"], body["id"], body["description"], body["camera"]) == (
        "description", "e9", "a person", "door")


def test_an_error_answer_publishes_nothing_and_keeps_the_last_description() -> None:
    sources, _ = make({"door": {}})
    frame = CameraFrame("door", None, None, JPEG, "p", 16)
    assert sources.result_messages(frame, None, WireError(503, "busy", "full"), "m", {}) == []
