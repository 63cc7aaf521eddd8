"""Issue 21 over a real broker: camera options set from Home Assistant survive a daemon
restart (stop the service, start a new one on the same broker), a removed camera loses its
discovery components, and each description fires the camera's event entity.

The rule under test is :mod:`edgevlm.sources.camera_options` (Zigbee2MQTT-like: its ``state.json``
beside retained commands). Home Assistant's MQTT ``switch``/``text``/``number`` publish their
command retained when the discovery says ``retain: true`` (home-assistant/core
``homeassistant/components/mqtt/switch.py``, ``text.py``, ``number.py``: ``CONF_RETAIN``
passed to ``async_publish``); ``emulate_ha_command`` does the same from the discovery read
back from the broker.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.helpers import image_bytes
from tests.mqtt.conftest import MqttTestClient, wait_until
from tests.mqtt.test_discovery import retained_snapshot

ROOT = "edgevlm/node1/camera"


def discovered(client: MqttTestClient) -> dict[str, Any]:
    (payload,) = retained_snapshot(client, "homeassistant/device/+/config").values()
    return dict(json.loads(payload)["cmps"])


def emulate_ha_command(ha: MqttTestClient, component: dict[str, Any], value: str) -> None:
    """What HA does on a switch/text/number change: publish to ``command_topic``, retained
    only when the discovery asked for it."""
    ha.pub(component["command_topic"], value, retain=bool(component.get("retain", False)))


def retained_value(client: MqttTestClient, topic: str) -> bytes:
    snap = retained_snapshot(client, topic)
    return snap.get(topic, b"")


def restart(make_service: Callable[..., Any], service: Any, overrides: dict[str, Any]) -> Any:
    service.stop("restart")
    return make_service(overrides)


def test_a_camera_switched_off_in_home_assistant_stays_off_after_a_restart(
        make_service: Callable[..., Any], mqtt_client: Callable[..., MqttTestClient]) -> None:
    """Defect 3 without ``cache.dir``: the switch's discovery has ``retain: true``, so HA's
    OFF is retained and replayed to the restarted daemon (failed before: HA published it
    non-retained and the camera came back ON)."""
    overrides = {"cameras.door.max_tokens": 4}
    service = make_service(overrides)
    ha = mqtt_client()
    switch = discovered(ha)["door_enabled"]
    assert switch["retain"] is True
    emulate_ha_command(ha, switch, "OFF")
    wait_until(lambda: not service.sources.is_enabled("door"), what="camera OFF")

    service = restart(make_service, service, overrides)
    wait_until(lambda: not service.sources.is_enabled("door"), what="OFF after the restart")
    wait_until(lambda: retained_value(mqtt_client(), f"{ROOT}/door/state") == b"OFF",
               what="retained state OFF")
    client = mqtt_client()
    client.sub(f"{ROOT}/door/snapshot")
    client.pub(f"{ROOT}/door/image", image_bytes(96, 64, "JPEG", seed=1))
    client.pub(f"{ROOT}/door/set", "ON")  # then ON: the next frame is described
    described = image_bytes(96, 64, "JPEG", seed=2)
    wait_until(lambda: service.sources.is_enabled("door"), what="camera ON")
    client.pub(f"{ROOT}/door/image", described)
    assert [m.payload for m in client.inbox.wait(f"{ROOT}/door/snapshot")] == [described]


def test_with_cache_dir_a_live_off_wins_over_an_older_retained_on(
        make_service: Callable[..., Any], mqtt_client: Callable[..., MqttTestClient],
        tmp_path: Path) -> None:
    """Defect 3 with ``cache.dir``: a non-retained OFF (another client) is saved in
    ``camera_options.json`` and beats the broker's older retained ON at the restart."""
    overrides = {"cameras.door.max_tokens": 4, "cache.dir": str(tmp_path / "cache")}
    service = make_service(overrides)
    client = mqtt_client()
    client.pub(f"{ROOT}/door/set", "ON", retain=True)   # HA, long ago
    client.pub(f"{ROOT}/door/set", "OFF")               # a script, not retained
    wait_until(lambda: not service.sources.is_enabled("door"), what="camera OFF")
    saved = json.loads((tmp_path / "cache" / "camera_options.json").read_text())
    assert saved["cameras"]["door"]["enabled"] is False

    service = restart(make_service, service, overrides)
    assert not service.sources.is_enabled("door")  # from the file, before any message
    assert retained_value(mqtt_client(), f"{ROOT}/door/state") == b"OFF"
    assert not service.sources.is_enabled("door")  # the retained ON was ignored


def test_prompt_and_max_tokens_from_home_assistant_survive_a_restart(
        make_service: Callable[..., Any], mqtt_client: Callable[..., MqttTestClient],
        tmp_path: Path) -> None:
    """Defect 9: a ``text`` (prompt) and a ``number`` (max_tokens) per camera, persisted like
    Zigbee2MQTT's options; invalid values are refused."""
    overrides = {"cameras.door.max_tokens": 4, "cache.dir": str(tmp_path / "cache")}
    service = make_service(overrides)
    ha = mqtt_client()
    cmps = discovered(ha)
    ha.sub(f"{ROOT}/door/prompt", f"{ROOT}/door/max_tokens")
    ha.inbox.wait(f"{ROOT}/door/max_tokens", where=lambda m: m.payload == b"4")
    emulate_ha_command(ha, cmps["door_prompt"], "Is the {camera} door open?")
    emulate_ha_command(ha, cmps["door_max_tokens"], "12.0")  # HA's number sends a float
    emulate_ha_command(ha, cmps["door_max_tokens"], "99999")  # out of range: refused
    ha.inbox.wait(f"{ROOT}/door/max_tokens", where=lambda m: m.payload == b"12")
    ha.inbox.wait(f"{ROOT}/door/prompt",
                  where=lambda m: m.payload == b"Is the {camera} door open?")

    service = restart(make_service, service, overrides)
    cfg = service.sources._cameras["door"]
    assert (cfg.prompt, cfg.max_tokens) == ("Is the {camera} door open?", 12)
    late = mqtt_client()
    assert retained_value(late, f"{ROOT}/door/max_tokens") == b"12"
    assert retained_value(late, f"{ROOT}/door/prompt") == b"Is the {camera} door open?"


def test_a_camera_removed_from_the_config_loses_its_discovery_components(
        make_service: Callable[..., Any], mqtt_client: Callable[..., MqttTestClient],
        tmp_path: Path) -> None:
    """Defect 7: the cameras of the last discovery are kept in ``cache.dir``; a camera gone
    from the config is sent as ``{"p": <platform>}`` only, which removes that component of
    a device discovery in Home Assistant."""
    cache = str(tmp_path / "cache")
    service = make_service({"cameras.door.enabled": True, "cameras.yard.enabled": True,
                            "cache.dir": cache})
    assert "yard_snapshot" in discovered(mqtt_client())
    service = restart(make_service, service, {"cameras.door.enabled": True,
                                              "cache.dir": cache})
    cmps = discovered(mqtt_client())
    yard = {k: v for k, v in cmps.items() if k.startswith("yard_")}
    assert yard and all(set(v) == {"p"} for v in yard.values())
    assert "door_snapshot" in cmps and "unique_id" in cmps["door_snapshot"]


def test_a_description_fires_the_cameras_event_entity(
        make_service: Callable[..., Any], mqtt_client: Callable[..., MqttTestClient]) -> None:
    """Defect 7: HA's MQTT ``event`` entity (home-assistant/core
    ``homeassistant/components/mqtt/event.py``) reads JSON with ``event_type`` from
    ``state_topic``; the record is not retained (an event must not fire again)."""
    make_service({"cameras.door.max_tokens": 4})
    ha = mqtt_client()
    event = discovered(ha)["door_event"]
    ha.sub(event["state_topic"])
    ha.pub(f"{ROOT}/door/image", image_bytes(96, 64, "JPEG", seed=3))
    (record,) = ha.inbox.json(event["state_topic"])
    assert record["event_type"] == "description_ready" in event["event_types"]
    assert record["camera"] == "door" and isinstance(record["text"], str)
    assert {"label", "event_id", "at"} <= set(record)
    assert not ha.inbox.on(event["state_topic"])[0].retain
    assert retained_value(mqtt_client(), event["state_topic"]) == b""
