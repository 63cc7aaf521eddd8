"""The Home Assistant blueprint and dashboard use only entities edgevlm's discovery creates,
and the Frigate example pair is consistent with the config schema."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from edgevlm.config import load_config
from edgevlm.integrations.homeassistant import DiscoveryContext, entity_configs, make_device_id

REPO = Path(__file__).parents[2]
HA = REPO / "integration" / "homeassistant"
BLUEPRINT = HA / "blueprints" / "automation" / "edgevlm" / "describe_on_motion.yaml"
ENTITY_ID = re.compile(r"\b(?:sensor|binary_sensor|event|image|switch|camera)\.[a-z0-9_]+\b")


class _BlueprintLoader(yaml.SafeLoader):
    pass


_BlueprintLoader.add_constructor(
    "!input", lambda loader, node: {"!input": loader.construct_scalar(node)})  # type: ignore[arg-type]


def load(path: Path) -> Any:
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_BlueprintLoader)


def discovered_entity_ids(node: str = "garage", cameras: tuple[str, ...] = ("driveway",)
                          ) -> set[str]:
    ctx = DiscoveryContext("homeassistant", "device", "edgevlm", node,
                           make_device_id("b", "edgevlm", node), "0.1.0", "m", cameras)
    return {c["default_entity_id"] for c in entity_configs(ctx).values()}


def strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*strings(k), *strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return [value] if isinstance(value, str) else []


def test_dashboard_uses_only_discovered_entities() -> None:
    dashboard = load(HA / "dashboard.yaml")
    used = {m for s in strings(dashboard) for m in ENTITY_ID.findall(s)}
    known = discovered_entity_ids()
    assert used and used <= known, used - known
    assert len(used) >= 14  # every bridge and camera entity is on the dashboard


def test_dashboard_attribute_names_exist_in_the_description_payload() -> None:
    text = (HA / "dashboard.yaml").read_text(encoding="utf-8")
    attributes = set(re.findall(r"state_attr\('[^']+', '(\w+)'\)", text))
    assert attributes <= {"camera", "label", "event_id", "text", "model", "metrics", "at"}


def test_blueprint_defaults_are_discovered_entities_and_inputs_are_used() -> None:
    blueprint = load(BLUEPRINT)
    meta = blueprint["blueprint"]
    assert meta["domain"] == "automation" and meta["name"]
    inputs = meta["input"]
    defaults = {m for spec in inputs.values() for m in ENTITY_ID.findall(str(spec.get(
        "default", "")))}
    assert defaults and defaults <= discovered_entity_ids(), defaults
    used = {s["!input"] for s in _walk_inputs(blueprint)}
    assert used == set(inputs), set(inputs) ^ used
    assert blueprint["triggers"][0]["trigger"] == "state"
    wait = next(step for step in blueprint["actions"] if "wait_template" in step)
    assert wait["continue_on_timeout"] is True and wait["timeout"] == {"!input": "timeout"}


def _walk_inputs(value: Any) -> list[dict[str, str]]:
    if isinstance(value, dict):
        if set(value) == {"!input"}:
            return [value]
        return [x for v in value.values() for x in _walk_inputs(v)]
    if isinstance(value, list):
        return [x for v in value for x in _walk_inputs(v)]
    return []


def test_frigate_example_pair_is_consistent() -> None:
    frigate = yaml.safe_load((REPO / "integration" / "frigate" / "frigate.yml").read_text())
    config = load_config(REPO / "integration" / "frigate" / "edgevlm.yaml", env={})
    assert config.cameras, "the edgevlm side configures cameras"
    for name, camera in config.cameras.items():
        assert camera.frigate and name in frigate["cameras"], name
        assert camera.frigate_prefix == frigate["mqtt"].get("topic_prefix", "frigate")
        snapshots = frigate["cameras"][name]["mqtt"]
        assert snapshots["enabled"] and not snapshots["bounding_box"]
        assert not snapshots["timestamp"] and snapshots["height"] >= 480
        tracked = set(frigate["cameras"][name].get("objects", frigate.get("objects", {}))
                      .get("track", []))
        assert set(camera.labels or []) <= tracked | {"person"}, (camera.labels, tracked)
        for label in camera.label_prompts:
            assert label in tracked, label
