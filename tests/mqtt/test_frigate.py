"""Frigate as a camera source: its retained snapshots joined with its events, end to end."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from edgevlm.config import Config
from edgevlm.service import Service
from tests.helpers import image_bytes
from tests.mqtt.conftest import MqttTestClient
from tests.mqtt.frigate_shapes import frigate_event

ROOT = "edgevlm/node1/camera"


@pytest.fixture
def service(make_config: Callable[..., Config], demo_engine: Any) -> Iterator[Service]:
    config = make_config(cameras={"front_door": {
        "frigate": True, "frigate_events": ["new", "end"], "labels": ["person", "car"],
        "prompt": "Describe the {label} at the {camera}.",
        "label_prompts": {"car": "What colour is the {label}?"}, "max_tokens": 8}})
    svc = Service(config, engine=demo_engine)
    svc.start()
    yield svc
    svc.stop("test over")


def test_frigate_snapshot_and_event_give_one_frigate_shaped_description(
        service: Service, mqtt_client: Callable[..., MqttTestClient]) -> None:
    frigate = mqtt_client()
    watcher = mqtt_client()
    watcher.sub(f"{ROOT}/front_door/description", f"{ROOT}/front_door/snapshot")
    snapshot = image_bytes(160, 120, seed=7)
    frigate.pub("frigate/front_door/person/snapshot", snapshot, retain=True)
    frigate.pub("frigate/events", frigate_event("new", "1700000000.0-abc123"))
    frigate.pub("frigate/events", frigate_event("update", "1700000000.0-abc123"))
    frigate.pub("frigate/events", frigate_event("end", "1700000000.0-abc123"))

    (body,) = watcher.inbox.json(f"{ROOT}/front_door/description")
    assert (body["type"], body["id"], body["camera"]) == (
        "description", "1700000000.0-abc123", "front_door")
    assert body["description"] == body["text"] and isinstance(body["text"], str)
    assert (body["label"], body["event_id"]) == ("person", "1700000000.0-abc123")
    assert body["model"] and body["metrics"]["total_ms"] > 0
    (image,) = watcher.inbox.wait(f"{ROOT}/front_door/snapshot")
    assert image.payload == snapshot

    # "new" and "end" both trigger, but one event is described once
    frigate.pub("frigate/events", frigate_event("new", "1700000050.0-second", label="car"))
    frigate.pub("frigate/front_door/car/snapshot", image_bytes(160, 120, seed=8), retain=True)
    second = watcher.inbox.json(f"{ROOT}/front_door/description", count=2)
    assert [b["id"] for b in second] == ["1700000000.0-abc123", "1700000050.0-second"]


def test_frigate_events_of_other_labels_and_cameras_are_not_described(
        service: Service, mqtt_client: Callable[..., MqttTestClient]) -> None:
    frigate = mqtt_client()
    watcher = mqtt_client()
    watcher.sub(f"{ROOT}/+/description")
    frigate.pub("frigate/front_door/dog/snapshot", image_bytes(64, 64, seed=1))
    frigate.pub("frigate/events", frigate_event("end", "e-dog", label="dog"))
    frigate.pub("frigate/back_yard/person/snapshot", image_bytes(64, 64, seed=2))
    frigate.pub("frigate/events", frigate_event("end", "e-back", camera="back_yard"))
    frigate.pub("frigate/front_door/person/snapshot", image_bytes(64, 64, seed=3))
    frigate.pub("frigate/events", frigate_event("end", "e-person"))
    bodies = watcher.inbox.json(f"{ROOT}/+/description")
    assert [b["id"] for b in bodies] == ["e-person"]
    assert json.dumps(bodies[0])  # plain JSON, nothing odd inside
