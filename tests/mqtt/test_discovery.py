"""Home Assistant discovery over a real broker: retained, valid when read back, removable,
and re-published by the daemon when Home Assistant comes online."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import paho.mqtt.client as paho
import pytest

from edgevlm.integrations.homeassistant import (
    BRIDGE_ENTITIES,
    CAMERA_ENTITIES,
    DiscoveryContext,
    discovery_messages,
    removal_messages,
)
from tests.mqtt.conftest import MqttTestClient
from tests.unit.test_homeassistant import check_messages, ctx

PREFIX = "homeassistant"


def retained_snapshot(client: MqttTestClient, topic_filter: str) -> dict[str, bytes]:
    """Every retained message under ``topic_filter``, read by subscribing afresh.

    Mosquitto sends the retained messages right after the SUBACK; a sentinel published by
    the same client after that arrives after them (per-client ordering), so when it is in
    the inbox every retained message is too.
    """
    sentinel = f"{PREFIX}/zz_sentinel/{time.monotonic_ns()}"
    client.sub(topic_filter, sentinel)
    client.pub(sentinel, b"x")
    client.inbox.wait(sentinel)
    return {m.topic: bytes(m.payload) for m in client.inbox.on(topic_filter)
            if m.retain and m.payload and not m.topic.startswith(f"{PREFIX}/zz_sentinel")}


def publish_all(client: MqttTestClient, messages: list[tuple[str, bytes]]) -> None:
    for topic, payload in messages:
        client.pub(topic, payload, qos=1, retain=True)


@pytest.mark.parametrize("form", ["device", "component"])
def test_discovery_is_retained_valid_and_removable(
        form: str, mqtt_client: Callable[..., MqttTestClient]) -> None:
    context: DiscoveryContext = ctx(form, cameras=("driveway",))
    publisher = mqtt_client()
    publish_all(publisher, discovery_messages(context))

    retained = retained_snapshot(mqtt_client(), f"{PREFIX}/#")
    assert retained == dict(discovery_messages(context))
    entities = check_messages(sorted(retained.items()), form)
    assert len(entities) == len(BRIDGE_ENTITIES) + len(CAMERA_ENTITIES)

    publish_all(publisher, removal_messages(context))
    assert retained_snapshot(mqtt_client(), f"{PREFIX}/#") == {}


def test_daemon_publishes_discovery_on_connect_and_again_on_home_assistant_birth(
        make_service: Callable[..., Any], mqtt_client: Callable[..., MqttTestClient]) -> None:
    service = make_service({"mqtt.node_id": "garage", "cameras.driveway.enabled": True})
    first = retained_snapshot(mqtt_client(), f"{PREFIX}/device/+/config")
    assert len(first) == 1
    (topic, payload), = first.items()
    entities = check_messages([(topic, payload)], "device")
    assert {e["default_entity_id"] for e in entities} >= {
        "sensor.edgevlm_garage_last_answer", "event.edgevlm_garage_answer_ready",
        "image.edgevlm_garage_driveway_snapshot"}
    assert all(e["availability"][0]["topic"] == "edgevlm/garage/bridge/state"
               for e in entities if e["unique_id"] != f"{topic.split('/')[2]}_connection_state")

    ha = mqtt_client()
    ha.sub(f"{PREFIX}/device/#")
    ha.pub(topic, b"", retain=True)  # HA lost it (e.g. a broker without persistence)
    ha.inbox.wait(topic, where=lambda m: m.payload == b"")
    ha.pub(f"{PREFIX}/status", b"online")  # HA's birth message, not retained
    again = ha.inbox.wait(topic, where=lambda m: bool(m.payload))  # after a random 1-5 s
    assert again[-1].payload == payload
    assert service.online.is_set()


def test_removal_of_an_unknown_device_is_harmless(mqtt_client: Callable[..., MqttTestClient]
                                                  ) -> None:
    client = mqtt_client()
    publish_all(client, removal_messages(ctx()))
    assert retained_snapshot(mqtt_client(), f"{PREFIX}/#") == {}
    assert paho.topic_matches_sub(f"{PREFIX}/device/+/config", removal_messages(ctx())[0][0])


def test_daemon_component_form_publishes_one_valid_message_per_entity(
        make_service: Callable[..., Any], mqtt_client: Callable[..., MqttTestClient]) -> None:
    make_service({"mqtt.node_id": "porch", "homeassistant.form": "component",
                  "cameras.door.enabled": True})
    retained = retained_snapshot(mqtt_client(), f"{PREFIX}/+/+/+/config")
    entities = check_messages(sorted(retained.items()), "component")
    assert len(entities) == len(BRIDGE_ENTITIES) + len(CAMERA_ENTITIES)
    assert {e["p"] for e in entities} == {"sensor", "binary_sensor", "event", "image", "switch",
                                          "text", "number"}
