"""Home Assistant discovery: every payload checked against HA's MQTT schemas, and a golden copy.

The per-platform rules below were written from Home Assistant's MQTT component schemas
(``homeassistant/components/mqtt/{schemas,config,sensor,binary_sensor,event,image,switch}.py``):
required keys, the keys each platform accepts (HA silently drops unknown keys, so a typo
would never show up in HA's log), device/origin blocks and the device-discovery wrapper.
Templates are rendered with Jinja against real payloads (``Metrics.snapshot()``), so a
sensor with a unit really yields a number (or ``None`` = unknown) and a text state is at
most 255 characters.

Golden files: ``tests/fixtures/homeassistant/*.json``. After an intended change, regenerate
with ``EDGEVLM_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/unit/test_homeassistant.py``
and review the diff.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2.sandbox
import pytest

from edgevlm.config import default_config
from edgevlm.integrations.homeassistant import (
    BRIDGE_ENTITIES,
    CAMERA_ENTITIES,
    DiscoveryContext,
    board_id,
    discovery_context,
    discovery_messages,
    entity_configs,
    make_device_id,
    removal_messages,
)
from edgevlm.metrics import Metrics
from edgevlm.wire import protocol

GOLDEN = Path(__file__).parents[1] / "fixtures" / "homeassistant"

COMMON = {"name", "unique_id", "default_entity_id", "object_id", "availability",
          "availability_mode", "availability_topic", "availability_template", "payload_available",
          "payload_not_available", "device", "origin", "enabled_by_default", "entity_category",
          "entity_picture", "icon", "json_attributes_topic", "json_attributes_template", "qos",
          "encoding", "message_expiry_interval", "visible_by_default"}
PLATFORMS: dict[str, tuple[set[str], set[str]]] = {  # platform: (required, accepted)
    "sensor": ({"state_topic"}, {"state_topic", "value_template", "device_class",
                                 "expire_after", "force_update", "last_reset_value_template",
                                 "state_class", "unit_of_measurement", "options",
                                 "suggested_display_precision"}),
    "binary_sensor": ({"state_topic"}, {"state_topic", "value_template", "device_class",
                                        "expire_after", "force_update", "off_delay",
                                        "payload_on", "payload_off"}),
    "event": ({"state_topic", "event_types"}, {"state_topic", "value_template",
                                               "device_class", "event_types"}),
    "image": (set(), {"image_topic", "url_topic", "content_type", "image_encoding",
                      "url_template"}),
    "switch": ({"command_topic"}, {"command_topic", "command_template", "state_topic",
                                   "value_template", "payload_on", "payload_off", "state_on",
                                   "state_off", "optimistic", "retain", "device_class"}),
    "text": ({"command_topic"}, {"command_topic", "command_template", "state_topic",
                                 "value_template", "min", "max", "mode", "pattern", "retain"}),
    "number": ({"command_topic"}, {"command_topic", "command_template", "state_topic",
                                   "value_template", "min", "max", "step", "mode", "retain",
                                   "optimistic", "payload_reset", "device_class",
                                   "unit_of_measurement"}),
}
DEVICE_CLASSES = {"sensor": {"duration", "data_size"},
                  "binary_sensor": {"running", "connectivity"}, "event": set(),
                  "image": set(), "switch": {"switch", "outlet"}, "text": set(),
                  "number": set()}
DURATION_UNITS = {"d", "h", "min", "s", "ms"}
DEVICE_KEYS = {"identifiers", "connections", "manufacturer", "model", "model_id", "name",
               "hw_version", "serial_number", "sw_version", "via_device", "suggested_area",
               "configuration_url"}
ORIGIN_ABBREVIATIONS = {"name": "name", "sw": "sw_version", "url": "support_url"}
TOPIC = re.compile(r"^[^#+\x00]+$")


def ctx(form: str = "device", cameras: tuple[str, ...] = ("driveway", "front_door"),
        node: str = "garage") -> DiscoveryContext:
    return DiscoveryContext(prefix="homeassistant", form=form,  # type: ignore[arg-type]
                            base_topic="edgevlm", node_id=node,
                            device_id=make_device_id("0123456789abcdef", "edgevlm", node),
                            version="0.1.0", model_name="Qwen3-VL-2B", cameras=cameras)


def check_device(device: dict[str, Any]) -> None:
    assert set(device) <= DEVICE_KEYS, set(device) - DEVICE_KEYS
    assert device["identifiers"] and all(isinstance(i, str) for i in device["identifiers"])
    assert device["configuration_url"].startswith(("http://", "https://"))


def check_origin(origin: dict[str, Any]) -> None:
    full = {ORIGIN_ABBREVIATIONS.get(k, k): v for k, v in origin.items()}
    assert set(full) <= {"name", "sw_version", "support_url"} and full["name"]
    assert full["support_url"].startswith("https://")


def check_entity(platform: str, config: dict[str, Any]) -> None:
    """One entity against HA's schema for its platform (the rules in the module docstring)."""
    required, accepted = PLATFORMS[platform]
    assert required <= set(config), (platform, required - set(config))
    unknown = set(config) - accepted - COMMON
    assert not unknown, f"{platform} does not accept {unknown}"
    assert config["unique_id"] and isinstance(config["name"], str)
    assert re.fullmatch(rf"{platform}\.[a-z0-9_]+", config["default_entity_id"])
    assert config["object_id"] == config["default_entity_id"].split(".", 1)[1]
    for key, value in config.items():
        if key.endswith("_topic"):
            assert TOPIC.match(value) and "//" not in value, (key, value)
    assert not ({"availability", "availability_topic"} <= set(config))
    for entry in config.get("availability", []):
        assert TOPIC.match(entry["topic"])
    assert config.get("availability_mode", "latest") in {"all", "any", "latest"}
    assert config.get("entity_category") in (None, "config", "diagnostic")
    assert config.get("device_class") in (None, *DEVICE_CLASSES[platform])
    assert config.get("state_class") in (None, "measurement", "total", "total_increasing")
    if config.get("device_class") == "duration":
        assert config["unit_of_measurement"] in DURATION_UNITS
    if platform == "image":
        assert ("image_topic" in config) != ("url_topic" in config)
        assert not ("content_type" in config and "url_topic" in config)
    if platform == "event":
        assert config["event_types"] and all(isinstance(t, str) for t in config["event_types"])


def check_messages(messages: list[tuple[str, bytes]], form: str) -> list[dict[str, Any]]:
    """Validate every message; return the entity configs with their platform under "p"."""
    entities = []
    for topic, payload in messages:
        body = json.loads(payload)
        if form == "device":
            assert re.fullmatch(r"homeassistant/device/[A-Za-z0-9_-]+/config", topic)
            assert {"dev", "o", "cmps"} <= set(body)
            check_device(body["dev"])
            check_origin(body["o"])
            for component in body["cmps"].values():
                assert component["p"] in PLATFORMS and component["unique_id"]
                check_entity(component["p"], {k: v for k, v in component.items() if k != "p"})
                entities.append(component)
        else:
            match = re.fullmatch(r"homeassistant/(\w+)/[A-Za-z0-9_-]+/[A-Za-z0-9_-]+/config",
                                 topic)
            assert match and match.group(1) in PLATFORMS, topic
            check_device(body["device"])
            check_origin(body["origin"])
            check_entity(match.group(1), {k: v for k, v in body.items()
                                          if k not in ("device", "origin")})
            entities.append({"p": match.group(1), **body})
    return entities


@pytest.mark.parametrize("form", ["device", "component"])
@pytest.mark.parametrize("cameras", [(), ("driveway", "front_door")])
def test_every_payload_passes_home_assistants_schema(form: str, cameras: tuple[str, ...]
                                                     ) -> None:
    entities = check_messages(discovery_messages(ctx(form, cameras)), form)
    assert len(entities) == len(BRIDGE_ENTITIES) + len(cameras) * len(CAMERA_ENTITIES)
    unique_ids = [e["unique_id"] for e in entities]
    entity_ids = [e["default_entity_id"] for e in entities]
    assert len(set(unique_ids)) == len(unique_ids) and len(set(entity_ids)) == len(entity_ids)


def test_checker_rejects_what_home_assistant_would_reject() -> None:
    good = entity_configs(ctx())["last_answer"]
    base = {k: v for k, v in good.items() if k != "p"}
    for broken in ({**base, "stat_topic": "x"}, {k: v for k, v in base.items()
                                                  if k != "state_topic"},
                   {**base, "default_entity_id": "binary_sensor.x"},
                   {**base, "availability_topic": "a/b"}, {**base, "object_id": "x"},
                   {**base, "entity_category": "bogus"}):
        with pytest.raises(AssertionError):
            check_entity("sensor", broken)


def test_the_entities_the_issue_asks_for() -> None:
    configs = entity_configs(ctx(cameras=("driveway",)))
    platforms = {key: c["p"] for key, c in configs.items()}
    for key in ("last_answer", "ttft_p50", "tokens_per_s", "queue_depth", "cache_hit_rate",
                "requests", "errors"):
        assert platforms[key] == "sensor"
    assert platforms["busy"] == "binary_sensor" and platforms["answer_ready"] == "event"
    assert configs["answer_ready"]["event_types"] == ["answer_ready"]
    assert configs["answer_ready"]["state_topic"] == "edgevlm/garage/bridge/event"
    assert configs["busy"]["state_topic"] == "edgevlm/garage/bridge/busy"
    image = configs["driveway_snapshot"]
    assert image["p"] == "image" and image["content_type"] == "image/jpeg"
    assert image["image_topic"] == "edgevlm/garage/camera/driveway/snapshot"
    assert [a["topic"] for a in image["availability"]] == [
        "edgevlm/garage/bridge/state", "edgevlm/garage/camera/driveway/state"]
    assert image["availability_mode"] == "all"
    switch = configs["driveway_enabled"]
    assert switch["command_topic"] == "edgevlm/garage/camera/driveway/set"
    assert [a["topic"] for a in switch["availability"]] == ["edgevlm/garage/bridge/state"]
    assert configs["driveway_description"]["json_attributes_topic"] == (
        "edgevlm/garage/camera/driveway/description")


def test_unique_ids_are_stable_and_distinct_per_board_node_and_base_topic() -> None:
    assert discovery_messages(ctx()) == discovery_messages(ctx())
    ids = {make_device_id(b, base, n) for b in ("a", "b") for base in ("edgevlm", "vlm2")
           for n in ("garage", "porch")}
    assert len(ids) == 8 and all(re.fullmatch(r"edgevlm_[0-9a-f]{12}", i) for i in ids)
    assert board_id() == board_id() and re.fullmatch(r"[0-9a-f]{16}", board_id())


def test_context_from_config() -> None:
    config = default_config(env={}, overrides={
        "mqtt.node_id": "garage", "homeassistant.form": "component",
        "cameras.zz.enabled": True, "cameras.aa.frigate": True})
    c = discovery_context(config, "0.1.0", "demo", board="0123456789abcdef")
    assert (c.form, c.node_id, c.cameras, c.prefix) == ("component", "garage", ("aa", "zz"),
                                                        "homeassistant")
    assert c.device_id == ctx().device_id


def test_removal_messages_empty_every_discovery_topic() -> None:
    for form in ("device", "component"):
        added = discovery_messages(ctx(form))
        removed = removal_messages(ctx(form))
        assert [t for t, _ in removed] == [t for t, _ in added]
        assert all(payload == b"" for _, payload in removed)


def render(template: str, payload: Any, this: Any = None) -> str:
    """As HA's ``MqttValueTemplate`` renders it: ``value``, ``value_json`` and ``this`` (the
    entity's current state object; homeassistant/components/mqtt/models.py, ATTR_THIS)."""
    env = jinja2.sandbox.ImmutableSandboxedEnvironment()
    variables = {"value": json.dumps(payload), "value_json": payload}
    if this is not None:
        variables["this"] = this
    return env.from_string(template).render(**variables)


@dataclass
class HAState:
    """What ``this`` is in an MQTT template: the entity's state and attributes."""

    state: str
    attributes: dict[str, Any]


# homeassistant/components/mqtt/const.py MQTT_ATTRIBUTES_BLOCKED (a part): HA's own
# attributes, dropped from a json_attributes message
HA_OWN_ATTRIBUTES = {"friendly_name", "icon", "device_class", "unit_of_measurement"}


def receive(config: dict[str, Any], entity: HAState, payload: dict[str, Any]) -> HAState:
    """One message on the sensor's state + attributes topic, as HA's MQTT sensor handles it
    (value_template -> state; json_attributes_template -> a dict, blocked keys dropped)."""
    state = render(config["value_template"], payload, entity)
    attributes = json.loads(render(config["json_attributes_template"], payload, entity))
    assert isinstance(attributes, dict)
    kept = {k: v for k, v in attributes.items() if k not in HA_OWN_ATTRIBUTES}
    return HAState(state, {**{k: entity.attributes[k] for k in HA_OWN_ATTRIBUTES
                              if k in entity.attributes}, **kept})


def test_a_skipped_or_failed_record_leaves_the_description_sensor_as_it_was() -> None:
    """Issue 21 (7): a Frigate event's ``skipped``/``failed`` record is on the description
    topic (non-retained); the sensor keeps the last description and its attributes."""
    config = entity_configs(ctx(cameras=("driveway",)))["driveway_description"]
    assert "this.state" in config["value_template"]
    entity = HAState("unknown", {"friendly_name": "Driveway description", "icon": "mdi:cctv"})
    good = {"camera": "driveway", "label": "car", "event_id": "e1", "text": "A red car.",
            "model": "m", "metrics": {"total_ms": 900.0}, "at": "2026-11-30T12:00:00.000Z",
            "type": "description", "id": "e1", "description": "A red car."}
    entity = receive(config, entity, good)
    assert entity.state == "A red car." and entity.attributes["event_id"] == "e1"
    before = HAState(entity.state, dict(entity.attributes))
    for status, reason in (("skipped", "no_snapshot"), ("failed", "busy")):
        record = {"camera": "driveway", "label": "person", "event_id": "e2", "id": "e2",
                  "status": status, "reason": reason, "detail": "...", "text": None,
                  "at": "2026-11-30T12:01:00.000Z"}
        entity = receive(config, entity, record)
        assert entity == before, status
    entity = receive(config, entity, {**good, "text": "A blue car.", "event_id": "e3"})
    assert entity.state == "A blue car." and entity.attributes["event_id"] == "e3"
    assert entity.attributes["friendly_name"] == "Driveway description"
    skipped = {"camera": "driveway", "event_id": "e4", "status": "skipped",
               "reason": "camera_off", "text": None}
    for shown in ("unknown", "unavailable"):  # no description yet / camera switched off
        nothing = receive(config, HAState(shown, {"friendly_name": "D"}), skipped)
        assert nothing == HAState("None", {"friendly_name": "D"}), shown  # "None": unknown


def sample_payloads() -> list[dict[str, Any]]:
    empty = Metrics().snapshot()
    m = Metrics()
    for error in (None, None, "busy"):
        m.received()
        m.finished(error, protocol.Metrics(ttft_ms=120.5, tpot_ms=25, total_ms=900),
                   completion_tokens=20)
    return [empty, m.snapshot()]


def test_templates_render_numbers_or_unknown_and_short_text() -> None:
    configs = entity_configs(ctx(cameras=("driveway",)))
    long_text = "a cat " * 200
    answer = {"text": long_text[:255], "full_text": long_text, "model": "m", "id": "r1",
              "camera": None, "finish_reason": "stop", "at": "2026-11-30T12:00:00Z"}
    description = {"camera": "driveway", "label": "car", "event_id": "e1", "text": long_text,
                   "model": "m", "metrics": {}, "at": "2026-11-30T12:00:00Z"}
    rendered_health = 0
    for key, config in configs.items():
        template = config.get("value_template")
        if template is None:
            continue
        topic = config["state_topic"]
        payloads = (sample_payloads() if topic.endswith("bridge/health")
                    else [{"version": "0.1.0"}] if topic.endswith("bridge/info")
                    else [answer] if topic.endswith("last_answer") else [description])
        for payload in payloads:
            state = render(template, payload)
            if "unit_of_measurement" in config or "state_class" in config:
                assert state == "None" or float(state) >= 0, (key, state)
                rendered_health += 1
            else:
                assert 0 < len(state) <= 255, (key, len(state))
        if "json_attributes_template" in config:
            for payload in payloads:
                attributes = json.loads(render(config["json_attributes_template"], payload))
                assert isinstance(attributes, dict)
    assert rendered_health >= 14
    hit = render(configs["cache_hit_rate"]["value_template"],
                 {"cache": {"hit_rate": 0.75}})
    assert hit == "75.0"


def test_golden_copies() -> None:
    for form in ("device", "component"):
        produced = [{"topic": t, "payload": json.loads(p)}
                    for t, p in discovery_messages(ctx(form))]
        path = GOLDEN / f"discovery_{form}.json"
        if os.environ.get("EDGEVLM_REGEN_GOLDEN"):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(produced, indent=2) + "\n", encoding="utf-8")
        assert path.exists(), f"missing {path}; run with EDGEVLM_REGEN_GOLDEN=1"
        assert json.loads(path.read_text(encoding="utf-8")) == produced, (
            f"{path} differs; if intended, regenerate with EDGEVLM_REGEN_GOLDEN=1")


def test_camera_entity_table_is_complete() -> None:
    assert {d.platform for d in CAMERA_ENTITIES} == {"image", "sensor", "switch", "text",
                                                     "number", "event"}
    no_switch = DiscoveryContext(**{**ctx().__dict__, "camera_switches": False})
    assert not any(c["p"] == "switch" for c in entity_configs(no_switch).values())


def test_issue_21_entities() -> None:
    """Issue 21 (5, 7, 9), checked against Home Assistant's MQTT integration
    (home-assistant/core homeassistant/components/mqtt/): ``schemas.py``
    ``MQTT_ENTITY_COMMON_SCHEMA`` (``object_id``, ``entity_category``; before 2025.10 no
    ``default_entity_id``, so older releases drop it) and ``entity.py``
    ``init_entity_id_from_config`` (the entity id from ``object_id``); ``event.py``
    (``event_types``, JSON ``event_type``), ``text.py`` (``min``/``max`` <= 255, ``mode``),
    ``number.py`` (``min``/``max``/``step``, default max 100), ``binary_sensor.py``
    (``device_class: connectivity``). Conventions from Zigbee2MQTT
    ``lib/extension/homeassistant.ts`` ``getBridgeEntity``: ``connection_state``
    (connectivity, diagnostic, ``availability: false``) and a diagnostic version sensor."""
    configs = entity_configs(ctx(cameras=("driveway",)))
    for key in ("ttft_p50", "answer_time_p50", "tokens_per_s", "queue_depth",
                "cache_hit_rate", "requests", "errors", "memory", "connection_state",
                "version"):
        assert configs[key]["entity_category"] == "diagnostic", key
    for key in ("last_answer", "busy", "answer_ready", "driveway_description"):
        assert "entity_category" not in configs[key], key
    conn = configs["connection_state"]
    assert (conn["p"], conn["device_class"], conn["state_topic"]) == (
        "binary_sensor", "connectivity", "edgevlm/garage/bridge/state")
    assert (conn["payload_on"], conn["payload_off"]) == ("online", "offline")
    assert "availability" not in conn  # else it would be "unavailable", never "off"
    version = configs["version"]
    assert version["state_topic"] == "edgevlm/garage/bridge/info"
    assert render(version["value_template"], {"version": "1.2.3"}) == "1.2.3"
    for c in configs.values():  # entity ids right before and after HA 2025.10
        assert c["default_entity_id"] == f"{c['p']}.{c['object_id']}"
    assert configs["driveway_enabled"]["retain"] is True
    prompt, tokens = configs["driveway_prompt"], configs["driveway_max_tokens"]
    assert (prompt["p"], prompt["command_topic"], prompt["state_topic"], prompt["max"]) == (
        "text", "edgevlm/garage/camera/driveway/prompt/set",
        "edgevlm/garage/camera/driveway/prompt", 255)
    assert (tokens["p"], tokens["min"], tokens["max"], tokens["step"]) == ("number", 1, 4096, 1)
    assert tokens["command_topic"] == "edgevlm/garage/camera/driveway/max_tokens/set"
    assert prompt["retain"] is tokens["retain"] is True
    event = configs["driveway_event"]
    assert event["p"] == "event" and event["state_topic"] == "edgevlm/garage/camera/driveway/event"
    assert event["event_types"] == ["description_ready", "description_skipped",
                                    "description_failed"]


@pytest.mark.parametrize("form", ["device", "component"])
def test_a_removed_camera_has_its_components_removed(form: str) -> None:
    import dataclasses

    c = dataclasses.replace(ctx(form, cameras=("driveway",)), removed_cameras=("porch",))
    messages = discovery_messages(c)
    if form == "device":
        (_, payload), = messages
        cmps = json.loads(payload)["cmps"]
        gone = {k: v for k, v in cmps.items() if k.startswith("porch_")}
        assert len(gone) == len(CAMERA_ENTITIES)
        assert all(set(v) == {"p"} for v in gone.values())  # HA: only "p" removes it
        check_messages([(t, json.dumps({**json.loads(p), "cmps": {
            k: v for k, v in json.loads(p)["cmps"].items() if not k.startswith("porch_")}}
        ).encode()) for t, p in messages], form)
    else:
        empty = [t for t, p in messages if p == b""]
        assert len(empty) == len(CAMERA_ENTITIES) and all("/porch_" in t for t in empty)
        check_messages([(t, p) for t, p in messages if p], form)


BLUEPRINTS = Path(__file__).parents[2] / "integration/homeassistant/blueprints/automation/edgevlm"


def test_the_frigate_blueprint_triggers_on_the_camera_event_entity() -> None:
    """Issue 21 (8): a second blueprint notifies on Frigate's ``new`` with a ``tag`` and
    replaces it when the camera's event entity fires (ready/skipped/failed), instead of
    waiting a fixed time after motion (Frigate's ``end`` often comes 30-60 s later)."""
    from tests.unit.test_homeassistant_integration import discovered_entity_ids, load

    bp = load(BLUEPRINTS / "describe_frigate_event.yaml")
    meta = bp["blueprint"]
    assert meta["domain"] == "automation"
    versions = {load(p)["blueprint"]["homeassistant"]["min_version"]
                for p in BLUEPRINTS.glob("*.yaml")}
    assert versions == {"2024.11.0"}  # device discovery; the same in docs/homeassistant.md
    event_input = meta["input"]["camera_event"]
    assert event_input["default"] in discovered_entity_ids()
    assert event_input["default"].startswith("event.") and event_input["default"].endswith(
        "_driveway_event")
    triggers = {t["id"]: t for t in bp["triggers"]}
    edgevlm = triggers["edgevlm"]
    assert (edgevlm["trigger"], edgevlm["entity_id"]) == ("state", {"!input": "camera_event"})
    assert {"unavailable", "unknown"} <= set(edgevlm["not_from"]) & set(edgevlm["not_to"])
    frigate = triggers["frigate_new"]
    assert frigate["trigger"] == "mqtt" and meta["input"][frigate["topic"]["!input"]][
        "default"] == "frigate/events"
    notifications = [step for option in bp["actions"][0]["choose"]
                     for step in option["sequence"] if "action" in step]
    assert len(notifications) == 2
    tags = [n["data"]["data"]["tag"] for n in notifications]
    assert tags == ["{{ trigger.payload_json.after.id }}", "{{ fired.event_id }}"]
    text = (BLUEPRINTS / "describe_frigate_event.yaml").read_text(encoding="utf-8")
    assert "description_ready" in text
    assert "fired.reason" in text  # skipped/failed say why
