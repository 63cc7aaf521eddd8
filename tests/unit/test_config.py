"""The YAML configuration: defaults, sizes, and errors that name key, value and line."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import pytest
from pydantic import BaseModel

from edgevlm.cli import main
from edgevlm.config import (
    CameraConfig,
    Config,
    ConfigError,
    TLSConfig,
    default_config,
    load_config,
    sanitise_node_id,
)

REPO = Path(__file__).parents[2]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "edgevlm.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_empty_file_gives_the_documented_defaults(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, ""))
    assert config.model.family is None and config.model.max_pixels == 1_003_520
    assert config.limits.limit_mm_per_prompt.to_json() == {"image": 4, "video": 1}
    assert config.cache.max_bytes == 512 * 2**20
    assert config.media.policy().formats == frozenset({"JPEG", "PNG", "WEBP", "BMP"})


def test_example_config_in_etc_is_valid() -> None:
    load_config(REPO / "etc" / "edgevlm.yaml")


def test_sizes_with_units_and_limits_as_json_string(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, """
cache:
  max_bytes: 64 MiB
limits:
  max_part_bytes: 2MB
  limit_mm_per_prompt: '{"image": 2, "video": {"count": 1, "num_frames": 8}}'
"""))
    assert config.cache.max_bytes == 64 * 2**20
    assert config.limits.max_part_bytes == 2_000_000
    limits = config.limits.request_limits()
    assert limits.mm.count_limit("image") == 2 and limits.mm.limit("video").num_frames == 8  # type: ignore[union-attr]


def test_every_error_is_listed_with_key_value_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, """model:
  threads: 0
  family: qwen9
  precision: turbo
limits:
  limit_mm_per_prompt:
    imagez: 3
  max_queue: -1
cache:
  max_bytes: lots
colour: red
""")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    problems = info.value.problems
    assert "model.threads = 0 (line 2): Input should be greater than or equal to 1" in problems
    assert ("model.family = 'qwen9' (line 3): unknown family 'qwen9'; use one of qwen3-vl, "
            "qwen2-vl, qwen2.5-vl") in problems
    assert any(p.startswith("limits.limit_mm_per_prompt = {'imagez': 3} (line 6): unknown "
                            "modality 'imagez'; valid modalities are image, video, audio")
               for p in problems)
    assert ("model.precision = 'turbo' (line 4): Input should be 'auto', 'exact' or 'fast'"
            in problems)
    assert "limits.max_queue = -1 (line 8): Input should be greater than or equal to 1" in problems
    assert any(p.startswith("cache.max_bytes = 'lots' (line 10): not a size") for p in problems)
    assert ("colour = 'red' (line 11): unknown key; check the spelling against "
            "etc/edgevlm.yaml") in problems
    assert len(problems) == 7


def test_yaml_syntax_error_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(write(tmp_path, "model: [unclosed\n"))


def test_check_config_command_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                         ) -> None:
    assert main(["check-config", str(write(tmp_path, "model:\n  threads: 2\n"))]) == 0
    assert main(["check-config", str(write(tmp_path, "model:\n  threads: -2\n"))]) == 2
    assert "model.threads = -2 (line 2)" in capsys.readouterr().err


# --- sources: !secret, !env, environment variables, overrides --------------------------------

def test_secret_and_env_tags_are_resolved_and_redacted(tmp_path: Path) -> None:
    (tmp_path / "secrets.yaml").write_text('mqtt_password: "0123"\nbroker_port: "8883"\n')
    path = write(tmp_path, """mqtt:
  host: !env BROKER_HOST
  port: !secret broker_port
  username: edgevlm
  password: !secret mqtt_password
  tls:
    key: /etc/edgevlm/client.key
""")
    config = load_config(path, env={"BROKER_HOST": "10.0.0.2"})
    assert (config.mqtt.host, config.mqtt.port, config.mqtt.password) == ("10.0.0.2", 8883, "0123")
    shown = config.redacted()["mqtt"]
    assert shown["password"] == "***" and shown["tls"]["key"] == "***"
    assert shown["port"] == "***"  # came from a !secret
    assert shown["username"] == "edgevlm"
    assert shown["host"] == "***"  # came from a !env
    assert "0123" not in repr(config.redacted())


def test_missing_secret_and_env_are_named_with_their_line(tmp_path: Path) -> None:
    (tmp_path / "secrets.yaml").write_text("other: x\n")
    path = write(tmp_path, "mqtt:\n  host: !env NO_SUCH_VAR\n  password: !secret mqtt_pw\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert info.value.problems == [
        "!env NO_SUCH_VAR (line 2): the environment variable NO_SUCH_VAR is not set",
        f"!secret mqtt_pw (line 3): no secret named 'mqtt_pw' in {tmp_path / 'secrets.yaml'}",
    ]


def test_secret_without_secrets_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"!secret pw \(line 2\): cannot read"):
        load_config(write(tmp_path, "mqtt:\n  password: !secret pw\n"), env={})


def test_env_values_are_masked_in_errors_like_secrets(tmp_path: Path) -> None:
    path = write(tmp_path, """mqtt:
  host: broker
  username: edgevlm
  password: !env MQTT_PASSWORD
  port: !env MQTT_PASSWORD
cache:
  max_bytes: !env MQTT_PASSWORD
""")
    with pytest.raises(ConfigError) as info:
        load_config(path, env={"MQTT_PASSWORD": "hunter2-Pa55"})
    problems = info.value.problems
    assert ("mqtt.port = *** (line 5): Input should be a valid integer, unable to parse string "
            "as an integer") in problems
    assert any(p.startswith("cache.max_bytes = *** (line 7): not a size: '***'")
               for p in problems), problems
    assert len(problems) == 2 and "hunter2" not in str(info.value)


def test_env_password_is_masked_in_errors(tmp_path: Path) -> None:
    path = write(tmp_path, "mqtt:\n  password: !env PW\n  reconnect_min_s: 10\n"
                 "  reconnect_max_s: 2\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, env={"PW": "[hunter2]"})  # as text: a valid password
    assert info.value.problems == [
        "mqtt = {'password': ***, 'reconnect_min_s': 10, 'reconnect_max_s': 2} (line 1): "
        "reconnect_max_s (2) is below reconnect_min_s (10)"]
    # EDGEVLM_MQTT__PASSWORD: flow style is YAML, so this one is a list, not a string
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, ""), env={"EDGEVLM_MQTT__PASSWORD": "[hunter2]"})
    assert info.value.problems == [
        "mqtt.password = [***] (from env EDGEVLM_MQTT__PASSWORD): Input should be a valid string"]
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, "mqtt:\n  reconnect_min_s: 10\n  reconnect_max_s: 2\n"),
                    env={"EDGEVLM_MQTT__PASSWORD": "hunter2"})
    assert "'password': ***" in str(info.value) and "hunter2" not in str(info.value)


def test_env_values_are_redacted_in_check_config_json(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "mqtt:\n  host: broker\n  username: !env MQTT_USER\n"
                 "  port: !env MQTT_PORT\n")
    config = load_config(path, env={"MQTT_USER": "u-1234", "MQTT_PORT": "8883"})
    assert (config.mqtt.username, config.mqtt.port) == ("u-1234", 8883)
    shown = config.redacted()["mqtt"]
    assert (shown["username"], shown["port"], shown["host"]) == ("***", "***", "broker")
    (tmp_path / "secrets.yaml").write_text("mqtt: {host: h, port: notaport, password: pw-9}\n")
    with pytest.raises(ConfigError) as info:  # a whole section from !secret: all of it masked
        load_config(write(tmp_path, "mqtt: !secret mqtt\n"), env={})
    assert info.value.problems == ["mqtt.port = *** (line 1): Input should be a valid integer, "
                                   "unable to parse string as an integer"]


def test_secrets_file_syntax_error_does_not_show_its_lines(tmp_path: Path) -> None:
    (tmp_path / "secrets.yaml").write_text('other: 1\nmqtt_password: "hunter2\n')
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, "mqtt:\n  password: !secret mqtt_password\n"), env={})
    assert info.value.problems == [
        f"!secret mqtt_password (line 2): {tmp_path / 'secrets.yaml'} is not valid YAML: found "
        "unexpected end of stream (line 3)"]


def test_environment_overrides_the_file_and_flags_override_both(tmp_path: Path) -> None:
    path = write(tmp_path, "mqtt:\n  host: from-file\n  port: 1884\nlimits:\n  max_queue: 3\n")
    env = {"EDGEVLM_MQTT__HOST": "from-env", "EDGEVLM_LIMITS__MAX_QUEUE": "5",
           "EDGEVLM_MEDIA__FORMATS": "[JPEG, PNG]", "EDGEVLM_MQTT__SHARED_GROUP": "null",
           "EDGEVLM_MQTT__PASSWORD": "0123", "EDGEVLM_VENV": "/not/config"}
    config = load_config(path, env=env, overrides={"limits.max_queue": 7})
    assert config.mqtt.host == "from-env" and config.mqtt.port == 1884
    assert config.limits.max_queue == 7
    assert config.media.formats == ["JPEG", "PNG"]
    assert config.mqtt.shared_group is None
    assert config.mqtt.password == "0123"  # scalars stay text: no octal, no int
    assert load_config(path, env=None).mqtt.host == "from-file"


def test_bad_values_from_env_and_flags_say_where_they_came_from(tmp_path: Path) -> None:
    path = write(tmp_path, "mqtt:\n  port: 1883\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, env={"EDGEVLM_MQTT__PORT": "abc", "EDGEVLM_MQTT__HOTS": "x"},
                    overrides={"cameras.front.max_tokens": 0})
    problems = info.value.problems
    assert any(p.startswith("mqtt.port = 'abc' (from env EDGEVLM_MQTT__PORT): ")
               for p in problems)
    assert ("mqtt.hots = 'x' (from env EDGEVLM_MQTT__HOTS): unknown key; check the spelling "
            "against etc/edgevlm.yaml") in problems
    assert ("cameras.front.max_tokens = 0 (from override cameras.front.max_tokens): Input "
            "should be greater than or equal to 1") in problems
    assert len(problems) == 3


def test_default_config_runs_without_a_file() -> None:
    config = default_config(env={"EDGEVLM_MQTT__HOST": "broker"}, overrides={"mqtt.port": 1})
    assert (config.mqtt.host, config.mqtt.port) == ("broker", 1)
    assert config.homeassistant.form == "device" and config.zeroconf.enabled
    assert config.cameras == {} and config.limits.dedupe_window_s == 600
    with pytest.raises(ConfigError, match=r"defaults \(no config file\)"):
        default_config(env={}, overrides={"zeroconf.enabled": "maybe"})


# --- new sections ----------------------------------------------------------------------------

def test_node_and_client_id_default_from_the_host_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("socket.gethostname", lambda: "Garage Pi.local")
    config = default_config(env={})
    assert config.mqtt.resolved_node_id() == "Garage_Pi"
    assert config.mqtt.resolved_client_id() == "edgevlm-Garage_Pi"
    named = default_config(env={}, overrides={"mqtt.node_id": "n1", "mqtt.client_id": "c"})
    assert (named.mqtt.resolved_node_id(), named.mqtt.resolved_client_id()) == ("n1", "c")
    assert sanitise_node_id("...") == "edgevlm"


def test_cameras_are_validated(tmp_path: Path) -> None:
    path = write(tmp_path, """cameras:
  front_door:
    frigate: true
    labels: [person]
    label_prompts:
      person: "Who is at the {camera}? ({label})"
  "bad/name": {}
  back:
    prompt: "Describe {thing}"
    frigate_events: [finish]
""")
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    problems = info.value.problems
    assert any(p.startswith("cameras.bad/name") and "(line 7)" in p for p in problems)
    assert any(p.startswith("cameras.back.prompt = 'Describe {thing}' (line 9): unknown "
                            "placeholder {thing}") for p in problems)
    assert any(p.startswith("cameras.back.frigate_events.0 = 'finish' (line 10)")
               for p in problems)
    assert len(problems) == 3
    ok = load_config(write(tmp_path, "cameras:\n  front_door:\n    frigate: true\n"), env={})
    cam = ok.cameras["front_door"]
    assert cam.enabled and cam.topic is None and cam.frigate_events == ["end"]
    assert cam.labels is None and cam.max_tokens == 64 and "{camera}" in cam.prompt


def test_tls_true_means_tls_with_system_cas() -> None:
    assert default_config(env={"EDGEVLM_MQTT__TLS": "true"}).mqtt.tls == TLSConfig()
    assert default_config(env={}, overrides={"mqtt.tls": False}).mqtt.tls is None


def _fields(model: type[BaseModel], prefix: str = "") -> list[str]:
    out = []
    for name, info in model.model_fields.items():
        sub = [a for a in (info.annotation, *get_args(info.annotation))
               if isinstance(a, type) and issubclass(a, BaseModel)]
        out += _fields(sub[0], f"{prefix}{name}.") if sub else [f"{prefix}{name}"]
    return out


def test_example_config_mentions_every_field() -> None:
    text = (REPO / "etc" / "edgevlm.yaml").read_text()
    sections = dict(re.findall(r"^(\w+):(.*?)(?=^\w|\Z)", text, re.M | re.S))
    keys = _fields(Config) + [f"cameras.{f}" for f in _fields(CameraConfig)]
    missing = []
    for dotted in keys:
        section, _, rest = dotted.partition(".")
        block = sections.get(section, "")
        if rest and not re.search(rf"\b{rest.split('.')[-1]}:", block):
            missing.append(dotted)
        if not rest and section not in sections:
            missing.append(dotted)
    assert missing == []
    assert len(keys) > 50


def test_configuration_reference_documents_every_field() -> None:
    text = (REPO / "docs" / "configuration.md").read_text()
    keys = [k for k in _fields(Config) if not k.startswith("cameras")]
    keys += [f"cameras.<name>.{f}" for f in _fields(CameraConfig)]
    missing = [k for k in keys if f"`{k}`" not in text]
    assert missing == [] and len(keys) > 45


def test_backoff_order_and_camera_topic_filters(tmp_path: Path) -> None:
    path = write(tmp_path, "mqtt:\n  reconnect_min_s: 10\n  reconnect_max_s: 2\n"
                 "cameras:\n  a:\n    topic: cams/x+/image\n  b:\n    topic: cams/+/#\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    problems = info.value.problems
    assert any(p.startswith("mqtt = ") and "(line 1)" in p and "reconnect_max_s (2) is below"
               in p for p in problems), problems
    assert any(p.startswith("cameras.a.topic = 'cams/x+/image' (line 6): not a valid MQTT")
               for p in problems), problems
    assert len(problems) == 2


# --- duplicate keys ----------------------------------------------------------------------

def test_duplicate_section_is_refused_with_both_lines(tmp_path: Path) -> None:
    path = write(tmp_path, """mqtt:
  host: broker
  password: hunter2
model:
  threads: 0
mqtt:
  keepalive: 30
""")
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert info.value.problems == [
        "mqtt (line 1): duplicate key, written again on line 6; the second section would "
        "replace the first whole; merge them into one",
        "model.threads = 0 (line 5): Input should be greater than or equal to 1"]


def test_duplicate_key_in_a_section_and_duplicate_camera(tmp_path: Path) -> None:
    path = write(tmp_path, """mqtt:
  port: 1883
  host: broker
  port: 1884
cameras:
  front: {}
  back: {}
  front:
    frigate: true
  front:
    max_tokens: 0
media:
  formats: [JPEG]
""")
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert info.value.problems == [
        "mqtt.port (line 2): duplicate key, written again on line 4; only the last value would "
        "count; keep one",
        "cameras.front (line 6): duplicate key, written again on lines 8 and 10; the last "
        "section would replace the others whole; merge them into one",
        "cameras.front.max_tokens = 0 (line 11): Input should be greater than or equal to 1"]


def test_keys_the_loader_would_merge_are_duplicates_and_merge_keys_are_not(
        tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:  # yes and true are both the key True
        load_config(write(tmp_path, "zeroconf:\n  enabled: true\n  yes: 1\n  true: 2\n"),
                    env={})
    assert info.value.problems[0].startswith("zeroconf.yes (line 3): duplicate key, written "
                                             "again on line 4;")
    path = write(tmp_path, """cameras:
  a: &cam {max_tokens: 8, prompt: "Look."}
  b:
    <<: *cam
    max_tokens: 9
""")
    config = load_config(path, env={})
    assert (config.cameras["b"].max_tokens, config.cameras["b"].prompt) == (9, "Look.")


def test_check_config_names_both_lines_of_a_duplicate(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "mqtt:\n  host: broker\n  password: x\nmqtt:\n  port: 1884\n")
    assert main(["check-config", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert ("mqtt (line 1): duplicate key, written again on line 4; the second section would "
            "replace the first whole") in captured.err
