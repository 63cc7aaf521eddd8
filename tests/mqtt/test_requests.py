"""Requests end to end through a real Mosquitto and the real engine (the bundled demo model).

Answer *content* is never asserted (the demo weights may be retrained); flow and shape are.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from edgevlm.wire.protocol import Response
from tests.helpers import image, image_bytes, text, user_request
from tests.mqtt.conftest import v5_properties, wait_until

BASE = "edgevlm/node1"


def describe(rid: str, **fields: Any) -> dict[str, Any]:
    return user_request(image(image_bytes(64, 48)), text("What do you see?"), id=rid,
                        max_tokens=8, **fields)


def assert_ok_answer(answer: dict[str, Any], rid: str) -> None:
    response = Response.model_validate(answer)  # the one wire schema
    assert response.status == "ok", answer
    assert response.id == rid and response.transaction == rid
    assert response.data is not None
    assert response.data.model == "qwen3vl-demo"
    assert response.data.usage.completion_tokens >= 1
    assert response.data.usage.vision_tokens > 0
    m = response.data.metrics
    assert m.queue_ms >= 0 and m.total_ms > 0 and m.ttft_ms > 0
    assert [c.hit for c in response.data.cache] in ([False], [True])


def test_online_is_retained_with_info_busy_and_health(make_service, mqtt_client):
    service = make_service()
    assert service.online.is_set()
    client = mqtt_client()
    client.sub(f"{BASE}/bridge/#")
    state = client.inbox.wait(f"{BASE}/bridge/state")[0]
    assert state.payload == b"online" and state.retain
    info = client.inbox.json(f"{BASE}/bridge/info")[0]
    assert info["model"]["name"] == "qwen3vl-demo"
    assert info["model"]["quantisation"] and info["model"]["context"] > 0
    assert info["limits"]["max_queue"] == 8 and "config" in info
    assert client.inbox.wait(f"{BASE}/bridge/busy")[0].payload in (b"ON", b"OFF")
    health = client.inbox.json(f"{BASE}/bridge/health")[0]
    assert health["requests"]["received"] == 0 and health["mqtt"]["connected"] is True


def test_describe_over_v5_answers_on_response_topic_with_correlation_data(
        make_service, mqtt_client):
    make_service()
    client = mqtt_client()
    reply_topic = "edgevlm/clients/test/reply"
    client.sub(reply_topic)
    client.pub(f"{BASE}/request/describe", describe("v5-1"),
               properties=v5_properties(reply_topic, b"corr-\x00\x01"))
    message = client.inbox.wait(reply_topic)[0]
    assert message.properties.CorrelationData == b"corr-\x00\x01"
    assert_ok_answer(json.loads(message.payload), "v5-1")


def test_describe_over_311_echoes_transaction_on_response_describe(make_service, mqtt_client):
    make_service()
    client = mqtt_client(protocol="3.1.1")
    client.sub(f"{BASE}/response/describe")
    payload = describe("ignored")
    del payload["id"]
    payload["transaction"] = "tx-311"
    client.pub(f"{BASE}/request/describe", payload)
    answer = client.inbox.json(f"{BASE}/response/describe")[0]
    assert_ok_answer(answer, "tx-311")


def test_daemon_speaking_311_answers_requests(make_service, mqtt_client):
    make_service(**{"mqtt.protocol": "3.1.1"})
    client = mqtt_client(protocol="3.1.1")
    client.sub(f"{BASE}/response/describe", f"{BASE}/bridge/state")
    assert client.inbox.wait(f"{BASE}/bridge/state")[0].payload == b"online"
    client.pub(f"{BASE}/request/describe", describe("d311"))
    assert_ok_answer(client.inbox.json(f"{BASE}/response/describe")[0], "d311")


def test_answer_updates_last_answer_event_and_health_counts(make_service, mqtt_client):
    """Request answers reach the bridge topics (which every client reads) only when
    configured; by default only camera descriptions do (tests/reliability/
    test_hostile_clients.py)."""
    service = make_service(**{"mqtt.share_request_answers": True})
    client = mqtt_client()
    client.sub(f"{BASE}/response/describe", f"{BASE}/bridge/last_answer", f"{BASE}/bridge/event")
    client.pub(f"{BASE}/request/describe", describe("la-1"))
    answer = client.inbox.json(f"{BASE}/response/describe")[0]
    last = client.inbox.json(f"{BASE}/bridge/last_answer", where=lambda o: o["id"] == "la-1")[0]
    assert last["full_text"] == answer["data"]["text"] and len(last["text"]) <= 255
    assert last["model"] == "qwen3vl-demo" and last["camera"] is None and last["at"]
    event = client.inbox.json(f"{BASE}/bridge/event")[0]
    assert event["event_type"] == "answer_ready" and event["id"] == "la-1"
    snap = service.metrics.snapshot()
    assert snap["requests"]["answered"] == 1
    assert snap["latency_ms"]["total"]["p50"] is not None


def test_same_id_twice_is_inferred_once_and_answered_twice(make_service, mqtt_client,
                                                          demo_engine, monkeypatch):
    calls: list[str] = []
    original = demo_engine.generate_prepared
    lock = threading.Lock()

    def counting(request, *args, **kwargs):
        with lock:
            calls.append(request.id)
        return original(request, *args, **kwargs)

    monkeypatch.setattr(demo_engine, "generate_prepared", counting)
    service = make_service()
    client = mqtt_client()
    client.sub(f"{BASE}/response/describe")
    client.pub(f"{BASE}/request/describe", describe("dup-1"))
    first = client.inbox.json(f"{BASE}/response/describe")[0]
    client.pub(f"{BASE}/request/describe", describe("dup-1"))
    answers = client.inbox.json(f"{BASE}/response/describe", count=2)
    assert answers[1] == first
    assert calls == ["dup-1"]
    requests = service.metrics.snapshot()["requests"]
    assert requests["received"] == 1 and requests["deduplicated"] == 1


def test_health_invariant_received_equals_answered_errored_in_progress(make_service,
                                                                       mqtt_client):
    service = make_service(**{"mqtt.health_interval_s": 0.2})
    client = mqtt_client()
    client.sub(f"{BASE}/response/describe", f"{BASE}/bridge/health")
    client.pub(f"{BASE}/request/describe", describe("inv-ok"))
    client.pub(f"{BASE}/request/describe", b"not json")
    client.pub(f"{BASE}/request/describe", {"v": 1, "id": "inv-bad", "messages": []})
    client.inbox.wait(f"{BASE}/response/describe", count=3)
    for health in client.inbox.json(f"{BASE}/bridge/health"):
        r = health["requests"]
        assert r["received"] == r["answered"] + r["errored"] + r["in_progress"]
    final = wait_until(lambda: [h for h in client.inbox.json(f"{BASE}/bridge/health")
                                if h["requests"]["received"] == 3
                                and h["requests"]["in_progress"] == 0], what="final health")
    r = final[-1]["requests"]
    assert (r["answered"], r["errored"]) == (1, 2)
    assert r["errors_by_type"] == {"invalid_request": 2}
    assert service.metrics.snapshot()["requests"]["in_progress"] == 0


def test_a_retained_request_is_not_run_again_on_subscribe(make_service, mqtt_client):
    client = mqtt_client()
    client.sub(f"{BASE}/response/describe")
    client.pub(f"{BASE}/request/describe", describe("retained"), retain=True)
    make_service()
    client.pub(f"{BASE}/request/describe", describe("live"))
    answers = client.inbox.json(f"{BASE}/response/describe")
    assert [a["id"] for a in answers] == ["live"]


def test_refused_requests_are_acked_once_answered_and_not_redelivered(make_service,
                                                                      mqtt_client):
    """Refusals are answered and acknowledged on the network thread: every one acked (after
    the broker confirmed its answer), so a restart on the same session gets none again."""
    session = {"mqtt.client_id": "edgevlm-refusal-acks"}
    service = make_service(**session)
    client = mqtt_client()
    reply = "edgevlm/clients/refusals/reply"
    client.sub(reply)
    for i in range(40):
        client.pub(f"{BASE}/request/describe", {"v": 1, "id": f"bad-{i}", "messages": []},
                   properties=v5_properties(reply, f"bad-{i}".encode()))
    answers = client.inbox.json(reply, count=40)
    assert sorted(a["id"] for a in answers) == sorted(f"bad-{i}" for i in range(40))
    assert {a["error"]["type"] for a in answers} == {"invalid_request"}
    wait_until(lambda: service.replier.outstanding == 0, what="every refused request acked")
    service.stop("restart on the same session")
    again = make_service(**session)
    time.sleep(1.0)  # a redelivered request would arrive right after the reconnect
    assert again.metrics.snapshot()["requests"]["received"] == 0, "a request was redelivered"
