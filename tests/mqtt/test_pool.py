"""The shared pool: boards on one ``$share`` group answer each request exactly once; a board
is a member on a connection of its own only while it serves (issue 22), and says so."""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

import pytest

from edgevlm.service import TEST_DELAY_ENV
from tests.helpers import text, user_request
from tests.mqtt.conftest import WAIT_S, close_client, v5_properties, wait_until

N_REQUESTS = 12


def test_two_daemons_in_one_shared_group_answer_each_pooled_request_once(
        make_service, mqtt_client):
    services = [make_service(**{"mqtt.node_id": node, "mqtt.shared_group": "team",
                                "limits.max_queue": N_REQUESTS}) for node in ("n1", "n2")]
    client = mqtt_client()
    reply = "edgevlm/clients/pool/reply"
    client.sub(reply, "edgevlm/+/bridge/pool")
    pool_state(client, "n1", True)  # both have joined (a board joins after its probe)
    pool_state(client, "n2", True)
    for i in range(N_REQUESTS):
        client.pub("edgevlm/pool/request/describe",
                   user_request(text(f"question {i}"), id=f"pool-{i}", max_tokens=4),
                   properties=v5_properties(reply, f"c{i}".encode()))
    client.inbox.wait(reply, count=N_REQUESTS)
    wait_until(lambda: sum(s.metrics.snapshot()["requests"]["answered"] for s in services)
               == N_REQUESTS, what="both daemons' counters")
    answers = [json.loads(m.payload) for m in client.inbox.on(reply)]
    ids = Counter(a["id"] for a in answers)
    assert ids == Counter({f"pool-{i}": 1 for i in range(N_REQUESTS)})
    assert all(a["status"] == "ok" for a in answers)
    answered = [s.metrics.snapshot()["requests"]["answered"] for s in services]
    assert sum(answered) == N_REQUESTS
    assert all(n > 0 for n in answered), f"the broker should spread the load: {answered}"


def test_pool_subscription_can_be_disabled(make_service, mqtt_client):
    make_service(**{"mqtt.shared_group": None})
    client = mqtt_client()
    client.sub("edgevlm/+/response/describe", "edgevlm/node1/bridge/state")
    client.inbox.wait("edgevlm/node1/bridge/state")
    client.pub("edgevlm/pool/request/describe", user_request(text("hi"), id="p-off"))
    client.pub("edgevlm/node1/request/describe", user_request(text("hi"), id="direct"))
    answers = client.inbox.json("edgevlm/+/response/describe")
    assert [a["id"] for a in answers] == ["direct"]
    client.sub("edgevlm/node1/bridge/pool")
    state = client.inbox.json("edgevlm/node1/bridge/pool")[-1]
    assert (state["group"], state["member"]) == (None, False)
    assert "mqtt.shared_group: null" in state["reason"]


# --------------------------------------------------------------------------- issue 22

REPLY = "edgevlm/clients/pool/reply"


def pool_state(client: Any, node: str, member: bool, reason: str | None = None,
               timeout: float = WAIT_S, count: int = 1) -> dict[str, Any]:
    """The latest ``bridge/pool`` of ``node`` once ``count`` of them said ``member`` (and
    ``reason``)."""

    def matches(state: dict[str, Any]) -> bool:
        return state.get("member") is member and (reason is None
                                                  or reason in (state.get("reason") or ""))

    return client.inbox.json(f"edgevlm/{node}/bridge/pool", count, timeout=timeout,
                             where=matches)[-1]


def test_each_board_is_in_the_pool_on_its_own_connection_and_says_so(
        make_service, mqtt_client, broker):
    service = make_service(**{"mqtt.node_id": "n1", "mqtt.shared_group": "team"})
    client = mqtt_client()
    client.sub("edgevlm/n1/bridge/pool", "edgevlm/n1/bridge/info", "edgevlm/n1/bridge/health")
    state = pool_state(client, "n1", True)
    assert state["group"] == "team" and state["reason"] is None and "since" in state
    info = client.inbox.json("edgevlm/n1/bridge/info")[-1]
    assert info["capabilities"]["pool_group"] == "team"
    service.bridge.publish_health()
    health = client.inbox.json("edgevlm/n1/bridge/health",
                               where=lambda h: (h.get("pool") or {}).get("member"))[-1]
    assert health["pool"] == {"group": "team", "member": True, "reason": None, "joins": 1}
    assert "edgevlm-n1-pool" in broker.log()  # its own client id, beside edgevlm-n1
    assert service.pool is not None and service.pool.settings.session_expiry_s == 0
    assert service.pool.settings.clean_start and service.pool.settings.keepalive == 2


def test_a_stopped_board_leaves_the_pool_and_its_session_keeps_no_pooled_requests(
        make_service, mqtt_client, broker):
    """The issue's failure: a board's persistent session stayed in the `$share` group after
    it went away, and the broker queued every second pooled request for it. Here board n1
    also starts from a persistent session an earlier version left subscribed to the pool."""
    pool_filter = "$share/team/edgevlm/pool/request/describe"
    stale = mqtt_client(client_id="edgevlm-n1", clean=False)  # the old daemon's session
    stale.sub(pool_filter)
    close_client(stale)
    n1 = make_service(**{"mqtt.node_id": "n1", "mqtt.shared_group": "team"})
    # room for every request: a busy answer on a loaded machine is not what this tests
    n2 = make_service(**{"mqtt.node_id": "n2", "mqtt.shared_group": "team",
                         "limits.max_queue": N_REQUESTS})
    client = mqtt_client()
    client.sub(REPLY, "edgevlm/+/bridge/pool")
    pool_state(client, "n1", True)
    pool_state(client, "n2", True)
    n1.stop("test: the board goes away")  # its main session persists (expiry 1 h)
    state = pool_state(client, "n1", False)
    assert state["reason"] == "stopped"
    for i in range(N_REQUESTS):
        client.pub("edgevlm/pool/request/describe",
                   user_request(text(f"question {i}"), id=f"after-{i}", max_tokens=4),
                   properties=v5_properties(REPLY, f"c{i}".encode()))
    answers = client.inbox.json(REPLY, count=N_REQUESTS, timeout=10.0)
    assert sorted(a["id"] for a in answers) == sorted(f"after-{i}" for i in range(N_REQUESTS))
    assert n2.metrics.snapshot()["requests"]["answered"] == N_REQUESTS, [
        (a["id"], a.get("error")) for a in answers if a.get("status") != "ok"]


def test_working_messages_until_the_answer_when_progress_is_asked(
        make_service, mqtt_client, monkeypatch):
    monkeypatch.setenv(TEST_DELAY_ENV, "2500")
    make_service(**{"mqtt.node_id": "n1", "mqtt.shared_group": "team"})
    client = mqtt_client()
    client.sub(REPLY, "edgevlm/n1/bridge/pool")
    pool_state(client, "n1", True)
    client.pub("edgevlm/pool/request/describe",
               user_request(text("slow"), id="w1", max_tokens=4, progress_s=1),
               properties=v5_properties(REPLY, b"w1"))
    final = client.inbox.json(REPLY, where=lambda m: m["status"] == "ok", timeout=10.0)[0]
    assert final["id"] == "w1"
    messages = [json.loads(m.payload) for m in client.inbox.on(REPLY)]
    working = [m for m in messages if m["status"] == "working"]
    assert len(working) >= 2, messages   # at once, then every second of the 2.5 s run
    assert {m["node"] for m in working} == {"n1"}
    assert all(m["id"] == m["transaction"] == "w1" for m in working)
    assert working[-1]["stage"] == "running"
    assert messages.index(final) > messages.index(working[-1]), "nothing after the answer"
    time.sleep(1.5)
    assert not [m for m in client.inbox.on(REPLY)[len(messages):]], "working after the answer"


def test_no_working_messages_unless_asked(make_service, mqtt_client):
    make_service(**{"mqtt.node_id": "n1"})
    client = mqtt_client()
    client.sub(REPLY)
    client.pub("edgevlm/n1/request/describe", user_request(text("hi"), id="quiet",
                                                           max_tokens=4),
               properties=v5_properties(REPLY))
    client.inbox.wait(REPLY)
    time.sleep(0.5)
    assert [json.loads(m.payload)["status"] for m in client.inbox.on(REPLY)] == ["ok"]


def test_a_board_that_cannot_serve_leaves_the_pool_until_it_recovers(
        make_service, mqtt_client, monkeypatch):
    from edgevlm.liveness import LivenessPolicy

    monkeypatch.setenv(TEST_DELAY_ENV, "3000")     # n1's worker: 3 s per job
    n1 = make_service(liveness=LivenessPolicy(stuck_s=1.0, check_interval_s=0.2),
                      **{"mqtt.node_id": "n1", "mqtt.shared_group": "team"})
    monkeypatch.delenv(TEST_DELAY_ENV)
    n2 = make_service(**{"mqtt.node_id": "n2", "mqtt.shared_group": "team"})
    client = mqtt_client()
    client.sub(REPLY, "edgevlm/+/bridge/pool")
    pool_state(client, "n1", True)
    pool_state(client, "n2", True)
    client.pub("edgevlm/n1/request/describe", user_request(text("slow"), id="slow"),
               properties=v5_properties(REPLY))
    state = pool_state(client, "n1", False, "cannot serve")
    assert "stuck worker" in state["reason"]
    assert n1.pool is not None and not n1.pool.member
    for i in range(6):
        client.pub("edgevlm/pool/request/describe",
                   user_request(text(f"q{i}"), id=f"while-{i}", max_tokens=4),
                   properties=v5_properties(REPLY))
    answers = client.inbox.json(REPLY, count=7, timeout=10.0)
    assert {a["id"] for a in answers} == {"slow", *(f"while-{i}" for i in range(6))}
    assert all(a["status"] == "ok" for a in answers), answers
    assert n2.metrics.snapshot()["requests"]["answered"] == 6
    pool_state(client, "n1", True, count=2)  # the job ended: serving, back in the pool
    assert n1.pool.joins == 2


def test_pooled_requests_waiting_on_a_board_that_leaves_are_answered_busy(
        make_service, mqtt_client, monkeypatch):
    from edgevlm.liveness import LivenessPolicy

    monkeypatch.setenv(TEST_DELAY_ENV, "3000")
    n1 = make_service(liveness=LivenessPolicy(stuck_s=1.0, check_interval_s=0.2),
                      **{"mqtt.node_id": "n1", "mqtt.shared_group": "team"})
    client = mqtt_client()
    client.sub(REPLY, "edgevlm/n1/bridge/pool")
    pool_state(client, "n1", True)
    for i in range(3):  # one runs (and gets stuck), two wait
        client.pub("edgevlm/pool/request/describe",
                   user_request(text(f"q{i}"), id=f"held-{i}", max_tokens=4),
                   properties=v5_properties(REPLY))
    pool_state(client, "n1", False, "cannot serve")
    busy = client.inbox.json(REPLY, count=2, where=lambda a: a["status"] == "error")
    assert {a["error"]["type"] for a in busy} == {"busy"}
    assert all("left the shared pool" in a["error"]["message"] for a in busy)
    assert n1.metrics.snapshot()["queue_depth"] == 0


def test_the_client_sends_the_same_request_again_when_the_pool_goes_silent(
        broker, mqtt_client):
    """edgevlm.ask.PoolRetry against a real broker, with this test as the board: no board
    takes it -> again; `working`, then silence -> again; `busy` -> again; ok -> done."""
    from edgevlm.ask import DescribeClient, PoolRetry, describe_request

    board = mqtt_client()
    board.sub("edgevlm/pool/request/describe")
    rule = PoolRetry(progress_s=1, accept_s=0.5, silence_s=2.0, busy_pause_s=0.2)
    with DescribeClient(broker.host, broker.port) as client:
        client.connect()
        waiter = client.send(describe_request("hi", request_id="r1"), None, retry=rule)
        sent = board.inbox.wait("edgevlm/pool/request/describe", count=2)
        assert sent[0].payload == sent[1].payload, "the same bytes"
        assert json.loads(sent[0].payload)["progress_s"] == 1
        reply, correlation = sent[0].properties.ResponseTopic, sent[0].properties.CorrelationData
        assert (sent[1].properties.ResponseTopic, sent[1].properties.CorrelationData) == (
            reply, correlation) == (client.reply_topic(), b"r1")

        def say(body: dict[str, Any]) -> int:
            board.pub(reply, {"v": 1, "id": "r1", "transaction": "r1", **body},
                      properties=v5_properties(correlation=correlation))
            return len(board.inbox.on("edgevlm/pool/request/describe"))

        before = say({"status": "working", "node": "b1", "stage": "running"})
        time.sleep(1.0)
        assert len(board.inbox.on("edgevlm/pool/request/describe")) == before, \
            "sent again although its board spoke a second ago"
        board.inbox.wait("edgevlm/pool/request/describe", count=before + 1)  # silence: again
        before = say({"status": "error", "error": {"code": 503, "type": "busy",
                                                   "message": "queue full"}})
        board.inbox.wait("edgevlm/pool/request/describe", count=before + 1)
        say({"status": "ok", "data": {"text": "hello"}})
        answer = client.wait(waiter, WAIT_S)
        assert answer["status"] == "ok" and answer["data"]["text"] == "hello"
        assert waiter.attempts == len(board.inbox.on("edgevlm/pool/request/describe"))
        assert len({m.payload for m in board.inbox.on("edgevlm/pool/request/describe")}) == 1


def test_without_the_rule_a_request_is_published_once(broker, mqtt_client):
    from edgevlm.ask import DescribeClient, NoAnswer, describe_request

    board = mqtt_client()
    board.sub("edgevlm/pool/request/describe")
    with DescribeClient(broker.host, broker.port) as client:
        client.connect()
        waiter = client.send(describe_request("hi", request_id="once"), None)
        with pytest.raises(NoAnswer):
            client.wait(waiter, 1.5)
    assert len(board.inbox.on("edgevlm/pool/request/describe")) == 1
    assert "progress_s" not in json.loads(board.inbox.on("edgevlm/pool/request/describe")[0]
                                          .payload)


def test_after_a_silence_the_client_sends_it_to_the_board_it_heard_from_last(
        broker, mqtt_client):
    """The broker may keep handing pooled requests to a board whose network is cut until it
    notices: a request whose board (b1) fell silent goes to b2's own request topic, as b2
    was heard from since."""
    from edgevlm.ask import DescribeClient, PoolRetry, describe_request

    board = mqtt_client()
    board.sub("edgevlm/pool/request/describe", "edgevlm/+/request/describe")
    rule = PoolRetry(progress_s=1, accept_s=10, silence_s=1.0)
    with DescribeClient(broker.host, broker.port) as client:
        client.connect()
        lost = client.send(describe_request("lost", request_id="a"), None, retry=rule)
        alive = client.send(describe_request("alive", request_id="b"), None, retry=rule)
        board.inbox.wait("edgevlm/pool/request/describe", count=2)
        props = v5_properties(client.reply_topic())

        def working(rid: str, node: str) -> None:
            props.CorrelationData = rid.encode()
            board.pub(client.reply_topic(), {"v": 1, "id": rid, "transaction": rid,
                                             "status": "working", "node": node,
                                             "stage": "running"}, properties=props)

        working("a", "b1")
        for _ in range(8):   # b2 keeps working on "b"; b1 says nothing more about "a"
            working("b", "b2")
            time.sleep(0.25)
        again = board.inbox.wait("edgevlm/b2/request/describe")[0]
        first = next(m.payload for m in board.inbox.on("edgevlm/pool/request/describe")
                 if json.loads(m.payload)["id"] == "a")
        assert again.payload == first, "the same bytes"
        assert not board.inbox.on("edgevlm/b1/request/describe"), "never to the silent one"
        for rid in ("a", "b"):
            props.CorrelationData = rid.encode()
            board.pub(client.reply_topic(), {"v": 1, "id": rid, "transaction": rid,
                                             "status": "ok", "data": {"text": rid}},
                      properties=props)
        assert client.wait(lost, WAIT_S)["data"]["text"] == "a"
        assert client.wait(alive, WAIT_S)["data"]["text"] == "b"
