"""Home Assistant MQTT discovery, built from a table of entity descriptions.

Two forms, the same entities:

- ``device`` (default): one retained message on ``<prefix>/device/<device_id>/config`` with
  ``dev`` (the device), ``o`` (origin) and ``cmps`` (every entity, each with ``p`` = platform
  and a ``unique_id``);
- ``component``: one retained message per entity on
  ``<prefix>/<platform>/<device_id>/<key>/config`` (older Home Assistant, openHAB), each with
  the device and origin blocks.

The daemon's device carries the sensors that read ``bridge/last_answer`` and ``bridge/health``
(:mod:`edgevlm.metrics` writes the JSON paths the templates read; the telemetry ones are
``entity_category: diagnostic``), ``bridge/busy``, the ``bridge/event`` "answer ready" event
and, as Zigbee2MQTT's bridge does (``lib/extension/homeassistant.ts``, ``getBridgeEntity``),
a ``connectivity`` binary sensor on ``bridge/state`` without availability (so it reads
"disconnected" rather than "unavailable") and a version sensor on ``bridge/info``. Each
camera adds an ``image`` (last analysed frame), a ``sensor`` (last description: state cut to
255 characters, the whole payload in attributes), a ``switch`` (enable/disable), a ``text``
(its prompt), a ``number`` (its ``max_tokens``) and an ``event`` on ``camera/<cam>/event``
(``description_ready``/``_skipped``/``_failed``). Switch, text and number ask Home Assistant
to publish their commands retained (:mod:`edgevlm.sources.camera_options` keeps them across
restarts). Bridge entities are available while ``bridge/state`` is ``online``; image and
description also need the camera's state ``ON`` (availability mode ``all``), the switch only
the bridge, so a disabled camera can be switched back on. A camera removed from the config
(known from the options file in ``cache.dir``) has its components removed: ``{"p": ...}``
only in the device form, an empty retained config in the component form.

``unique_id`` = ``<device_id>_<key>``, ``device_id`` = ``edgevlm_<hash of board id, base topic,
node id>``: stable across restarts and renames of the friendly name, distinct per board and
per instance. Entity ids are suggested twice: ``default_entity_id``
(``sensor.edgevlm_<node>_<key>``, read by Home Assistant >= 2025.10) and ``object_id``
(``edgevlm_<node>_<key>``, read by older releases, which drop ``default_entity_id`` as an
unknown key), so the ids are the same from 2024.11 (device discovery) on.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

log = logging.getLogger(__name__)

PROJECT_URL = "https://github.com/edgevlm/edgevlm"
DOCS_URL = f"{PROJECT_URL}/blob/main/docs/homeassistant.md"
STATE_MAX = 255  # Home Assistant drops a state longer than this

Platform = Literal["sensor", "binary_sensor", "event", "image", "switch", "text", "number"]
Form = Literal["device", "component"]


@dataclass(frozen=True)
class DiscoveryContext:
    """Everything discovery depends on; :func:`discovery_context` builds it from a Config."""

    prefix: str
    form: Form
    base_topic: str
    node_id: str
    device_id: str
    version: str
    model_name: str
    cameras: tuple[str, ...]
    camera_switches: bool = True
    removed_cameras: tuple[str, ...] = ()  # discovered before, gone from the config now
    # camera -> (field, kind) of the top-level fields of its json_schema (schema_fields)
    camera_fields: Mapping[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class EntityDescription:
    """One entity: ``key`` is stable (unique_id suffix); ``*_topic`` options are relative to
    ``<base>/<node>/`` and may use ``{cam}``; ``name`` may use ``{title}`` (camera name)."""

    key: str
    platform: Platform
    name: str
    options: Mapping[str, Any] = field(default_factory=dict)
    camera_availability: bool = False  # also needs camera/<cam>/state == ON
    availability: bool = True  # False: always available (the connectivity sensor)


def _health(path: str) -> str:
    return f"{{{{ value_json.{path} }}}}"


_TEXT = f"{{{{ (value_json.text or '')[:{STATE_MAX}] }}}}"
# A Frigate event's skipped/failed record (non-retained, with ``status``) shares the
# description topic: the sensor keeps its state and attributes for it. ``this`` is the
# entity's current state, which HA's MqttValueTemplate passes to value and attribute
# templates (homeassistant/components/mqtt/models.py, ATTR_THIS). While the entity is
# unknown or unavailable (a camera switched off: its ``camera_off`` records) ``this`` holds
# no description: the state becomes unknown ("None", HA's PAYLOAD_NONE) and the attributes
# empty, never the literal word "unavailable".
_KEEP = "value_json.status is defined"
_HAS_STATE = "this.state not in ('unknown', 'unavailable')"
_DESCRIPTION = (f"{{{{ (this.state if {_HAS_STATE} else 'None') if {_KEEP} "
                f"else (value_json.text or '')[:{STATE_MAX}] }}}}")
_DESCRIPTION_ATTRIBUTES = (f"{{{{ (this.attributes if {_HAS_STATE} else {{}}) | tojson "
                           f"if {_KEEP} else value }}}}")
_MEASURE = {"state_topic": "bridge/health", "state_class": "measurement",
            "entity_category": "diagnostic"}
_DIAGNOSTIC = {"entity_category": "diagnostic"}

BRIDGE_ENTITIES: tuple[EntityDescription, ...] = (
    EntityDescription("last_answer", "sensor", "Last answer", {
        "state_topic": "bridge/last_answer", "value_template": _TEXT,
        "json_attributes_topic": "bridge/last_answer", "icon": "mdi:text-box-outline"}),
    EntityDescription("ttft_p50", "sensor", "Time to first token", {
        **_MEASURE, "value_template": _health("latency_ms.ttft.p50"),
        "unit_of_measurement": "ms", "device_class": "duration",
        "json_attributes_topic": "bridge/health",
        "json_attributes_template": "{{ value_json.latency_ms | tojson }}"}),
    EntityDescription("answer_time_p50", "sensor", "Answer time", {
        **_MEASURE, "value_template": _health("latency_ms.total.p50"),
        "unit_of_measurement": "ms", "device_class": "duration"}),
    EntityDescription("tokens_per_s", "sensor", "Tokens per second", {
        **_MEASURE, "value_template": _health("tokens_per_s"),
        "unit_of_measurement": "tokens/s", "icon": "mdi:speedometer"}),
    EntityDescription("queue_depth", "sensor", "Queue depth", {
        **_MEASURE, "value_template": _health("queue_depth"), "icon": "mdi:tray-full"}),
    EntityDescription("cache_hit_rate", "sensor", "Cache hit rate", {
        **_MEASURE, "unit_of_measurement": "%", "icon": "mdi:cached",
        "value_template": "{{ (value_json.cache.hit_rate * 100) | round(1) "
                          "if value_json.cache.hit_rate is not none else none }}",
        "json_attributes_topic": "bridge/health",
        "json_attributes_template": "{{ value_json.cache | tojson }}"}),
    EntityDescription("requests", "sensor", "Requests", {
        "state_topic": "bridge/health", "state_class": "total_increasing", **_DIAGNOSTIC,
        "value_template": _health("requests.received"), "icon": "mdi:counter",
        "json_attributes_topic": "bridge/health",
        "json_attributes_template": "{{ value_json.requests | tojson }}"}),
    EntityDescription("errors", "sensor", "Errors", {
        "state_topic": "bridge/health", "state_class": "total_increasing", **_DIAGNOSTIC,
        "value_template": _health("requests.errored"), "icon": "mdi:alert-circle-outline",
        "json_attributes_topic": "bridge/health",
        "json_attributes_template": "{{ value_json.requests.errors_by_type | tojson }}"}),
    EntityDescription("memory", "sensor", "Memory", {
        **_MEASURE, "value_template": _health("rss_bytes"), "unit_of_measurement": "B",
        "device_class": "data_size"}),
    EntityDescription("busy", "binary_sensor", "Busy", {
        "state_topic": "bridge/busy", "payload_on": "ON", "payload_off": "OFF",
        "device_class": "running"}),
    EntityDescription("answer_ready", "event", "Answer ready", {
        "state_topic": "bridge/event", "event_types": ["answer_ready"],
        "icon": "mdi:message-text-outline"}),
    EntityDescription("connection_state", "binary_sensor", "Connection state", {
        "state_topic": "bridge/state", "payload_on": "online", "payload_off": "offline",
        "device_class": "connectivity", **_DIAGNOSTIC}, availability=False),
    EntityDescription("pool_member", "binary_sensor", "Pool member", {
        "state_topic": "bridge/pool", "value_template": "{{ 'ON' if value_json.member "
        "else 'OFF' }}", "json_attributes_topic": "bridge/pool",
        "icon": "mdi:server-network", **_DIAGNOSTIC}),
    EntityDescription("version", "sensor", "Version", {
        "state_topic": "bridge/info", "value_template": "{{ value_json.version }}",
        "icon": "mdi:information-outline", **_DIAGNOSTIC}),
)

CAMERA_EVENT_TYPES = ["description_ready", "description_skipped", "description_failed"]

CAMERA_ENTITIES: tuple[EntityDescription, ...] = (
    EntityDescription("snapshot", "image", "{title} snapshot", {
        "image_topic": "camera/{cam}/snapshot", "content_type": "image/jpeg"},
        camera_availability=True),
    EntityDescription("description", "sensor", "{title} description", {
        "state_topic": "camera/{cam}/description", "value_template": _DESCRIPTION,
        "json_attributes_topic": "camera/{cam}/description",
        "json_attributes_template": _DESCRIPTION_ATTRIBUTES, "icon": "mdi:cctv"},
        camera_availability=True),
    EntityDescription("enabled", "switch", "{title} analysis", {
        "command_topic": "camera/{cam}/set", "state_topic": "camera/{cam}/state",
        "payload_on": "ON", "payload_off": "OFF", "entity_category": "config",
        "retain": True, "icon": "mdi:cctv"}),
    EntityDescription("prompt", "text", "{title} prompt", {
        "command_topic": "camera/{cam}/prompt/set", "state_topic": "camera/{cam}/prompt",
        "min": 1, "max": 255, "mode": "text", "entity_category": "config",
        "retain": True, "icon": "mdi:message-text-outline"}),
    EntityDescription("max_tokens", "number", "{title} max tokens", {
        "command_topic": "camera/{cam}/max_tokens/set",
        "state_topic": "camera/{cam}/max_tokens", "min": 1, "max": 4096, "step": 1,
        "mode": "box", "entity_category": "config", "retain": True,
        "icon": "mdi:counter"}),
    EntityDescription("event", "event", "{title} description event", {
        "state_topic": "camera/{cam}/event", "event_types": CAMERA_EVENT_TYPES,
        "icon": "mdi:cctv"}),
)


def schema_fields(schema: Mapping[str, Any] | None) -> tuple[tuple[str, str], ...]:
    """(name, kind) of each top-level property of an object schema that a Home Assistant
    entity can show: ``binary`` (boolean), ``number`` (integer, number), ``text`` (string,
    enum); other properties (objects, arrays) stay in the description's attributes."""
    if not schema or schema.get("type") != "object":
        return ()
    out = []
    for name, spec in (schema.get("properties") or {}).items():
        spec = spec if isinstance(spec, Mapping) else {}
        kind = spec.get("type")
        if kind == "boolean":
            out.append((str(name), "binary"))
        elif kind in ("integer", "number"):
            out.append((str(name), "number"))
        elif kind == "string" or "enum" in spec:
            out.append((str(name), "text"))
    return tuple(out)


def _field_entity(name: str, kind: str) -> EntityDescription:
    """The entity of one JSON field of a camera's answer (``value`` on its description
    topic); a skipped/failed record, which has no ``value``, keeps the entity's state."""
    ref = f"value_json.value[{json.dumps(name)}]"
    keep = "value_json.value is not defined"
    title = "{title} " + name.replace("_", " ")
    key = f"field_{slug(name)}"
    topic = {"state_topic": "camera/{cam}/description"}
    if kind == "binary":
        return EntityDescription(key, "binary_sensor", title, {
            **topic, "payload_on": "ON", "payload_off": "OFF",
            "value_template": f"{{{{ ((this.state | upper) if {_HAS_STATE} else 'None') "
                              f"if {keep} else ('ON' if {ref} else 'OFF') }}}}"},
            camera_availability=True)
    options: dict[str, Any] = {**topic, "value_template": (
        f"{{{{ (this.state if {_HAS_STATE} else 'None') if {keep} else {ref} }}}}")}
    if kind == "number":
        options["state_class"] = "measurement"
    return EntityDescription(key, "sensor", title, options, camera_availability=True)


def board_id() -> str:
    """A stable id of this machine: the hashed machine-id (never the raw one), else the MAC."""
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            raw = Path(path).read_text(encoding="ascii").strip()
        except OSError:
            continue
        if raw:
            return hashlib.sha256(f"edgevlm:{raw}".encode()).hexdigest()[:16]
    log.warning("no machine-id; deriving the board id from the MAC address")
    return hashlib.sha256(f"edgevlm:{uuid.getnode():012x}".encode()).hexdigest()[:16]


def make_device_id(board: str, base_topic: str, node_id: str) -> str:
    """``edgevlm_<12 hex>``: one per board and daemon instance (base topic + node)."""
    digest = hashlib.sha256(f"{board}/{base_topic}/{node_id}".encode()).hexdigest()[:12]
    return f"edgevlm_{digest}"


def slug(text: str) -> str:
    """Home Assistant's entity-id alphabet: ``Front-Door`` -> ``front_door``."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_") or "x"


def discovery_context(config: Any, version: str, model_name: str,
                      board: str | None = None) -> DiscoveryContext:
    """The context for a :class:`edgevlm.config.Config` (duck-typed to avoid an import cycle)."""
    node = config.mqtt.resolved_node_id()
    base = config.mqtt.base_topic
    return DiscoveryContext(
        prefix=config.homeassistant.prefix, form=config.homeassistant.form, base_topic=base,
        node_id=node, device_id=make_device_id(board or board_id(), base, node),
        version=version, model_name=model_name, cameras=tuple(sorted(config.cameras)),
        camera_fields={cam: fields for cam, c in config.cameras.items()
                       if (fields := schema_fields(getattr(c, "json_schema", None)))})


def _root(ctx: DiscoveryContext) -> str:
    return f"{ctx.base_topic}/{ctx.node_id}"


def _availability(ctx: DiscoveryContext, cam: str | None) -> dict[str, Any]:
    entries: list[dict[str, str]] = [{"topic": f"{_root(ctx)}/bridge/state",
                                      "payload_available": "online",
                                      "payload_not_available": "offline"}]
    if cam is not None:
        entries.append({"topic": f"{_root(ctx)}/camera/{cam}/state",
                        "payload_available": "ON", "payload_not_available": "OFF"})
    return {"availability": entries, "availability_mode": "all"}


def _entity_key(desc: EntityDescription, cam: str | None) -> str:
    return desc.key if cam is None else f"{cam}_{desc.key}"


def _entity_config(ctx: DiscoveryContext, desc: EntityDescription, cam: str | None
                   ) -> dict[str, Any]:
    key = _entity_key(desc, cam)
    config: dict[str, Any] = {
        "name": desc.name.format(title=(cam or "").replace("_", " ").title()),
        "unique_id": f"{ctx.device_id}_{key}",
        "default_entity_id": f"{desc.platform}.edgevlm_{slug(ctx.node_id)}_{slug(key)}",
        "object_id": f"edgevlm_{slug(ctx.node_id)}_{slug(key)}",
    }
    for option, value in desc.options.items():
        if option.endswith("_topic"):
            value = f"{_root(ctx)}/{value.format(cam=cam)}"
        config[option] = value
    if desc.availability:
        config.update(_availability(ctx, cam if desc.camera_availability else None))
    return config


def _camera_entities(ctx: DiscoveryContext, cam: str
                     ) -> list[tuple[EntityDescription, str | None]]:
    fixed: list[tuple[EntityDescription, str | None]] = [
        (d, cam) for d in CAMERA_ENTITIES if d.platform != "switch" or ctx.camera_switches]
    return fixed + [(_field_entity(name, kind), cam)
                    for name, kind in ctx.camera_fields.get(cam, ())]


def _entities(ctx: DiscoveryContext) -> list[tuple[EntityDescription, str | None]]:
    out: list[tuple[EntityDescription, str | None]] = [(d, None) for d in BRIDGE_ENTITIES]
    for cam in ctx.cameras:
        out += _camera_entities(ctx, cam)
    return out


def _removed(ctx: DiscoveryContext) -> list[tuple[EntityDescription, str]]:
    return [(d, cam) for cam in ctx.removed_cameras if cam not in ctx.cameras
            for d in CAMERA_ENTITIES]


def device_block(ctx: DiscoveryContext) -> dict[str, Any]:
    return {"identifiers": [ctx.device_id], "name": f"edgevlm {ctx.node_id}",
            "manufacturer": "edgevlm", "model": ctx.model_name, "sw_version": ctx.version,
            "configuration_url": DOCS_URL}


def origin_block(ctx: DiscoveryContext) -> dict[str, Any]:
    return {"name": "edgevlm", "sw": ctx.version, "url": PROJECT_URL}


def device_topic(ctx: DiscoveryContext) -> str:
    return f"{ctx.prefix}/device/{ctx.device_id}/config"


def component_topic(ctx: DiscoveryContext, platform: str, key: str) -> str:
    return f"{ctx.prefix}/{platform}/{ctx.device_id}/{key}/config"


def entity_configs(ctx: DiscoveryContext) -> dict[str, dict[str, Any]]:
    """Every entity's config (without device/origin), keyed by its component key."""
    return {_entity_key(d, cam): {"p": d.platform, **_entity_config(ctx, d, cam)}
            for d, cam in _entities(ctx)}


def _dumps(payload: Mapping[str, Any]) -> bytes:
    return json.dumps(payload, separators=(",", ":"), sort_keys=False).encode()


def discovery_messages(ctx: DiscoveryContext) -> list[tuple[str, bytes]]:
    """(topic, payload) to publish retained with QoS 1, on connect and on HA's birth."""
    configs = entity_configs(ctx)
    removed = {_entity_key(d, cam): d.platform for d, cam in _removed(ctx)}
    if ctx.form == "device":
        # Home Assistant removes a component of a device discovery sent with only its "p"
        cmps = {**configs, **{key: {"p": platform} for key, platform in removed.items()}}
        return [(device_topic(ctx), _dumps({"dev": device_block(ctx), "o": origin_block(ctx),
                                            "cmps": cmps}))]
    messages = []
    for key, config in configs.items():
        platform = config.pop("p")
        payload = {**config, "device": device_block(ctx), "origin": origin_block(ctx)}
        messages.append((component_topic(ctx, platform, key), _dumps(payload)))
    messages += [(component_topic(ctx, platform, key), b"") for key, platform in removed.items()]
    return messages


def removal_messages(ctx: DiscoveryContext) -> list[tuple[str, bytes]]:
    """Empty retained payloads that remove what :func:`discovery_messages` created."""
    return [(topic, b"") for topic, _ in discovery_messages(ctx)]
