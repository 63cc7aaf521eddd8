"""The embedded broker (``edgevlm demo`` without Mosquitto) with real paho clients."""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from edgevlm.frontdoors.mqtt.embedded_broker import EmbeddedBroker
from edgevlm.frontdoors.mqtt.embedded_codec import topic_matches, valid_filter

WAIT_S = 15.0


class Client:
    """A connected paho client that records what it receives."""

    def __init__(self, port: int, protocol: int = paho.MQTTv5, client_id: str = "",
                 will: tuple[str, bytes, Properties | None] | None = None,
                 connect_props: Properties | None = None) -> None:
        self.messages: list[paho.MQTTMessage] = []
        self.cond = threading.Condition()
        self.connack: Any = None
        self.client = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id,
                                  protocol=protocol)
        self.client.on_message = self._on_message
        connected = threading.Event()

        def on_connect(c: Any, u: Any, flags: Any, rc: Any, props: Any = None) -> None:
            self.connack = props
            connected.set()

        self.client.on_connect = on_connect
        if will is not None:
            self.client.will_set(will[0], will[1], qos=1, properties=will[2])
        kwargs: dict[str, Any] = {"properties": connect_props} if protocol == paho.MQTTv5 else {}
        self.client.connect("127.0.0.1", port, keepalive=30, **kwargs)
        self.client.loop_start()
        assert connected.wait(WAIT_S), "no CONNACK"

    def _on_message(self, c: Any, u: Any, msg: paho.MQTTMessage) -> None:
        with self.cond:
            self.messages.append(msg)
            self.cond.notify_all()

    def sub(self, *topics: str, qos: int = 1) -> None:
        done = threading.Event()
        self.client.on_subscribe = lambda *a: done.set()
        self.client.subscribe([(t, qos) for t in topics])
        assert done.wait(WAIT_S), "no SUBACK"

    def pub(self, topic: str, payload: bytes | str, qos: int = 1, retain: bool = False,
            props: Properties | None = None) -> None:
        info = self.client.publish(topic, payload, qos=qos, retain=retain, properties=props)
        info.wait_for_publish(WAIT_S)

    def wait(self, count: int = 1, topic: str = "#") -> list[paho.MQTTMessage]:
        deadline = time.monotonic() + WAIT_S
        with self.cond:
            while True:
                got = [m for m in self.messages if paho.topic_matches_sub(topic, m.topic)]
                if len(got) >= count or time.monotonic() > deadline:
                    return got
                self.cond.wait(0.05)

    def settle(self) -> list[paho.MQTTMessage]:
        """Everything received after a round trip through the broker (nothing in flight)."""
        marker = f"settle/{id(self)}/{time.monotonic_ns()}"
        self.sub(marker)
        self.pub(marker, b"x")
        self.wait(1, marker)
        with self.cond:
            return [m for m in self.messages if not m.topic.startswith("settle/")]

    def close(self, clean: bool = True) -> None:
        if clean:
            self.client.disconnect()
        else:  # drop the TCP connection without DISCONNECT: the will fires
            sock = self.client.socket()
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)
        self.client.loop_stop()


@pytest.fixture
def broker() -> Iterator[EmbeddedBroker]:
    b = EmbeddedBroker(port=0)
    b.start()
    yield b
    b.stop()


@pytest.fixture
def connect(broker: EmbeddedBroker) -> Iterator[Callable[..., Client]]:
    clients: list[Client] = []

    def make(**kwargs: Any) -> Client:
        client = Client(broker.port, **kwargs)
        clients.append(client)
        return client

    yield make
    for client in clients:
        with contextlib.suppress(Exception):
            client.close()


def test_topic_filters_match_like_the_spec() -> None:
    assert topic_matches("a/+/c", "a/b/c") and not topic_matches("a/+", "a/b/c")
    assert topic_matches("a/#", "a") and topic_matches("#", "a/b")
    assert not topic_matches("#", "$SYS/x") and not topic_matches("+/x", "$share/x")
    assert valid_filter("a/+/#") and not valid_filter("a/b#") and not valid_filter("a/#/b")


def test_v5_publish_reaches_a_wildcard_subscriber_with_its_properties(
        connect: Callable[..., Client]) -> None:
    sub, pub = connect(), connect()
    sub.sub("edgevlm/+/request/#")
    props = Properties(PacketTypes.PUBLISH)
    props.ResponseTopic = "edgevlm/n1/reply/abc"
    props.CorrelationData = b"\x01\x02"
    props.MessageExpiryInterval = 60
    props.UserProperty = [("k", "v"), ("k", "w")]
    pub.pub("edgevlm/n1/request/describe", b'{"id": "1"}', props=props)
    (msg,) = sub.wait(1)
    assert (msg.topic, msg.payload, msg.qos) == ("edgevlm/n1/request/describe",
                                                  b'{"id": "1"}', 1)
    assert msg.properties.ResponseTopic == "edgevlm/n1/reply/abc"
    assert msg.properties.CorrelationData == b"\x01\x02"
    assert 0 < msg.properties.MessageExpiryInterval <= 60
    assert msg.properties.UserProperty == [("k", "v"), ("k", "w")]


def test_connack_announces_the_maximum_packet_size(connect: Callable[..., Client]) -> None:
    client = connect()
    assert client.connack.MaximumPacketSize == EmbeddedBroker().max_packet_size


def test_mqtt_311_clients_talk_to_v5_clients(connect: Callable[..., Client]) -> None:
    old, new = connect(protocol=paho.MQTTv311), connect()
    old.sub("t/#")
    new.sub("t/#")
    props = Properties(PacketTypes.PUBLISH)
    props.ResponseTopic = "r"
    new.pub("t/1", b"from v5", props=props)
    old.pub("t/2", b"from 3.1.1", qos=0)
    assert sorted(m.payload for m in old.wait(2)) == [b"from 3.1.1", b"from v5"]
    assert sorted(m.payload for m in new.wait(2)) == [b"from 3.1.1", b"from v5"]


def test_retained_messages_go_to_later_subscribers_until_cleared(
        connect: Callable[..., Client]) -> None:
    pub = connect()
    pub.pub("state/a", b"online", retain=True)
    pub.pub("state/b", b"OFF", retain=True)
    first = connect(protocol=paho.MQTTv311)
    first.sub("state/+")
    got = first.wait(2)
    assert sorted((m.topic, m.payload, m.retain) for m in got) == [
        ("state/a", b"online", True), ("state/b", b"OFF", True)]
    pub.pub("state/a", b"", retain=True)  # clear
    later = connect()
    later.sub("state/#")
    assert [(m.topic, m.payload) for m in later.settle()] == [("state/b", b"OFF")]


def test_live_messages_to_a_subscriber_are_not_flagged_retained(
        connect: Callable[..., Client]) -> None:
    sub, pub = connect(), connect()
    sub.sub("x")
    pub.pub("x", b"1", retain=True)
    (msg,) = sub.wait(1)
    assert not msg.retain


def test_unsubscribe_stops_delivery(connect: Callable[..., Client]) -> None:
    sub, pub = connect(), connect()
    sub.sub("u/#")
    pub.pub("u/1", b"a")
    sub.wait(1)
    done = threading.Event()
    sub.client.on_unsubscribe = lambda *a: done.set()
    sub.client.unsubscribe("u/#")
    assert done.wait(WAIT_S)
    pub.pub("u/2", b"b")
    assert [m.payload for m in sub.settle()] == [b"a"]


def test_will_is_published_when_a_client_drops_and_not_on_disconnect(
        connect: Callable[..., Client]) -> None:
    watcher = connect()
    watcher.sub("bridge/#")
    dropping = connect(client_id="d1", will=("bridge/d1", b"offline", None))
    leaving = connect(client_id="d2", protocol=paho.MQTTv311,
                      will=("bridge/d2", b"offline", None))
    leaving.close(clean=True)
    dropping.close(clean=False)
    (msg,) = watcher.wait(1, "bridge/#")
    assert (msg.topic, msg.payload) == ("bridge/d1", b"offline")
    assert [m.topic for m in watcher.settle()] == ["bridge/d1"]


def test_v5_will_delay_is_cancelled_by_a_quick_reconnect(
        connect: Callable[..., Client]) -> None:
    watcher = connect()
    watcher.sub("bridge/#")
    will_props = Properties(PacketTypes.WILLMESSAGE)
    will_props.WillDelayInterval = 2
    first = connect(client_id="n1", will=("bridge/n1", b"offline", will_props))
    first.close(clean=False)
    connect(client_id="n1")  # back before the delay is over
    time.sleep(3)
    assert watcher.settle() == []
    quick = connect(client_id="n2", will=("bridge/n2", b"offline", will_props))
    quick.close(clean=False)
    (msg,) = watcher.wait(1, "bridge/n2")
    assert msg.payload == b"offline"


def test_shared_subscription_gives_each_message_to_one_member(
        connect: Callable[..., Client]) -> None:
    a, b, plain, pub = connect(), connect(), connect(), connect()
    a.sub("$share/pool/jobs/#")
    b.sub("$share/pool/jobs/#")
    plain.sub("jobs/#")
    for i in range(10):
        pub.pub(f"jobs/{i}", str(i).encode())
    plain.wait(10)
    got_a, got_b = a.settle(), b.settle()
    assert len(got_a) + len(got_b) == 10
    assert got_a and got_b  # both members took some
    assert sorted(int(m.payload) for m in got_a + got_b) == list(range(10))
    assert len(plain.settle()) == 10


def test_pingreq_keeps_the_connection_and_stop_closes_everything(
        broker: EmbeddedBroker) -> None:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as sock:
        # CONNECT 3.1.1, clean session, keepalive 5 s, client id "raw"
        body = b"\x00\x04MQTT\x04\x02\x00\x05\x00\x03raw"
        sock.sendall(bytes([0x10, len(body)]) + body)
        assert sock.recv(4) == b"\x20\x02\x00\x00"
        sock.sendall(b"\xc0\x00")
        assert sock.recv(2) == b"\xd0\x00"
        broker.stop()
        assert sock.recv(16) == b""


def test_a_packet_over_the_maximum_size_closes_the_connection() -> None:
    broker = EmbeddedBroker(port=0, max_packet_size=1024)
    port = broker.start()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            body = b"\x00\x04MQTT\x04\x02\x00\x05\x00\x03big"
            sock.sendall(bytes([0x10, len(body)]) + body)
            assert sock.recv(4) == b"\x20\x02\x00\x00"
            sock.sendall(b"\x30\xff\x7f" + b"\x00\x01t" + b"x" * 100)  # claims 16383 bytes
            assert sock.recv(16) == b""
    finally:
        broker.stop()


def test_stop_with_open_connections_ends_each_quietly(caplog: pytest.LogCaptureFixture
                                                      ) -> None:
    """Issue 19: stopping with clients still connected (the demo's last DISCONNECTs still in
    flight) cancelled their reads and asyncio logged a traceback; repeated, it is cheap."""
    caplog.set_level(logging.DEBUG)
    for _ in range(5):
        broker = EmbeddedBroker(port=0)
        port = broker.start()
        v5 = Client(port, client_id="v5")
        v5.sub("t/#")
        v311 = Client(port, protocol=paho.MQTTv311, client_id="v311",
                      will=("t/will", b"gone", None))
        v311.pub("t/x", b"1")
        v311.client.disconnect()  # its DISCONNECT may reach the broker after stop() began
        v5.client.loop_stop()  # its socket stays open, nobody reading it
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
                socket.create_connection(("127.0.0.1", port), timeout=5) as silent:
            body = b"\x00\x04MQTT\x04\x02\x00\x05\x00\x03raw"
            raw.sendall(bytes([0x10, len(body)]) + body)
            assert raw.recv(4) == b"\x20\x02\x00\x00"
            broker.stop()
            assert raw.recv(16) == b""
            with contextlib.suppress(ConnectionResetError):  # before or after its accept
                assert silent.recv(16) == b""
        broker.stop()  # idempotent
        v311.client.loop_stop()
        sock = v5.client.socket()
        if sock is not None:
            sock.close()
    problems = [f"{r.name}: {r.getMessage()}" for r in caplog.records
                if r.levelno >= logging.WARNING]
    assert problems == []
