"""Issue 21 (7): every Frigate event's outcome fires the camera's Home Assistant ``event``
entity (``camera/<cam>/event``, not retained), and a skipped/failed record leaves the
description sensor as it was. Real Mosquitto broker, the daemon in-process.

The sensor is checked with Home Assistant's semantics as far as possible without Home
Assistant: the discovery message the daemon published is read back from the broker and its
``value_template`` / ``json_attributes_template`` are rendered for every message of the
description topic, in order, with ``this`` (:func:`tests.unit.test_homeassistant.receive`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from edgevlm.service import Service
from tests.helpers import image_bytes
from tests.mqtt.conftest import MqttTestClient
from tests.mqtt.frigate_shapes import frigate_event
from tests.unit.test_homeassistant import HAState, receive

ROOT = "edgevlm/node1/camera"
CAMERA = {"frigate": True, "frigate_events": ["end"], "max_tokens": 4}


def description_sensor(watcher: MqttTestClient) -> dict[str, Any]:
    (config,) = watcher.inbox.json("homeassistant/device/+/config", count=1)
    sensor: dict[str, Any] = config["cmps"]["front_door_description"]
    assert sensor["state_topic"] == sensor["json_attributes_topic"] == (
        f"{ROOT}/front_door/description")
    return sensor


def test_a_skipped_event_fires_description_skipped_and_keeps_the_description(
        make_service: Callable[..., Service], mqtt_client: Callable[..., MqttTestClient]
) -> None:
    make_service(cameras={"front_door": CAMERA})
    frigate, watcher = mqtt_client(), mqtt_client()
    watcher.sub(f"{ROOT}/front_door/event", f"{ROOT}/front_door/description",
                "homeassistant/device/+/config")
    frigate.pub("frigate/front_door/person/snapshot", image_bytes(96, 64, seed=1), retain=True)
    frigate.pub("frigate/events", frigate_event("end", "A", best=time.time()))
    (a,) = watcher.inbox.json(f"{ROOT}/front_door/description", where=lambda b: b["id"] == "A")
    time.sleep(1.0)  # B stands still: Frigate publishes no snapshot of it -> skipped
    frigate.pub("frigate/events", frigate_event("end", "B", best=time.time(), label="person",
                                                position_changes=0))
    ready, skipped = watcher.inbox.json(f"{ROOT}/front_door/event", count=2)
    assert (ready["event_type"], ready["event_id"], ready["text"]) == (
        "description_ready", "A", a["text"])
    assert (skipped["event_type"], skipped["camera"], skipped["label"], skipped["event_id"],
            skipped["reason"], skipped["text"]) == (
        "description_skipped", "front_door", "person", "B", "stale_snapshot", None)
    assert skipped["at"]
    assert not any(m.retain for m in watcher.inbox.on(f"{ROOT}/front_door/event"))

    # the description sensor, fed the description topic's messages in order, as HA would
    sensor = description_sensor(watcher)
    good, record = watcher.inbox.json(f"{ROOT}/front_door/description", count=2)
    assert record["status"] == "skipped" and record["id"] == "B"
    entity = HAState("unknown", {"friendly_name": "Front door description"})
    entity = receive(sensor, entity, good)
    assert entity.state == a["text"][:255] and entity.attributes["event_id"] == "A"
    after = receive(sensor, entity, record)
    assert after == entity

    # the retained description is still A's (the record is not retained)
    late = mqtt_client()
    late.sub(f"{ROOT}/front_door/description")
    (kept,) = late.inbox.json(f"{ROOT}/front_door/description")
    assert kept["id"] == "A" and "status" not in kept
