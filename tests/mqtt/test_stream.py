"""``stream: true``: partial chunks with sequence numbers, then the final answer."""

from __future__ import annotations

import json

from edgevlm.wire.protocol import Response, StreamChunk
from tests.helpers import image, image_bytes, text, user_request
from tests.mqtt.conftest import v5_properties

BASE = "edgevlm/node1"


def test_stream_publishes_numbered_chunks_before_the_final_answer(make_service, mqtt_client):
    make_service()
    client = mqtt_client()
    reply = "edgevlm/clients/stream/reply"
    client.sub(reply)
    request = user_request(image(image_bytes(64, 48)), text("What do you see?"), id="s-1",
                           max_tokens=12, stream=True)
    client.pub(f"{BASE}/request/describe", request, properties=v5_properties(reply, b"c-s1"))
    final_msg = client.inbox.wait(reply, where=lambda m: b'"status":"ok"' in m.payload)[0]
    final = Response.model_validate_json(final_msg.payload)
    assert final.data is not None and final.id == "s-1"
    messages = client.inbox.on(reply)
    assert messages[-1] is final_msg, "the final answer comes after every chunk"
    chunks = [StreamChunk.model_validate_json(m.payload) for m in messages[:-1]]
    assert all(m.properties.CorrelationData == b"c-s1" for m in messages)
    assert [c.seq for c in chunks] == list(range(len(chunks)))
    assert all(c.status == "partial" and c.id == "s-1" == c.transaction for c in chunks)
    assert "".join(c.text for c in chunks) == final.data.text
    if final.data.text:
        assert chunks, "a non-empty answer was streamed in at least one chunk"


def test_without_stream_only_the_final_answer_is_published(make_service, mqtt_client):
    make_service()
    client = mqtt_client(protocol="3.1.1")
    client.sub(f"{BASE}/response/describe")
    client.pub(f"{BASE}/request/describe",
               user_request(text("hello"), id="ns-1", max_tokens=8))
    answer = client.inbox.json(f"{BASE}/response/describe")[0]
    assert answer["status"] == "ok"
    client.pub(f"{BASE}/request/describe",
               user_request(text("hello"), id="ns-2", max_tokens=8, stream=True))
    final = client.inbox.json(f"{BASE}/response/describe", where=lambda o: o.get(
        "status") == "ok" and o["id"] == "ns-2")[0]
    statuses = [json.loads(m.payload)["status"] for m in client.inbox.on(
        f"{BASE}/response/describe")]
    assert statuses[0] == "ok", "no partial chunks before the non-streamed answer"
    if final["data"]["text"]:
        assert "partial" in statuses[1:], "the streamed one (same 3.1.1 route) had chunks"
