"""``edgevlm ask`` and ``edgevlm encode`` against a running daemon on a real broker."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from edgevlm.cli import main
from edgevlm.config import Config
from edgevlm.demo import load_samples
from edgevlm.service import Service
from tests.mqtt.conftest import Broker, free_port

SAMPLE = load_samples()[0].image


@pytest.fixture
def service(make_config: Callable[..., Config], demo_engine: Any) -> Iterator[Service]:
    svc = Service(make_config(), engine=demo_engine)
    svc.start()
    yield svc
    svc.stop("test over")


def ask(broker: Broker, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["ask", "--broker", f"{broker.host}:{broker.port}", "--timeout", "30", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_ask_prints_the_answer_and_its_metrics(
        service: Service, broker: Broker, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = ask(broker, capsys, "--node", "node1", "--image", str(SAMPLE),
                         "--max-tokens", "16", "Describe the scene.")
    assert code == 0, err
    assert out.endswith("\n") and len(out.splitlines()) == 1
    assert "ttft" in err and "total" in err


def test_ask_finds_the_only_node_online_and_speaks_json(
        service: Service, broker: Broker, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = ask(broker, capsys, "--json", "--image", str(SAMPLE), "How many?")
    assert code == 0, err
    answer = json.loads(out)
    assert answer["status"] == "ok" and answer["data"]["usage"]["vision_tokens"] > 0
    assert answer["id"] == answer["transaction"]


def test_ask_over_mqtt_311_is_answered_on_the_response_topic(
        service: Service, broker: Broker, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = ask(broker, capsys, "--protocol", "3.1.1", "--node", "node1", "--json",
                         "--image", str(SAMPLE), "Is there a cat?")
    assert code == 0, err
    assert json.loads(out)["status"] == "ok"


def test_ask_streams_partial_chunks_before_the_final_answer(
        service: Service, broker: Broker, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = ask(broker, capsys, "--node", "node1", "--stream", "--json",
                         "--image", str(SAMPLE), "Describe the scene.")
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines[-1]["status"] == "ok"
    chunks = lines[:-1]
    assert [c["seq"] for c in chunks] == list(range(len(chunks)))
    assert "".join(c["text"] for c in chunks) == lines[-1]["data"]["text"]


def test_ask_exit_codes_for_an_error_answer_and_for_no_answer(
        service: Service, broker: Broker, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(SAMPLE.read_bytes()[:200])
    code, _, err = ask(broker, capsys, "--node", "node1", "--image", str(broken), "?")
    assert code == 1 and "unsupported_media" in err
    code, _, err = ask(broker, capsys, "--node", "nobody-here", "--timeout", "2", "?")
    assert code == 3 and "no answer" in err
    code = main(["ask", "--broker", f"127.0.0.1:{free_port()}", "--node", "node1", "?"])
    assert code == 3


def test_encode_then_ask_with_vision_tokens_skips_the_vision_encoder(
        service: Service, broker: Broker, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    tokens = tmp_path / "door.tokens.json"
    assert main(["encode", str(SAMPLE), "-o", str(tokens), "--threads", "1"]) == 0
    capsys.readouterr()
    code, out, err = ask(broker, capsys, "--node", "node1", "--json",
                         "--vision-tokens", str(tokens), "Describe the scene.")
    assert code == 0, err
    via_tokens = json.loads(out)["data"]
    code, out, err = ask(broker, capsys, "--node", "node1", "--json",
                         "--image", str(SAMPLE), "Describe the scene.")
    via_image = json.loads(out)["data"]
    assert via_tokens["metrics"]["encode_ms"] == 0
    assert via_tokens["usage"]["vision_tokens"] == via_image["usage"]["vision_tokens"]
    assert via_tokens["deepstack"] is True
