"""The MQTT side's small parts without a broker: topics, dedupe memory, the job queue."""

from __future__ import annotations

from typing import Any

import pytest

from edgevlm.frontdoors.mqtt.client import publish_packet_size
from edgevlm.frontdoors.mqtt.dedupe import ROUTES_PER_KEY, DedupeMemory, RequestKey, route_digest
from edgevlm.frontdoors.mqtt.replies import Ack, Route
from edgevlm.frontdoors.mqtt.requests import dedupe_key, refusal_key
from edgevlm.frontdoors.mqtt.topics import ReplyPolicy, RequestTopic, Topics
from edgevlm.pipeline.jobs import JobQueue
from edgevlm.wire.protocol import Response

T = Topics("edgevlm", "garage")
T_REPLIES = ReplyPolicy.for_node(T, None, ["homeassistant/#"])


def test_topics_are_built_under_base_and_node():
    assert T.state == "edgevlm/garage/bridge/state"
    assert T.request("describe") == "edgevlm/garage/request/describe"
    assert T.response("describe") == "edgevlm/garage/response/describe"
    assert T.pool_subscription("g", "describe") == "$share/g/edgevlm/pool/request/describe"
    assert T.camera("door", "description") == "edgevlm/garage/camera/door/description"
    assert T.request_subscriptions(None) == ["edgevlm/garage/request/describe"]
    assert T.request_subscriptions("g")[1] == "$share/g/edgevlm/pool/request/describe"


@pytest.mark.parametrize(("topic", "parsed"), [
    ("edgevlm/garage/request/describe", RequestTopic("describe", False)),
    ("edgevlm/pool/request/describe", RequestTopic("describe", True)),
    ("edgevlm/garage/request/unknown", None),
    ("edgevlm/other/request/describe", None),
    ("edgevlm/garage/response/describe", None),
    ("edgevlmx/garage/request/describe", None),
])
def test_request_topics_are_parsed_for_this_node_and_the_pool(topic, parsed):
    assert T.parse_request(topic) == parsed


@pytest.mark.parametrize(("topic", "allowed"), [
    ("edgevlm/clients/me/reply", True),
    ("edgevlm/clients/me", True),
    ("edgevlm/garage/response/describe", True),   # the default route, named explicitly
    ("edgevlm/garage/response/custom", False),
    ("other/reply", False),
    ("edgevlm", False),
    ("edgevlm/", False),
    ("edgevlm/clients/", False),
    ("edgevlm/clients/+/reply", False),
    ("edgevlm/clients/#", False),
    ("edgevlm/clients/a\0b", False),
    ("edgevlm/garage/request/describe", False),
    ("edgevlm/pool/request/describe", False),
    ("edgevlm/garage/bridge/state", False),
    ("edgevlm/garage/camera/door/description", False),
    ("edgevlm/other/camera/door/snapshot", False),
    ("edgevlm/other/response/describe", False),
    ("homeassistant/sensor/x/config", False),
])
def test_replies_go_only_under_the_reply_prefix_and_never_on_the_daemons_topics(topic, allowed):
    assert (T_REPLIES.refusal(topic) is None) is allowed, T_REPLIES.refusal(topic)


@pytest.mark.parametrize(("topic", "allowed"), [
    ("edgevlm/clients/me/reply", True),
    ("edgevlm/anything/reply", True),
    ("edgevlm/garage/x", False),                   # the node's own tree
    ("edgevlm/other/bridge/last_answer", False),   # any node's trees
    ("edgevlm/other/camera/door/set", False),
    ("edgevlm/pool/request/describe", False),
    ("cams/door/jpeg", False),                     # a camera topic the daemon subscribes to
    ("homeassistant/status", False),
])
def test_a_broad_reply_prefix_still_excludes_what_the_daemon_publishes_or_reads(topic, allowed):
    policy = ReplyPolicy.for_node(T, "edgevlm/", ["cams/+/jpeg", "homeassistant/#",
                                                  "$share/g/edgevlm/pool/request/describe"])
    assert (policy.refusal(topic) is None) is allowed, policy.refusal(topic)


def test_the_requester_is_the_first_level_under_the_prefix_or_the_shared_topic():
    assert T_REPLIES.requester("edgevlm/clients/alice/reply/1") == "edgevlm/clients/alice"
    assert T_REPLIES.requester("edgevlm/clients/alice") == "edgevlm/clients/alice"
    assert T_REPLIES.requester("edgevlm/garage/response/describe") == \
        "edgevlm/garage/response/describe"


def response(rid: str) -> Response:
    return Response.fail(rid, 400, "invalid_request", "x")


def key(name: str, payload: bytes = b"p") -> RequestKey:
    return dedupe_key("describe", name, payload, "edgevlm/clients/a")


def test_dedupe_attaches_arrivals_on_the_same_route_and_answers_from_memory_after():
    memory = DedupeMemory()
    a = Route("edgevlm/a", b"c")
    k = key("k")
    assert memory.claim(k, a, Ack(1, 1)).kind == "new"
    assert memory.claim(k, a, Ack(2, 1)).kind == "running", "a client's retry"
    assert memory.claim(k, a, Ack(3, 1), redelivered=True).kind == "running"
    attached = memory.complete(k, a, response("k"))
    assert attached.repeats == 1, "a redelivered copy on the same route is not answered twice"
    assert attached.acks == [Ack(2, 1), Ack(3, 1)], "but it is acknowledged"
    claim = memory.claim(k, a, Ack(4, 1))
    assert claim.kind == "done" and claim.response == response("k")


def test_dedupe_the_same_request_from_another_route_is_another_requester():
    """It never gets the first answer (nor is attached to the first run): it runs itself."""
    memory = DedupeMemory()
    a, b, a2 = Route("edgevlm/a", b"c"), Route("edgevlm/b", b"c"), Route("edgevlm/a", b"d")
    k = key("k")
    assert memory.claim(k, a, Ack(1, 1)).kind == "new"
    assert memory.claim(k, b, Ack(2, 1)).kind == "new", "not attached to a's run"
    assert memory.complete(k, a, response("a")).acks == []
    assert memory.claim(k, a2, Ack(3, 1)).kind == "new", "other correlation data: other route"
    assert memory.complete(k, b, response("b")).acks == []
    assert memory.claim(k, b, None).response == response("b")
    assert memory.claim(k, a, None).response == response("a")


def test_dedupe_an_id_with_other_bytes_is_refused_while_the_first_is_known():
    memory = DedupeMemory()
    a, b = Route("edgevlm/a"), Route("edgevlm/b")
    memory.claim(key("t-7", b"attacker"), a, None)
    assert memory.claim(key("t-7", b"victim"), b, None).kind == "reused", "while running"
    memory.complete(key("t-7", b"attacker"), a, response("t-7"))
    assert memory.claim(key("t-7", b"victim"), b, None).kind == "reused", "while remembered"
    assert memory.claim(key("t-7", b"victim"), a, None).kind == "reused", "from any route"
    assert memory.claim(key("t-8", b"victim"), b, None).kind == "new"


def test_dedupe_a_redelivery_of_a_sent_answer_is_only_acknowledged():
    """After a reconnect the broker redelivers requests answered while the connection was
    down; paho sends those answers itself, so a second answer would be a duplicate."""
    memory = DedupeMemory()
    a, b = Route("edgevlm/a"), Route("edgevlm/b")
    k = key("k")
    memory.claim(k, a, Ack(1, 1))
    memory.complete(k, a, response("k"))
    assert memory.claim(k, a, Ack(1, 1), redelivered=True).kind == "done", \
        "not handed to paho yet: answered again (a duplicate at worst, never a loss)"
    memory.mark_sent(k, a)
    assert memory.claim(k, a, Ack(1, 1), redelivered=True).kind == "sent"
    assert memory.claim(k, a, Ack(2, 1)).kind == "done", "a client's retry is answered"
    assert memory.claim(k, b, Ack(3, 1), redelivered=True).kind == "new", "another route"


def test_dedupe_forgets_after_the_window_and_beyond_max_entries():
    now = [0.0]
    memory = DedupeMemory(window_s=10, max_entries=2, clock=lambda: now[0])
    route = Route("edgevlm/r")
    for name in ("k1", "k2", "k3"):
        memory.claim(key(name), route, None)
        memory.complete(key(name), route, response(name))
    assert memory.claim(key("k1"), route, None).kind == "new", "oldest dropped (max_entries)"
    assert memory.claim(key("k3"), route, None).kind == "done"
    now[0] = 11.0
    assert memory.claim(key("k3"), route, None).kind == "new", "expired after the window"


def test_dedupe_keeps_a_few_routes_per_key_and_max_entries_routes_in_all():
    memory = DedupeMemory(max_entries=6)
    k = key("k")
    routes = [Route("edgevlm/r", b"%d" % i) for i in range(10)]
    for route in routes:
        assert memory.claim(k, route, None).kind == "new"
        memory.complete(k, route, response("k"))
        memory.mark_sent(k, route)
    assert memory.routes_held() == ROUTES_PER_KEY
    assert memory.claim(k, routes[-1], None).kind == "done"
    assert memory.claim(k, routes[0], None).kind == "new", "the oldest route is forgotten"
    memory.forget(k, routes[0])
    for name in ("x", "y", "z"):
        memory.claim(key(name), routes[0], None)
        memory.complete(key(name), routes[0], response(name))
    assert memory.routes_held() <= 6


def test_dedupe_does_not_remember_when_told_not_to():
    memory = DedupeMemory()
    r = Route("edgevlm/r")
    memory.claim(key("k"), r, None)
    memory.complete(key("k"), r, response("k"), remember=False)
    assert memory.claim(key("k"), r, None).kind == "new"


def test_dedupe_a_redelivery_of_an_answer_not_remembered_is_only_acknowledged():
    """``busy`` (and the other answers a retry does not get again) and refusals: a client's
    retry runs again, a broker's redelivered copy of the answered message does not."""
    memory = DedupeMemory()
    a, b = Route("edgevlm/a"), Route("edgevlm/b")
    k = key("k")
    memory.claim(k, a, Ack(1, 1))
    memory.complete(k, a, response("k"), remember=False)
    memory.mark_sent(k, a)
    assert memory.claim(k, a, Ack(1, 1), redelivered=True).kind == "sent"
    assert memory.claim(k, b, Ack(2, 1), redelivered=True).kind == "new", "another route"
    memory.forget(k, b)
    assert memory.claim(k, a, Ack(3, 1)).kind == "new", "a client's retry runs again"
    assert len(memory) == 0, "nothing to answer a retry from"
    refused = refusal_key("describe", b"{not json")
    assert not memory.sent_before(refused, a)
    memory.mark_sent(refused, a)
    assert memory.sent_before(refused, a) and not memory.sent_before(refused, b)


def test_dedupe_answers_not_remembered_never_push_out_remembered_ones():
    """A flood of refusals fills a memory of its own, not the one that answers retries."""
    memory = DedupeMemory(max_entries=4)
    route = Route("edgevlm/r")
    memory.claim(key("good"), route, None)
    memory.complete(key("good"), route, response("good"))
    for i in range(100):
        memory.mark_sent(refusal_key("describe", b"bad %d" % i), route)
    assert memory.claim(key("good"), route, None).kind == "done"
    assert memory.sent_before(refusal_key("describe", b"bad 99"), route)
    assert not memory.sent_before(refusal_key("describe", b"bad 0"), route), "max_entries"


def test_refusal_key_is_the_length_and_the_first_bytes():
    big = b"x" * 200_000
    assert refusal_key("describe", big) == refusal_key("describe", big)
    assert refusal_key("describe", big) != refusal_key("describe", big + b"y")
    assert refusal_key("describe", b"a") != refusal_key("describe", b"b")
    assert refusal_key("describe", b"a") != refusal_key("ask", b"a")


def test_dedupe_key_is_the_id_or_a_hash_of_the_bytes_and_the_payload_digest():
    a, b = "edgevlm/clients/a/reply", "edgevlm/clients/b/reply"
    assert dedupe_key("describe", "abc", b"x", a).name.endswith(":id:abc")
    assert dedupe_key("describe", "abc", b"x", a) != dedupe_key("describe", "abc", b"y", a)
    assert dedupe_key("describe", None, b"x", a) == dedupe_key("describe", None, b"x", a)
    assert dedupe_key("describe", None, b"x", a).name != \
        dedupe_key("describe", None, b"y", a).name
    # an id is one requester's: another reply topic is another request altogether
    assert dedupe_key("describe", "abc", b"x", a).name != \
        dedupe_key("describe", "abc", b"x", b).name


def test_route_digests_tell_absent_empty_and_other_correlation_data_apart():
    digests = {route_digest(Route("t")), route_digest(Route("t", b"")),
               route_digest(Route("t", b"x")), route_digest(Route("t\0x")),
               route_digest(Route("u"))}
    assert len(digests) == 5


def job(name: str) -> Any:
    return name  # the queue does not look inside jobs


def test_job_queue_is_bounded_and_fifo():
    queue = JobQueue(2)
    assert queue.put(job("a")) and queue.put(job("b"))
    assert not queue.put(job("c"))
    assert [queue.get(0.1), queue.get(0.1), queue.get(0.01)] == ["a", "b", None]


def test_camera_slot_latest_frame_wins_and_keeps_its_place():
    queue = JobQueue(3)
    queue.put_latest("camera:door", job("door-1"))
    queue.put(job("request"))
    accepted, replaced = queue.put_latest("camera:door", job("door-2"))
    assert accepted and replaced == "door-1"
    assert len(queue) == 2
    assert [queue.get(0.1), queue.get(0.1)] == ["door-2", "request"]


def door_job(door: str, name: str) -> Any:
    from edgevlm.pipeline.jobs import RequestJob

    # the queue reads only the door; the request itself plays no part here
    return RequestJob(admitted=name, verb=None, reply=None, received=0.0,  # type: ignore[arg-type]
                      deadline=None, door=door)


def test_the_queue_takes_turns_between_the_front_doors_and_the_cameras():
    queue = JobQueue(10)
    for i in range(5):
        queue.put(door_job("http", f"h{i}"))
    queue.put(door_job("mqtt", "m0"))
    queue.put_latest("camera:door", job("c0"))
    queue.put(door_job("mqtt", "m1"))
    order = []
    while (taken := queue.get(0.01)) is not None:
        order.append(taken if isinstance(taken, str) else taken.admitted)
    # each lane's oldest in turn, the least recently served lane first; FIFO within a lane
    assert order == ["h0", "m0", "c0", "h1", "m1", "h2", "h3", "h4"]


def test_one_lane_alone_is_first_in_first_out():
    queue = JobQueue(5)
    for i in range(5):
        queue.put(door_job("mqtt", f"m{i}"))
    assert [queue.get(0.01).admitted for _ in range(5)] == [f"m{i}" for i in range(5)]


def test_closed_queue_refuses_and_returns_what_waited():
    queue = JobQueue(3)
    queue.put(job("a"))
    queue.put_latest("camera:x", job("x"))
    assert queue.close() == ["a", "x"]
    assert not queue.put(job("b"))
    assert queue.put_latest("camera:x", job("y")) == (False, None)


@pytest.mark.parametrize(("payload_len", "protocol5", "size"), [
    (10, False, 1 + 1 + (2 + 3 + 2 + 10)),
    (10, True, 1 + 1 + (2 + 3 + 2 + 1 + 10)),
    (200, False, 1 + 2 + (2 + 3 + 2 + 200)),
])
def test_publish_packet_size_follows_the_mqtt_encoding(payload_len, protocol5, size):
    assert publish_packet_size("a/b", b"x" * payload_len, 1, None, protocol5) == size


# --------------------------------------------------------------------------- acks and log lines


def network_acks(timeout_s: float = 600.0) -> tuple[Any, list[Ack]]:
    from edgevlm.frontdoors.mqtt.replies import _NetworkThreadAcks

    acked: list[Ack] = []
    return _NetworkThreadAcks(acked.append, timeout_s), acked


def test_network_thread_acks_wait_for_every_copy_of_the_answer():
    import paho.mqtt.client as paho

    tracker, acked = network_acks()
    tracker.track([paho.MQTTMessageInfo(7), paho.MQTTMessageInfo(8)], [Ack(100, 1)])
    tracker.track([paho.MQTTMessageInfo(9)], [Ack(101, 1), Ack(102, 1)])
    assert tracker.open == 2 and acked == []
    tracker.confirmed(7)
    tracker.confirmed(12345)  # a publish nobody waits for (state, events)
    assert acked == [], "one of two copies confirmed: not yet"
    tracker.confirmed(9)
    assert acked == [Ack(101, 1), Ack(102, 1)]
    tracker.confirmed(8)
    assert acked == [Ack(101, 1), Ack(102, 1), Ack(100, 1)] and tracker.open == 0
    tracker.confirmed(8)  # a second PUBACK of the same id changes nothing
    assert len(acked) == 3


def test_network_thread_acks_without_a_sent_copy_ack_at_once():
    tracker, acked = network_acks()
    tracker.track([], [Ack(5, 1)])  # every publish failed: nothing will be confirmed
    assert acked == [Ack(5, 1)] and tracker.open == 0


def test_network_thread_acks_give_up_after_the_timeout_leaving_the_request_unacked():
    import paho.mqtt.client as paho

    tracker, acked = network_acks(timeout_s=0.0)
    tracker.track([paho.MQTTMessageInfo(1)], [Ack(10, 1)])
    tracker.track([paho.MQTTMessageInfo(2)], [Ack(20, 1)])  # the first has expired by now
    assert tracker.open == 1
    tracker.confirmed(1)
    assert acked == [], "an expired answer's request stays unacknowledged (redelivered later)"


def test_refusals_are_logged_one_by_one_up_to_the_burst_then_summarised(caplog):
    import logging

    from edgevlm.frontdoors.mqtt.refusals import RefusalLog
    from edgevlm.wire.errors import WireError

    now = [0.0]
    logger = logging.getLogger("test.refusals")
    refusals = RefusalLog(logger, burst=2, interval_s=10.0, clock=lambda: now[0])
    bad = WireError(400, "invalid_request", "messages: field required")
    busy = WireError(503, "busy", "the queue is full")
    with caplog.at_level(logging.INFO, logger="test.refusals"):
        for rid in ("a", "b", "c", "d"):
            refusals.refused(rid, bad)
        refusals.refused("e", busy)
        assert [r.getMessage() for r in caplog.records] == [
            "refused request a: invalid_request: messages: field required",
            "refused request b: invalid_request: messages: field required"]
        now[0] = 10.5
        refusals.refused("f", bad)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[2] == ("refused 3 more requests within 10 s (not logged one by one; "
                        "bridge/health counts them): busy 1, invalid_request 2")
    assert lines[3] == "refused request f: invalid_request: messages: field required"
    assert len(lines) == 4
