"""Camera sources end to end: a real broker, the daemon with the demo model, raw frames."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from edgevlm.config import Config
from edgevlm.service import Service
from tests.helpers import image_bytes
from tests.mqtt.conftest import MqttTestClient, wait_until

ROOT = "edgevlm/node1/camera"


@pytest.fixture
def start_service(demo_engine: Any) -> Iterator[Callable[[Config], Service]]:
    services: list[Service] = []

    def start(config: Config) -> Service:
        service = Service(config, engine=demo_engine)
        services.append(service)
        service.start()
        return service

    yield start
    for service in services:
        service.stop("test over")


def frame(seed: int, fmt: str = "JPEG") -> bytes:
    return image_bytes(96, 64, fmt, seed=seed)


def test_a_frame_on_a_camera_topic_becomes_a_retained_description_and_snapshot(
        make_config: Callable[..., Config], start_service: Callable[[Config], Service],
        mqtt_client: Callable[..., MqttTestClient]) -> None:
    start_service(make_config(**{"cameras.door.prompt": "Who is at the {camera}?",
                                 "cameras.door.max_tokens": 8}))
    client = mqtt_client()
    client.sub(f"{ROOT}/door/description", f"{ROOT}/door/snapshot")
    image = frame(1, "PNG")
    client.pub(f"{ROOT}/door/image", image)
    (body,) = client.inbox.json(f"{ROOT}/door/description")
    assert {"camera", "label", "event_id", "text", "model", "metrics", "at"} <= set(body)
    assert (body["camera"], body["label"], body["event_id"]) == ("door", None, None)
    assert isinstance(body["text"], str) and body["model"]
    assert body["metrics"]["total_ms"] > 0
    assert "description" not in body and "type" not in body  # Frigate keys only for events
    (snapshot,) = client.inbox.wait(f"{ROOT}/door/snapshot")
    assert snapshot.payload.startswith(b"\xff\xd8\xff")  # the PNG frame, as JPEG (issue 21)

    late = mqtt_client()  # both are retained for Home Assistant's image/sensor entities
    late.sub(f"{ROOT}/door/#")
    late.inbox.wait(f"{ROOT}/door/description")
    late.inbox.wait(f"{ROOT}/door/snapshot")
    retained = {m.topic: m for m in late.inbox.wait(f"{ROOT}/door/+", count=3) if m.retain}
    assert json.loads(retained[f"{ROOT}/door/description"].payload) == body
    assert retained[f"{ROOT}/door/snapshot"].payload == snapshot.payload
    assert retained[f"{ROOT}/door/state"].payload == b"ON"


def test_a_payload_that_is_not_an_image_is_not_described(
        make_config: Callable[..., Config], start_service: Callable[[Config], Service],
        mqtt_client: Callable[..., MqttTestClient]) -> None:
    start_service(make_config(**{"cameras.door.max_tokens": 4}))
    client = mqtt_client()
    client.sub(f"{ROOT}/door/description", f"{ROOT}/door/snapshot")
    client.pub(f"{ROOT}/door/image", b'{"image": "not raw bytes"}')
    good = frame(2)
    client.pub(f"{ROOT}/door/image", good)
    client.inbox.wait(f"{ROOT}/door/snapshot")
    assert len(client.inbox.on(f"{ROOT}/door/description")) == 1
    assert [m.payload for m in client.inbox.on(f"{ROOT}/door/snapshot")] == [good]


def test_set_off_and_on_switches_a_camera_and_its_retained_state(
        make_config: Callable[..., Config], start_service: Callable[[Config], Service],
        mqtt_client: Callable[..., MqttTestClient]) -> None:
    start_service(make_config(**{"cameras.door.max_tokens": 4}))
    client = mqtt_client()
    client.sub(f"{ROOT}/door/state", f"{ROOT}/door/snapshot", f"{ROOT}/door/description")
    client.inbox.wait(f"{ROOT}/door/state", where=lambda m: m.payload == b"ON")

    client.pub(f"{ROOT}/door/set", "OFF")
    client.inbox.wait(f"{ROOT}/door/state", where=lambda m: m.payload == b"OFF")
    ignored, described = frame(3), frame(4)
    client.pub(f"{ROOT}/door/image", ignored)
    client.pub(f"{ROOT}/door/set", "ON")
    client.inbox.wait(f"{ROOT}/door/state", count=2, where=lambda m: m.payload == b"ON")
    client.pub(f"{ROOT}/door/image", described)
    client.inbox.wait(f"{ROOT}/door/description")
    assert [m.payload for m in client.inbox.wait(f"{ROOT}/door/snapshot")] == [described]

    late = mqtt_client()
    late.sub(f"{ROOT}/door/state")
    (state,) = late.inbox.wait(f"{ROOT}/door/state")
    assert state.retain and state.payload == b"ON"


def test_latest_frame_wins_when_the_board_is_busy(
        make_config: Callable[..., Config], start_service: Callable[[Config], Service],
        mqtt_client: Callable[..., MqttTestClient]) -> None:
    service = start_service(make_config(**{"cameras.yard.max_tokens": 4}))
    service.worker.test_delay_s = 2.0  # every job holds the worker for two seconds
    client = mqtt_client()
    client.sub(f"{ROOT}/yard/snapshot", f"{ROOT}/yard/description")
    frames = [frame(10 + i) for i in range(5)]
    client.pub(f"{ROOT}/yard/image", frames[0])
    # the first one starts (under load, a frame sent before the worker took it would replace
    # it: wait for the worker to hold it); the others replace each other while waiting
    wait_until(lambda: service.worker.running_since is not None, what="the first frame running")
    for image in frames[1:]:
        client.pub(f"{ROOT}/yard/image", image)
    wait_until(lambda: any(m.payload == frames[-1]
                           for m in client.inbox.on(f"{ROOT}/yard/snapshot")),
               what="the last frame's snapshot")
    described = [m.payload for m in client.inbox.on(f"{ROOT}/yard/snapshot")]
    assert described[-1] == frames[-1]
    assert len(described) < len(frames)
    assert all(image in (frames[0], frames[-1]) for image in described)


def test_a_camera_frame_over_the_size_limit_is_refused_at_admission(
        make_config: Callable[..., Config], start_service: Callable[[Config], Service],
        mqtt_client: Callable[..., MqttTestClient], engine_calls: list[str | None],
        caplog: pytest.LogCaptureFixture) -> None:
    """Issue 23: camera frames enter the admission every request passes (as raw bytes, no
    base64 round trip): one over limits.max_part_bytes never reaches the engine."""
    service = start_service(make_config(**{"cameras.door.max_tokens": 4,
                                           "limits.max_part_bytes": 20_000}))
    client = mqtt_client()
    client.sub(f"{ROOT}/door/description", f"{ROOT}/door/snapshot")
    big = image_bytes(640, 480, "PNG", seed=3)
    assert len(big) > 20_000
    with caplog.at_level("WARNING", logger="edgevlm.service"):
        client.pub(f"{ROOT}/door/image", big)
        small = frame(4)
        client.pub(f"{ROOT}/door/image", small)
        client.inbox.wait(f"{ROOT}/door/snapshot")
    assert [m.payload for m in client.inbox.on(f"{ROOT}/door/snapshot")] == [small]
    assert len(engine_calls) == 1, "the big frame never reached the engine"
    refused = [r.getMessage() for r in caplog.records if "frame refused" in r.getMessage()]
    assert len(refused) == 1 and "limits.max_part_bytes" in refused[0], refused
    assert service.metrics.snapshot()["requests"]["received"] == 1


def test_a_cameras_max_pixels_bounds_its_frames(
        make_config: Callable[..., Config], start_service: Callable[[Config], Service],
        mqtt_client: Callable[..., MqttTestClient], demo_engine: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """cameras.<name>.max_pixels: the same 1280x720 frame on a camera with a budget at the
    model's floor costs fewer vision tokens than on a camera without one (model.max_pixels;
    the demo model's own range is 16 384-32 768 pixels, 16-32 tokens)."""
    vision: dict[str, int] = {}
    original = demo_engine.generate_prepared

    def recording(request: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(request, *args, **kwargs)
        vision[request.messages[0].parts()[1].text] = result.vision_tokens
        return result

    monkeypatch.setattr(demo_engine, "generate_prepared", recording)
    start_service(make_config(**{"cameras.small.max_tokens": 2, "cameras.small.prompt": "small",
                                 "cameras.small.max_pixels": 16_384,
                                 "cameras.full.max_tokens": 2, "cameras.full.prompt": "full"}))
    client = mqtt_client()
    client.sub(f"{ROOT}/+/description")
    big = image_bytes(1280, 720, seed=5)
    client.pub(f"{ROOT}/small/image", big)
    client.pub(f"{ROOT}/full/image", big)
    client.inbox.wait(f"{ROOT}/+/description", count=2)
    assert vision["small"] <= 16_384 // (32 * 32), vision
    assert vision["full"] >= vision["small"] + 8, vision


def test_a_frame_request_is_admitted_from_its_bytes(demo_engine: Any) -> None:
    """The typed errors of admission for a frame built in the daemon."""
    from edgevlm.pipeline.admission import RequestSide, admit_request
    from edgevlm.pipeline.limits import RequestLimits
    from edgevlm.pipeline.preflight import preflight_context
    from edgevlm.verbs.describe import frame_request
    from edgevlm.wire.errors import PayloadTooLarge

    side = RequestSide(RequestLimits(max_part_bytes=1000), preflight_context(demo_engine))
    image = image_bytes(96, 64, "JPEG", seed=5)
    with pytest.raises(PayloadTooLarge, match=r"limits\.max_part_bytes"):
        admit_request(frame_request(image * 2, "x", 4), 2 * len(image) + 1, side)
    ok = admit_request(frame_request(image, "What is here?", 4), len(image) + 13,
                       RequestSide(RequestLimits(), preflight_context(demo_engine)))
    assert ok.counts["image"] == 1 and ok.budget.vision_tokens > 0



DOOR_SCHEMA = {"type": "object", "additionalProperties": False,
               "required": ["person", "count", "kind"],
               "properties": {"person": {"type": "boolean"},
                              "count": {"type": "integer", "minimum": 0, "maximum": 9},
                              "kind": {"enum": ["nobody", "person", "vehicle"]}}}


def test_a_camera_with_a_json_schema_publishes_its_value_and_field_entities(
        make_config: Callable[..., Config], start_service: Callable[[Config], Service],
        mqtt_client: Callable[..., MqttTestClient]) -> None:
    """issue 25: cameras.<name>.json_schema — the description carries the answer as a JSON
    ``value`` that validates, and Home Assistant discovery has an entity per field, reading
    ``value`` from the description topic."""
    import jsonschema

    start_service(make_config(**{"cameras.door.max_tokens": 48,
                                 "cameras.door.json_schema": DOOR_SCHEMA,
                                 "homeassistant.discovery": True}))
    client = mqtt_client()
    client.sub(f"{ROOT}/door/description", "homeassistant/#")
    client.pub(f"{ROOT}/door/image", frame(3))
    (body,) = client.inbox.json(f"{ROOT}/door/description")
    jsonschema.validate(body["value"], DOOR_SCHEMA)
    assert json.loads(body["text"]) == body["value"]
    (discovery,) = client.inbox.json("homeassistant/device/+/config")
    fields = {c["unique_id"].rsplit("_", 1)[-1]: c for c in discovery["cmps"].values()
              if "_field_" in c["unique_id"]}
    assert {k: c["p"] for k, c in fields.items()} == {
        "person": "binary_sensor", "count": "sensor", "kind": "sensor"}
    assert fields["count"]["state_topic"] == f"{ROOT}/door/description"
    assert 'value_json.value["count"]' in fields["count"]["value_template"]
    assert fields["count"]["state_class"] == "measurement"


def test_a_camera_schema_the_engine_cannot_follow_is_a_config_error(
        make_config: Callable[..., Config]) -> None:
    from edgevlm.config import ConfigError

    with pytest.raises(ConfigError, match=r"cameras\.door\.json_schema.*dependentSchemas"):
        make_config(**{"cameras.door.json_schema": {"type": "object",
                                                    "dependentSchemas": {"a": {}}}})


def test_a_camera_with_choices_describes_with_one_of_them(
        make_config: Callable[..., Config], start_service: Callable[[Config], Service],
        mqtt_client: Callable[..., MqttTestClient]) -> None:
    kinds = ["nobody", "a person", "a car"]
    start_service(make_config(**{"cameras.door.choices": kinds}))
    client = mqtt_client()
    client.sub(f"{ROOT}/door/description")
    client.pub(f"{ROOT}/door/image", frame(4))
    (body,) = client.inbox.json(f"{ROOT}/door/description")
    assert body["text"] in kinds
