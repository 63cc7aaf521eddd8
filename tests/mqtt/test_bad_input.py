"""Bad input over MQTT: each is answered with its error type, and the daemon keeps serving.

One broker and one daemon for the module (they are not disturbed by design; the last test
proves it). Every request carries v5 Correlation Data naming its case, so even a payload that
is not JSON can be matched to its answer.
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgevlm.service import Service
from tests.helpers import image, image_bytes, text, user_request
from tests.mqtt.conftest import (
    Broker,
    MqttTestClient,
    close_client,
    config_for,
    connect_client,
    mosquitto_binary,
    v5_properties,
)

BASE = "edgevlm/node1"
REPLY = "edgevlm/clients/bad-input/reply"
DEFAULT_REPLY = f"{BASE}/response/describe"
MAX_PAYLOAD = 200_000


def png_header_only(width: int, height: int) -> bytes:
    """A ~60-byte PNG whose header claims width x height pixels (a decompression bomb)."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return (struct.pack(">I", len(body)) + kind + body
                + struct.pack(">I", zlib.crc32(kind + body)))
    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\0" * 16)) + chunk(b"IEND", b""))


def vision_tokens(grid: list[int], rows: int, hidden: int = 128) -> dict[str, Any]:
    data = np.zeros((rows, hidden), dtype=np.float32).tobytes()
    return {"type": "vision_tokens",
            "vision_tokens": {"grid": grid, "tokens_b64": base64.b64encode(data).decode()}}


def ask(rid: str, *parts: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return user_request(*parts, id=rid, max_tokens=4, **fields)


SMALL = image_bytes(32, 32)
JPEG = image_bytes(96, 64)

CASES: dict[str, tuple[bytes | dict[str, Any], str]] = {
    "non_json": (b"\xff\xfe this is not json", "invalid_request"),
    "json_array": (b"[1, 2, 3]", "invalid_request"),
    "wrong_schema": ({"v": 1, "id": "wrong_schema", "prompt": "hello"}, "invalid_request"),
    # an id that is not valid Unicode: the error answer still goes out (the id escaped)
    "lone_surrogate_id": (b'{"v": 1, "id": "a\\ud800", "messages": []}', "invalid_request"),
    "unknown_part_type": (ask("unknown_part_type", {"type": "hologram", "hologram": "x"}),
                          "invalid_request"),
    "audio_part": (ask("audio_part", {"type": "input_audio", "input_audio": {}}),
                   "unsupported_modality"),
    "over_limit_mm_per_prompt": (ask("over_limit_mm_per_prompt",
                                     *[image(SMALL) for _ in range(5)], text("?")),
                                 "mm_limit_exceeded"),
    "oversize_payload": (ask("oversize_payload", text("x" * (MAX_PAYLOAD + 10_000))),
                         "payload_too_large"),
    "corrupt_image": (ask("corrupt_image", image(b"\xff\xd8\xff\xe0" + b"\x13" * 500),
                          text("?")), "unsupported_media"),
    "truncated_image": (ask("truncated_image", image(JPEG[: len(JPEG) // 2]), text("?")),
                        "unsupported_media"),
    "decompression_bomb": (ask("decompression_bomb",
                               image(png_header_only(14_000, 14_000), "image/png"),
                               text("?")), "unsupported_media"),
    "bad_vision_tokens_sizes": (ask("bad_vision_tokens_sizes", vision_tokens([1, 2, 2], 3),
                                    text("?")), "invalid_vision_tokens"),
    "context_overflow": (user_request(text("describe " * 50), id="context_overflow",
                                      max_tokens=4090), "context_length_exceeded"),
    "image_ref_not_cached": (ask("image_ref_not_cached",
                                 {"type": "image_ref", "image_ref": "0" * 32}, text("?")),
                             "cache_miss"),
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, demo_engine: Any
           ) -> Iterator[tuple[Service, MqttTestClient]]:
    binary = mosquitto_binary()
    if binary is None:
        pytest.fail("mosquitto is not installed")
    directory = Path(tmp_path_factory.mktemp("bad-input-broker"))
    broker = Broker(directory, binary)
    broker.start()
    service = Service(config_for(broker.host, broker.port,
                                 {"limits.max_payload_bytes": MAX_PAYLOAD}), engine=demo_engine)
    client = connect_client(broker.host, broker.port)
    try:
        service.start(timeout=20)
        client.sub(REPLY, DEFAULT_REPLY)
        yield service, client
    finally:
        close_client(client)
        service.stop("test teardown")
        broker.stop()


def send(client: MqttTestClient, case: str, payload: bytes | dict[str, Any],
         reply: str = REPLY) -> None:
    client.pub(f"{BASE}/request/describe", payload,
               properties=v5_properties(reply, case.encode()))


def answer_of(client: MqttTestClient, case: str) -> dict[str, Any]:
    message = client.inbox.wait("#", where=lambda m: getattr(
        m.properties, "CorrelationData", None) == case.encode())[0]
    return json.loads(message.payload)


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_answered_with_its_error_type(served, case):
    _, client = served
    payload, error_type = CASES[case]
    send(client, case, payload)
    answer = answer_of(client, case)
    assert answer["status"] == "error", answer
    assert answer["error"]["type"] == error_type, answer
    assert answer["error"]["message"]
    if isinstance(payload, dict) and "id" in payload:
        assert answer["id"] == payload["id"] == answer["transaction"]


def test_reply_topic_outside_namespace_is_refused_on_the_default_response_topic(served):
    _, client = served
    for i, outside in enumerate(["elsewhere/reply", "edgevlm/+/reply", "edgevlm/#",
                                 f"{BASE}/request/describe"]):
        case = f"outside-{i}"
        send(client, case, ask(case, text("hi")), reply=outside)
        message = client.inbox.wait(DEFAULT_REPLY, where=lambda m, c=case: getattr(
            m.properties, "CorrelationData", None) == c.encode())[0]
        answer = json.loads(message.payload)
        assert answer["error"]["type"] == "invalid_request"
        assert "namespace" in answer["error"]["message"]


def test_daemon_keeps_serving_after_bad_input_and_counts_every_request(served):
    service, client = served
    for case, (payload, _) in CASES.items():
        send(client, f"again-{case}", payload)
    send(client, "good", ask("good", image(JPEG), text("What is this?")))
    answer = answer_of(client, "good")
    assert answer["status"] == "ok", answer
    for case in CASES:
        assert answer_of(client, f"again-{case}")["status"] == "error"
    requests = service.metrics.snapshot()["requests"]
    assert requests["in_progress"] == 0
    assert requests["received"] == requests["answered"] + requests["errored"]
    assert requests["answered"] >= 1 and requests["errored"] >= len(CASES)
    assert service.worker.alive and service.link.network_thread_alive()
