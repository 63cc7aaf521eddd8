"""Hostile clients on a shared broker (issue 20, findings 3-5): every client the documented ACL
allows — publish ``edgevlm/+/request/#``, read ``edgevlm/+/bridge/#`` and its own reply tree — is
untrusted. A real Mosquitto and the daemon with the demo model, in process.

- The dedupe memory stays small under thousands of replays with 60 KB Correlation Data (it
  keeps digests, a few routes per key, ``dedupe_max_entries`` routes in all).
- An id is one requester's (its reply topic): another client reusing an answered id gets
  nothing of the first answer (on its own topic its request simply runs; aimed at the victim's
  topic with other bytes it is ``id_reused``); the same bytes from another route run again for
  that route; a planted id neither poisons nor blocks the victim.
- ``bridge/last_answer`` and ``bridge/event`` carry camera descriptions, not request answers.
- An ``image_ref`` works only for the reply route it was given to.
- A Response Topic on the daemon's own topics or another node's tree is refused.
- An answer the broker refuses (PUBACK >= 0x80) is counted and logged as refused.
"""

from __future__ import annotations

import gc
import json
import logging
import sys
import tracemalloc
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from edgevlm.frontdoors.mqtt.dedupe import ROUTES_PER_KEY, DedupeMemory
from edgevlm.frontdoors.mqtt.replies import Route
from edgevlm.frontdoors.mqtt.requests import dedupe_key, refusal_key
from edgevlm.metrics import rss_bytes
from edgevlm.service import Service
from edgevlm.wire.protocol import Response
from tests.helpers import image, image_bytes, text, user_request
from tests.mqtt.conftest import (
    WAIT_S,
    Broker,
    MqttTestClient,
    config_for,
    connect_client,
    mosquitto_binary,
    v5_properties,
    wait_until,
)

BASE = "edgevlm/node1"
REQUEST = f"{BASE}/request/describe"
DEFAULT_REPLY = f"{BASE}/response/describe"
VICTIM = "edgevlm/clients/victim/reply"
ATTACKER = "edgevlm/clients/attacker/reply"
CORRELATION_BYTES = 60_000
REPLAYS = 3_000
FRAME = image_bytes(64, 48, seed=7)


def ask(rid: str | None, prompt: str, *parts: dict[str, Any], **fields: Any) -> dict[str, Any]:
    body = user_request(*parts, text(prompt), max_tokens=4, **fields)
    del body["id"]
    if rid is not None:
        body["id"] = rid
    return body


def answer_on(client: MqttTestClient, topic: str, correlation: bytes) -> dict[str, Any]:
    message = client.inbox.wait(topic, where=lambda m: getattr(
        m.properties, "CorrelationData", None) == correlation)[0]
    return json.loads(message.payload)  # type: ignore[no-any-return]


# --------------------------------------------------------------------------- memory bounds


def reachable(root: object) -> Iterator[object]:
    """Every object reachable from ``root`` (not classes, modules, functions, locks)."""
    seen: set[int] = set()
    stack = [root]
    skip = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
            types.MethodType)
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, skip):
            continue
        seen.add(id(obj))
        yield obj
        stack.extend(gc.get_referents(obj))


def structure_bytes(memory: DedupeMemory) -> tuple[int, int]:
    """(bytes of every object the dedupe memory holds, the largest ``bytes`` among them)."""
    total = largest = 0
    for obj in reachable(memory):
        total += sys.getsizeof(obj)
        if isinstance(obj, bytes | bytearray):
            largest = max(largest, len(obj))
    return total, largest


def correlation(i: int) -> bytes:
    return i.to_bytes(4, "big") * (CORRELATION_BYTES // 4)


def test_dedupe_memory_keeps_digests_not_correlation_data():
    """3,000 replays of one answered request from 3,000 routes (60 KB Correlation Data each)
    and 3,000 copies of one refused request: the memory grows by a few KB, not by the
    Correlation Data (before: ~180 MB for each)."""
    memory = DedupeMemory()
    answered = dedupe_key("describe", "q1", b'{"id": "q1"}', ATTACKER)
    refused = refusal_key("describe", b"{not json")
    tracemalloc.start()
    try:
        gc.collect()
        before, _ = tracemalloc.get_traced_memory()
        for i in range(REPLAYS):
            route = Route(ATTACKER, correlation(i))
            if memory.claim(answered, route, None).kind == "new":
                memory.complete(answered, route, Response.fail("q1", 400, "invalid_request", "x"))
            memory.mark_sent(answered, route)
            memory.mark_sent(refused, Route(ATTACKER, correlation(REPLAYS + i)))
            del route
        gc.collect()
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    grown = after - before
    print(f"dedupe memory after {REPLAYS} + {REPLAYS} replays: +{grown} bytes (tracemalloc), "
          f"{memory.routes_held()} routes held")
    assert memory.routes_held() == 2 * ROUTES_PER_KEY
    assert grown < 64 * 1024, f"the dedupe memory grew by {grown} bytes"
    total, largest = structure_bytes(memory)
    assert largest < 1024 and total < 64 * 1024, (total, largest)


def test_dedupe_memory_of_the_daemon_stays_bounded_under_replays(make_service, mqtt_client):
    """End to end: 3,000 copies of a refused request and 3,000 replays of an answered id (other
    prompt, aimed at the victim's reply topic: ``id_reused``), each with its own 60 KB
    Correlation Data."""
    service = make_service()
    client = mqtt_client()
    client.sub(VICTIM)
    client.pub(REQUEST, ask("rid-1", "What do you see?", image(FRAME)),
               properties=v5_properties(VICTIM, b"v"))
    assert answer_on(client, VICTIM, b"v")["status"] == "ok"
    structure_before, _ = structure_bytes(service.dedupe)
    rss_before = rss_bytes() or 0
    replay = json.dumps(ask("rid-1", "Read me the victim's answer")).encode()

    def errors() -> dict[str, int]:
        return service.metrics.snapshot()["requests"]["errors_by_type"]  # type: ignore[no-any-return]

    def refused() -> int:
        return errors().get("invalid_request", 0) + errors().get("id_reused", 0)

    for i in range(REPLAYS):
        client.publish(REQUEST, b"{not json", qos=1,
                       properties=v5_properties(ATTACKER, correlation(i)))
        client.publish(REQUEST, replay, qos=1,
                       properties=v5_properties(VICTIM, correlation(REPLAYS + i)))
        if i % 100 == 99:  # Mosquitto drops what queues beyond max_queued_messages
            wait_until(lambda n=2 * i + 2: refused() >= n and service.replier.outstanding == 0,
                       what="the daemon to keep up")
    wait_until(lambda: errors().get("invalid_request") == REPLAYS
               and errors().get("id_reused") == REPLAYS, what="every replay refused")
    wait_until(lambda: service.replier.outstanding == 0, what="every refusal acknowledged")
    gc.collect()
    structure_after, largest = structure_bytes(service.dedupe)
    rss_after = rss_bytes() or 0
    print(f"daemon dedupe memory: {structure_before} -> {structure_after} bytes, largest bytes "
          f"object {largest}; RSS {rss_before / 2**20:.1f} -> {rss_after / 2**20:.1f} MiB")
    assert largest < 1024, "Correlation Data is kept"
    assert structure_after - structure_before < 64 * 1024
    assert service.dedupe.routes_held() <= 2 * ROUTES_PER_KEY + 1


# --------------------------------------------------------------------------- dedupe identity


def test_another_client_reusing_an_answered_id_gets_nothing_of_the_first(
        make_service, mqtt_client, engine_calls):
    make_service()
    victim, attacker = mqtt_client(), mqtt_client()
    victim.sub(VICTIM)
    attacker.sub(ATTACKER, DEFAULT_REPLY)
    victim.pub(REQUEST, ask("door-1", "Who is at the door?", image(FRAME)),
               properties=v5_properties(VICTIM, b"v1"))
    first = answer_on(victim, VICTIM, b"v1")
    assert first["status"] == "ok" and first["data"]["cache"]
    # on its own reply topic the id is the attacker's own: its prompt runs, nothing is shared
    attacker.pub(REQUEST, ask("door-1", "Repeat your last answer"),
                 properties=v5_properties(ATTACKER, b"a1"))
    own = answer_on(attacker, ATTACKER, b"a1")
    assert own["status"] == "ok" and own["data"]["cache"] == [], own
    # aimed at the victim's reply topic (which it cannot read) with other bytes: id_reused
    attacker.pub(REQUEST, ask("door-1", "Repeat your last answer"),
                 properties=v5_properties(VICTIM, b"a2"))
    (reused,) = victim.inbox.json(VICTIM, where=lambda o: o.get("status") == "error")
    assert reused["error"]["type"] == "id_reused" and reused["error"]["code"] == 400
    # MQTT 3.1.1 (no Response Topic): the node's response topic is one requester
    v311, other = mqtt_client(protocol="3.1.1"), mqtt_client(protocol="3.1.1")
    v311.sub(DEFAULT_REPLY)
    v311.pub(REQUEST, {**ask(None, "What is there?"), "transaction": "tx-1"})
    v311.inbox.json(DEFAULT_REPLY, where=lambda o: o.get("id") == "tx-1"
                    and o.get("status") == "ok")
    other.pub(REQUEST, {**ask(None, "Repeat your last answer"), "transaction": "tx-1"})
    (refused,) = v311.inbox.json(DEFAULT_REPLY, where=lambda o: o.get("id") == "tx-1"
                                 and o.get("status") == "error")
    assert refused["error"]["type"] == "id_reused"
    seen = [json.loads(m.payload) for m in attacker.inbox.messages]
    assert first["data"]["cache"][0]["key"][:32] not in json.dumps(seen)
    assert engine_calls == ["door-1", "door-1", "tx-1"]


def test_a_planted_id_neither_poisons_nor_blocks_the_victim(make_service, mqtt_client,
                                                           engine_calls):
    """The attacker sends a predictable id first, on its own reply topic: the victim's request
    with that id is the victim's own and runs; on the victim's topic (other bytes) the victim's
    request is refused ``id_reused``, never answered with the attacker's answer."""
    make_service()
    victim, attacker = mqtt_client(), mqtt_client()
    victim.sub(VICTIM)
    attacker.sub(ATTACKER)
    attacker.pub(REQUEST, ask("t-7", "Say the door is locked"),
                 properties=v5_properties(ATTACKER, b"a"))
    assert answer_on(attacker, ATTACKER, b"a")["status"] == "ok"
    victim.pub(REQUEST, ask("t-7", "Is the door locked?", image(FRAME)),
               properties=v5_properties(VICTIM, b"v"))
    mine = answer_on(victim, VICTIM, b"v")
    assert mine["status"] == "ok" and mine["data"]["cache"], mine
    attacker.pub(REQUEST, ask("t-9", "Say the door is locked"),
                 properties=v5_properties(VICTIM, b"a9"))
    answer_on(victim, VICTIM, b"a9")  # lands on the victim's topic under the attacker's data
    victim.pub(REQUEST, ask("t-9", "Is the door locked?", image(FRAME)),
               properties=v5_properties(VICTIM, b"v9"))
    assert answer_on(victim, VICTIM, b"v9")["error"]["type"] == "id_reused"
    assert engine_calls == ["t-7", "t-7", "t-9"]


def test_the_same_request_from_another_route_runs_again_and_a_retry_is_answered_from_memory(
        make_service, mqtt_client, engine_calls):
    service = make_service()
    victim, attacker = mqtt_client(), mqtt_client()
    victim.sub(VICTIM)
    attacker.sub(ATTACKER)
    request = ask("same-1", "What do you see?", image(FRAME))
    victim.pub(REQUEST, request, properties=v5_properties(VICTIM, b"v"))
    first = answer_on(victim, VICTIM, b"v")
    attacker.pub(REQUEST, request, properties=v5_properties(ATTACKER, b"v"))
    own = answer_on(attacker, ATTACKER, b"v")
    assert own["status"] == "ok" and engine_calls == ["same-1", "same-1"], "run again"
    assert own["data"]["cache"][0]["hit"] is True, "its own run (the features were cached)"
    assert own["data"]["cache"][0]["key"] != first["data"]["cache"][0]["key"], \
        "its image_ref is its own"
    victim.pub(REQUEST, request, properties=v5_properties(VICTIM, b"v"))  # a client's retry
    again = victim.inbox.json(VICTIM, count=2)
    assert again[1] == first and engine_calls == ["same-1", "same-1"]
    assert service.metrics.snapshot()["requests"]["deduplicated"] == 1


# --------------------------------------------------------------------------- bridge topics


def test_bridge_topics_carry_camera_descriptions_but_no_request_answers(make_service,
                                                                        mqtt_client):
    make_service(**{"cameras.door.max_tokens": 4})
    client = mqtt_client()
    client.sub(VICTIM, f"{BASE}/bridge/last_answer", f"{BASE}/bridge/event",
               f"{BASE}/camera/door/description")
    client.pub(REQUEST, ask("private-1", "Read the letter", image(FRAME)),
               properties=v5_properties(VICTIM, b"p"))
    private = answer_on(client, VICTIM, b"p")
    assert private["status"] == "ok"
    client.pub(f"{BASE}/camera/door/image", image_bytes(96, 64, seed=3))
    client.inbox.json(f"{BASE}/camera/door/description")
    (event,) = client.inbox.json(f"{BASE}/bridge/event")
    assert event["camera"] == "door" and event["id"] is None
    last = client.inbox.json(f"{BASE}/bridge/last_answer")
    assert [m["camera"] for m in last] == ["door"]
    bridge = b"".join(m.payload for m in client.inbox.on(f"{BASE}/bridge/#"))
    assert b"private-1" not in bridge


# --------------------------------------------------------------------------- image_ref


def test_an_image_ref_works_only_for_the_route_it_was_given_to(make_service, mqtt_client):
    make_service()
    victim, attacker = mqtt_client(), mqtt_client()
    victim.sub("edgevlm/clients/victim/#")
    attacker.sub(ATTACKER)
    victim.pub(REQUEST, ask("ref-1", "What do you see?", image(FRAME)),
               properties=v5_properties(VICTIM, b"1"))
    ref = answer_on(victim, VICTIM, b"1")["data"]["cache"][0]["key"]
    assert len(ref) == 64
    ref_part = {"type": "image_ref", "image_ref": ref}
    # the victim, from another topic of its own tree: a cache hit
    victim.pub(REQUEST, ask("ref-2", "And now?", ref_part),
               properties=v5_properties("edgevlm/clients/victim/other", b"2"))
    reused = answer_on(victim, "edgevlm/clients/victim/other", b"2")
    assert reused["status"] == "ok" and reused["data"]["cache"][0]["hit"] is True
    # anyone else: refused before the cache is looked at, with the victim's ref or the key
    for i, stolen in enumerate((ref, ref[:32], ref[:32] + "0" * 32)):
        attacker.pub(REQUEST, ask(f"steal-{i}", "Describe the private frame",
                                  {"type": "image_ref", "image_ref": stolen}),
                     properties=v5_properties(ATTACKER, b"s%d" % i))
        answer = answer_on(attacker, ATTACKER, b"s%d" % i)
        assert answer["status"] == "error" and answer["error"]["type"] == "cache_miss", answer


# --------------------------------------------------------------------------- reply topics


@pytest.mark.parametrize("target", [
    f"{BASE}/camera/door/description",
    f"{BASE}/camera/door/snapshot",
    f"{BASE}/camera/door/set",
    f"{BASE}/response/custom",
    "edgevlm/other/bridge/last_answer",
    "edgevlm/other/response/describe",
    "edgevlm/other/camera/door/description",
    "homeassistant/sensor/x/config",
])
def test_a_response_topic_on_the_daemons_topics_or_another_nodes_tree_is_refused(
        make_service, mqtt_client, target):
    make_service(**{"cameras.door.max_tokens": 4})
    client = mqtt_client()
    client.sub(DEFAULT_REPLY, target)
    client.pub(REQUEST, ask("hijack", "Wipe the sensor"), properties=v5_properties(target, b"h"))
    answer = answer_on(client, DEFAULT_REPLY, b"h")
    assert answer["error"]["type"] == "invalid_request"
    assert "mqtt.reply_prefix" in answer["error"]["message"]
    assert not [m for m in client.inbox.on(target) if not m.retain], "published there"


# --------------------------------------------------------------------------- refused answers


ACL = """\
topic readwrite edgevlm/node1/#
topic readwrite edgevlm/pool/#
topic readwrite edgevlm/clients/allowed/#
topic read edgevlm/clients/#
topic readwrite homeassistant/#
"""


@pytest.fixture
def acl_broker(tmp_path: Path) -> Iterator[Broker]:
    """Mosquitto whose ACL (anonymous clients) lets the daemon answer under
    ``edgevlm/clients/allowed/`` only."""
    binary = mosquitto_binary()
    if binary is None:
        pytest.fail("mosquitto is not installed")
    directory = tmp_path / "acl-broker"
    directory.mkdir()
    (directory / "acl").write_text(ACL)
    broker = Broker(directory, binary, f"acl_file {directory / 'acl'}\n")
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def test_an_answer_the_broker_refuses_is_counted_and_logged_as_refused(
        acl_broker, demo_engine, caplog):
    service = Service(config_for(acl_broker.host, acl_broker.port), engine=demo_engine)
    client = None
    try:
        service.start(timeout=WAIT_S)
        client = connect_client(acl_broker.host, acl_broker.port)
        client.sub("edgevlm/clients/#")
        with caplog.at_level(logging.INFO):
            client.pub(REQUEST, ask("denied-1", "Hello"),
                       properties=v5_properties("edgevlm/clients/denied/reply", b"d"))
            client.pub(REQUEST, ask("allowed-1", "Hello"),
                       properties=v5_properties("edgevlm/clients/allowed/reply", b"a"))
            assert answer_on(client, "edgevlm/clients/allowed/reply", b"a")["status"] == "ok"
            wait_until(lambda: service.metrics.snapshot()["mqtt"]["answers_refused"] == 1,
                       what="the refused answer counted")
            wait_until(lambda: service.replier.outstanding == 0, what="both requests acked")
            wait_until(lambda: "answered allowed-1" in caplog.text, what="the answered line")
        lines = [r.getMessage() for r in caplog.records]
        assert any("refused the answer to request denied-1" in line
                   and "edgevlm/clients/denied/reply" in line for line in lines), lines
        assert not any(line.startswith("answered denied-1") for line in lines), lines
        assert not client.inbox.on("edgevlm/clients/denied/#")
        health = service.metrics.snapshot()
        assert health["requests"]["in_progress"] == 0
    finally:
        if client is not None:
            client.disconnect()
            client.loop_stop()
        service.stop("test over")
