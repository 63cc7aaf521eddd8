"""The commands that need no broker: tokens, schema, serve/ask/encode argument handling."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from edgevlm.cli import build_parser, main
from tests.helpers import image_bytes


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> object:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_tokens_for_a_size_prints_the_seed_table_row(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_json(capsys, "tokens", "--size", "3333x2500") == {
        "width": 3333, "height": 2500, "resized_width": 3328, "resized_height": 2496,
        "grid": [1, 156, 208], "tokens": 8112, "tokens_with_markers": 8114}
    out = run_json(capsys, "tokens", "--family", "qwen2.5-vl", "--size", "3333x2500")
    assert out["tokens"] == 1230 and (out["resized_width"], out["resized_height"]) == (1148, 840)  # type: ignore[index]


def test_tokens_of_image_files_read_headers(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a.jpg", tmp_path / "b.png"
    a.write_bytes(image_bytes(1280, 720))
    b.write_bytes(image_bytes(100, 100, "PNG"))
    out = run_json(capsys, "tokens", str(a), str(b), "--max-pixels", "1003520")
    assert isinstance(out, list)
    assert [(o["file"], o["tokens"]) for o in out] == [(str(a), 880), (str(b), 64)]


def test_tokens_errors_have_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"not an image")
    assert main(["tokens", str(bad)]) == 1
    assert "bad.jpg" in capsys.readouterr().err
    assert main(["tokens", "--family", "llava", "--size", "10x10"]) == 2
    assert main(["tokens"]) == 2
    with pytest.raises(SystemExit) as info:
        main(["tokens", "--size", "12by4"])
    assert info.value.code == 2


def test_schema_command_matches_the_committed_copy(capsys: pytest.CaptureFixture[str]) -> None:
    committed = Path(__file__).parents[2] / "daemon" / "edgevlm" / "schema" / "protocol-v1.json"
    assert run_json(capsys, "schema") == json.loads(committed.read_text())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serve_flags_become_dotted_config_overrides() -> None:
    from edgevlm.cli_mqtt import serve_overrides

    args = build_parser().parse_args([
        "serve", "--mqtt-host", "broker.lan", "--mqtt-port", "8883", "--node-id", "garage",
        "--threads", "2", "--precision", "fast", "--no-discovery", "--set", "limits.max_queue=3",
        "--http", "--http-port", "8080",
        "--set", "cameras.door.prompt=Who is at the {camera}?"])
    assert serve_overrides(args) == {
        "mqtt.host": "broker.lan", "mqtt.port": 8883, "mqtt.node_id": "garage",
        "model.threads": 2, "model.precision": "fast", "homeassistant.discovery": False,
        "http.enabled": True, "http.port": 8080, "limits.max_queue": 3,
        "cameras.door.prompt": "Who is at the {camera}?"}


def test_serve_refuses_a_bad_config_before_starting(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "edgevlm.yaml"
    bad.write_text("mqtt:\n  port: 99999\n")
    assert main(["serve", "-c", str(bad)]) == 2
    assert "mqtt.port" in capsys.readouterr().err
    assert main(["serve", "--set", "nokey"]) == 2


def test_ask_exit_codes_for_usage_and_for_no_broker(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ask", "--image", str(tmp_path / "missing.jpg"), "hi"]) == 2
    assert main(["ask", "--broker", "127.0.0.1:0", "hi"]) == 2
    assert main(["ask", "--broker", f"127.0.0.1:{_free_port()}", "--node", "n", "--timeout",
                 "3", "hi"]) == 3
    assert "cannot reach the broker" in capsys.readouterr().err


def test_encode_writes_a_vision_tokens_payload_the_model_accepts(tmp_path: Path) -> None:
    from edgevlm.demo import load_samples
    from edgevlm.engine import Engine
    from edgevlm.models import demo_model_dir
    from edgevlm.wire.protocol import VisionTokensPayload
    from edgevlm.wire.vision_tokens import decode_vision_tokens

    out = tmp_path / "door.json"
    image = load_samples()[0].image
    assert main(["encode", str(image), "-o", str(out), "--threads", "1"]) == 0
    payload = VisionTokensPayload.model_validate(json.loads(out.read_text()))
    engine = Engine.load(demo_model_dir(), threads=1, context=256)
    features = decode_vision_tokens(payload, engine.facts.hidden_size,
                                    engine.facts.deepstack_layers)
    assert features.grid == engine.encode_image(image).grid
    assert main(["encode", str(tmp_path / "missing.jpg"), "-o", str(out)]) == 1


def test_demo_samples_exist_and_are_images() -> None:
    from edgevlm.demo import load_samples
    from edgevlm.sources.cameras import image_kind

    samples = load_samples()
    assert 4 <= len(samples) <= 6
    assert all(image_kind(s.image.read_bytes()) for s in samples)
    assert {s.via for s in samples} == {"request", "camera"}


def test_demo_help_lists_the_broker_choices() -> None:
    proc = subprocess.run([sys.executable, "-m", "edgevlm", "demo", "--help"],
                          capture_output=True, text=True, timeout=60, check=True)
    assert "--broker-kind" in proc.stdout and "embedded" in proc.stdout


def test_demo_config_keeps_the_broker_login_and_never_announces_itself(tmp_path: Path) -> None:
    from edgevlm.config import load_config
    from edgevlm.demo import NODE_ID, demo_config

    path = tmp_path / "edgevlm.yaml"
    path.write_text("mqtt:\n  host: broker.lan\n  username: cam\n  password: s3cret\n"
                    "  base_topic: home/vlm\nmodel:\n  path: /nowhere\n")
    config = demo_config("127.0.0.1", 1884, 1, load_config(path, env=None))
    assert (config.mqtt.host, config.mqtt.port) == ("127.0.0.1", 1884)
    assert (config.mqtt.username, config.mqtt.password) == ("cam", "s3cret")
    assert config.mqtt.base_topic == "home/vlm" and config.mqtt.node_id == NODE_ID
    assert config.model.path is None  # always the bundled demo model
    assert not config.homeassistant.discovery and not config.zeroconf.enabled
    assert config.cameras  # the camera-topic sample has its camera


def test_every_flag_of_every_command_has_help_text() -> None:
    import argparse

    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    missing = [f"{name} {a.option_strings or a.dest}" for name, sub in subs.choices.items()
               for a in sub._actions if not a.help and not isinstance(a, argparse._HelpAction)]
    assert not missing, f"flags without --help text: {missing}"


def test_tokens_with_a_model_use_its_own_pixel_limits(capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    """The demo model allows 16,384..32,768 pixels: a 480x320 scene is 128x192, 24 tokens
    (docs/demo-model.md), where the family's defaults would say 3x as many."""
    from edgevlm.models import demo_model_dir

    out = run_json(capsys, "tokens", "--model", str(demo_model_dir()), "--size", "480x320")
    assert out == {"width": 480, "height": 320, "resized_width": 192, "resized_height": 128,
                   "grid": [1, 8, 12], "tokens": 24, "tokens_with_markers": 26}
    family_default = run_json(capsys, "tokens", "--size", "480x320")
    assert family_default["tokens"] > 2 * 24  # type: ignore[index]
    assert main(["tokens", "--model", str(demo_model_dir()), "--family", "qwen2-vl",
                 "--size", "10x10"]) == 2
    assert main(["tokens", "--model", "/nonexistent-model-dir", "--size", "10x10"]) == 2
    assert "nonexistent-model-dir" in capsys.readouterr().err
