"""Hostile MQTT v5 properties and oversized packets never cost the daemon its connection.

U+FEFF is valid UTF-8 that MQTT 5 §1.5.4 says a receiver must not strip, and Mosquitto
forwards it (measured with 2.0.11, below); paho 2.2 raises ``MalformedPacket`` for it inside
its packet handler and drops the connection, the broker redelivers the unacknowledged request
after the reconnect, and the daemon loops without answering (issue 20, finding 1). What truly
cannot be read (ill-formed UTF-8, U+0000, a length past the properties, an identifier a
PUBLISH cannot carry) Mosquitto never forwards — it disconnects the publisher — so those reach
the daemon here from :class:`~tests.reliability.raw_mqtt5.RawBroker`, a broker of our own:
the daemon acknowledges and drops them and keeps its connection.

Every test runs with both property classes paho's decoder may build: edgevlm's
``FastProperties`` (installed) and paho's own ``Properties`` (``fast_properties.COMPATIBLE``
false: a paho that FastProperties does not fit).

A request bigger than the Maximum Packet Size in the daemon's CONNECT (issue 20, finding 7)
is dropped by the broker before the daemon reads any of it.
"""

from __future__ import annotations

import json
import re
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from paho.mqtt import _packet
from paho.mqtt.exception import MalformedPacket
from paho.mqtt.properties import Properties

from edgevlm.frontdoors.mqtt import fast_properties
from edgevlm.frontdoors.mqtt.client import Incoming, LinkSettings, MqttLink, max_incoming_packet
from tests.helpers import text, user_request
from tests.mqtt.conftest import WAIT_S
from tests.reliability import raw_mqtt5 as raw
from tests.reliability.conftest import BASE, REQUEST_TOPIC, rss_bytes

REPLY = "edgevlm/clients/hostile/reply"
BOM_REPLY = "edgevlm/clients/\ufeffhostile/reply"


def ask(rid: str) -> bytes:
    return json.dumps(user_request(text(f"question {rid}"), id=rid, max_tokens=4)).encode()


def reply_props(reply: str, correlation: str, *more: bytes) -> bytes:
    return raw.properties(raw.prop(raw.RESPONSE_TOPIC, raw.utf8(reply)),
                          raw.prop(raw.CORRELATION_DATA, raw.utf8(correlation)), *more)


@pytest.fixture(params=["FastProperties", "paho Properties"])
def decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The class paho's packet decoder builds: ours, or paho's own (the COMPATIBLE=False
    path, where ``install`` leaves paho alone)."""
    if request.param == "paho Properties":
        monkeypatch.setattr(fast_properties, "COMPATIBLE", False)
        monkeypatch.setattr(_packet, "Properties", Properties)
    else:
        monkeypatch.setattr(_packet, "Properties", _packet.Properties)  # restored after
        assert fast_properties.install()
    yield request.param


# --------------------------------------------------------------------------- U+FEFF, Mosquitto

BOM_CASES = {
    "bom-response-topic": reply_props(BOM_REPLY, "bom-response-topic"),
    "bom-user-property": reply_props(REPLY, "bom-user-property", raw.prop(
        raw.USER_PROPERTY, raw.utf8("\ufeffkey") + raw.utf8("value\ufeff"))),
    "bom-content-type": reply_props(REPLY, "bom-content-type", raw.prop(
        raw.CONTENT_TYPE, raw.utf8("\ufeffapplication/json"))),
}


def test_requests_with_u_feff_in_properties_are_answered_on_one_connection(
        make_service, mqtt_client, broker, decoder):
    """A QoS 1 request with U+FEFF in its Response Topic, a User Property or its Content
    Type: answered once (the first on its U+FEFF response topic), acknowledged, no
    disconnect and no redelivery loop."""
    service = make_service()
    client = mqtt_client()
    client.sub("edgevlm/clients/#")
    sender = raw.RawClient.connect(broker.host, broker.port, "hostile-sender")
    try:
        for mid, (rid, props) in enumerate(BOM_CASES.items(), 1):
            ack = sender.publish("edgevlm/node1/request/describe", ask(rid), props, mid=mid)
            assert ack is not None and ack.reason == 0, f"Mosquitto refused {rid}"
        got = client.inbox.wait("edgevlm/clients/#", count=len(BOM_CASES))
        answers = {m.properties.CorrelationData.decode(): (m.topic, json.loads(m.payload))
                   for m in got}
        assert set(answers) == set(BOM_CASES)
        for rid, (topic, answer) in answers.items():
            assert answer["id"] == rid and answer["status"] == "ok", answer
            assert topic == (BOM_REPLY if rid == "bom-response-topic" else REPLY)
        time.sleep(2.0)  # a disconnect and redelivery loop would show by now
        assert service.link.connects == 1, "the daemon lost its connection"
        assert len(client.inbox.on("edgevlm/clients/#")) == len(BOM_CASES), "answered twice"
        requests = service.metrics.snapshot()["requests"]
        assert requests["received"] == requests["answered"] == len(BOM_CASES)
    finally:
        sender.disconnect()


def test_mosquitto_forwards_u_feff_and_refuses_what_cannot_be_read(broker):
    """What can reach the daemon through Mosquitto 2.0: U+FEFF, as sent; ill-formed UTF-8,
    U+0000 or a string past its properties disconnect the *publisher* instead."""
    receiver = raw.RawClient.connect(broker.host, broker.port, "receiver")
    receiver.subscribe("probe/#")
    sent = raw.prop(raw.RESPONSE_TOPIC, raw.utf8("edgevlm/\ufeffx"))
    sender = raw.RawClient.connect(broker.host, broker.port, "sender")
    ack = sender.publish("probe/bom", b"x", raw.properties(sent))
    assert ack is not None and ack.reason == 0
    forwarded = raw.parse_publish(receiver.expect(raw.PUBLISH))
    assert forwarded.props == sent
    for bad in (raw.utf8(b"edgevlm/\xffx"), raw.utf8("a\x00b"), b"\x00\x40abc"):
        sender = raw.RawClient.connect(broker.host, broker.port, "sender")
        assert sender.publish("probe/bad", b"x", raw.properties(
            raw.prop(raw.RESPONSE_TOPIC, bad))) is None, "Mosquitto took it"
    with pytest.raises(TimeoutError):
        receiver.expect(raw.PUBLISH, timeout=1.0)
    receiver.disconnect()


# --------------------------------------------------------------------------- unreadable, raw broker

UNREADABLE = {
    "ill-formed UTF-8": raw.properties(raw.prop(raw.RESPONSE_TOPIC, raw.utf8(b"edgevlm/\xff"))),
    "a surrogate": raw.properties(raw.prop(raw.CONTENT_TYPE, raw.utf8(b"\xed\xa0\x80"))),
    "U+0000 in a user property": raw.properties(raw.prop(
        raw.USER_PROPERTY, raw.utf8("k") + raw.utf8("a\x00b"))),
    "a string past its properties": raw.properties(raw.prop(raw.RESPONSE_TOPIC,
                                                            b"\x00\x40abc")),
    "a property length past the packet": raw.properties(
        raw.prop(raw.MESSAGE_EXPIRY, b"\x00\x00\x00\x05"), length=5000),
    "a 5-byte property length": b"\xff\xff\xff\xff\x01",
    "an unknown identifier": raw.properties(raw.prop(0x7F, b"\x00")),
    "a CONNECT property": raw.properties(raw.prop(raw.SESSION_EXPIRY, b"\x00\x00\x00\x05")),
    "the Response Topic twice": raw.properties(
        raw.prop(raw.RESPONSE_TOPIC, raw.utf8("edgevlm/a")),
        raw.prop(raw.RESPONSE_TOPIC, raw.utf8("edgevlm/b"))),
    "payload format 7": raw.properties(raw.prop(raw.PAYLOAD_FORMAT, b"\x07")),
}


class LinkOnRawBroker:
    """An :class:`MqttLink` connected to a :class:`RawBroker` that serves its subscription."""

    def __init__(self) -> None:
        self.broker = raw.RawBroker()
        self.messages: list[Incoming] = []
        self.arrived = threading.Condition()
        self.link = MqttLink(LinkSettings(host=self.broker.host, port=self.broker.port,
                                          client_id="hostile", protocol5=True, keepalive=60,
                                          will_topic="edgevlm/hostile/bridge/state"),
                             on_message=self._on_message, on_ready=lambda present: None)
        self.link.set_subscriptions([REQUEST_TOPIC])
        self.link.start()
        self.conn, self.connect = self.broker.accept()
        self.broker.serve_subscription(self.conn)

    def _on_message(self, msg: Incoming) -> None:
        with self.arrived:
            self.messages.append(msg)
            self.arrived.notify_all()
        self.link.ack(msg.mid, msg.qos)

    def deliver(self, mid: int, props: bytes, payload: bytes = b"{}") -> raw.Packet:
        """Send a QoS 1 PUBLISH and return the link's PUBACK for it."""
        self.conn.send(raw.publish_packet(REQUEST_TOPIC, payload, mid=mid, props=props))
        ack = self.conn.expect(raw.PUBACK)
        assert ack.mid == mid, f"PUBACK for {ack.mid}, expected {mid}"
        return ack

    def close(self) -> None:
        self.link.stop()
        self.conn.close()
        self.broker.close()


@pytest.fixture
def raw_link(decoder: str) -> Iterator[LinkOnRawBroker]:
    fixture = LinkOnRawBroker()
    try:
        yield fixture
    finally:
        fixture.close()


def test_unreadable_properties_are_acked_and_dropped_and_the_connection_kept(raw_link):
    good = raw.properties(raw.prop(raw.RESPONSE_TOPIC, raw.utf8(REPLY)))
    for mid, (case, props) in enumerate(UNREADABLE.items(), 10):
        ack = raw_link.deliver(mid, props)
        assert ack.reason == 0x80, f"{case}: PUBACK reason {ack.reason:#x}"
        # the next message on the same connection is delivered as usual
        raw_link.deliver(mid + 100, good, payload=case.encode())
        assert raw_link.messages[-1].payload == case.encode(), case
        assert raw_link.messages[-1].response_topic == REPLY
    assert not raw_link.conn.closed_within(0.5), "the link closed the connection"
    assert raw_link.link.connects == 1
    assert raw_link.link.unreadable == len(UNREADABLE)
    assert len(raw_link.messages) == len(UNREADABLE), "an unreadable message was delivered"


def test_u_feff_and_other_valid_strings_reach_the_daemon_as_sent(raw_link):
    strings = ["\ufeff", "edgevlm/clients/\ufeffme/reply", "\u0001 \u007f \ufdd0 \uffff",
               "\U0010ffff caf\u00e9"]
    for mid, value in enumerate(strings, 1):
        props = raw.properties(
            raw.prop(raw.RESPONSE_TOPIC, raw.utf8(value)),
            raw.prop(raw.CONTENT_TYPE, raw.utf8(value)),
            raw.prop(raw.USER_PROPERTY, raw.utf8(value) + raw.utf8(value)),
            raw.prop(raw.CORRELATION_DATA, raw.utf8(b"\xff\x00")))
        assert raw_link.deliver(mid, props, payload=str(mid).encode()).reason == 0
        msg = raw_link.messages[-1]
        assert msg.payload == str(mid).encode()
        assert msg.response_topic == value and msg.correlation == b"\xff\x00"
    assert raw_link.link.connects == 1 and raw_link.link.unreadable == 0


def test_a_publish_without_a_readable_packet_id_is_still_a_protocol_error(raw_link):
    """Only a readable packet id can be acknowledged: a PUBLISH cut inside its topic is a
    broken stream, and paho's answer (close the connection) stays."""
    raw_link.conn.send(raw.packet(raw.PUBLISH | 0x02, struct.pack("!H", 40) + b"short"))
    assert raw_link.conn.closed_within(WAIT_S)


# --------------------------------------------------------------------------- the decoder itself

def test_the_spec_decoder_reads_valid_properties_and_refuses_the_rest(decoder):
    value = "edgevlm/\ufeff/\u0001"
    block = raw.properties(
        raw.prop(raw.PAYLOAD_FORMAT, b"\x01"),
        raw.prop(raw.MESSAGE_EXPIRY, struct.pack("!I", 30)),
        raw.prop(raw.CONTENT_TYPE, raw.utf8(value)),
        raw.prop(raw.RESPONSE_TOPIC, raw.utf8(value)),
        raw.prop(raw.CORRELATION_DATA, raw.utf8(b"\x00\xff")),
        raw.prop(0x0B, raw.varint(300)),
        raw.prop(raw.USER_PROPERTY, raw.utf8("a") + raw.utf8("\ufeff")),
        raw.prop(raw.USER_PROPERTY, raw.utf8("b") + raw.utf8("2")))
    props, used = fast_properties.decode_publish_properties(block + b"payload")
    assert used == len(block)
    assert isinstance(props, fast_properties.FastProperties if decoder == "FastProperties"
                      else Properties)
    assert (props.PayloadFormatIndicator, props.MessageExpiryInterval) == (1, 30)
    assert props.ContentType == props.ResponseTopic == value
    assert props.CorrelationData == b"\x00\xff"
    assert props.SubscriptionIdentifier == [300]
    assert props.UserProperty == [("a", "\ufeff"), ("b", "2")]
    assert fast_properties.decode_publish_properties(b"\x00")[1] == 1
    for case, bad in UNREADABLE.items():
        with pytest.raises(MalformedPacket):
            fast_properties.decode_publish_properties(bad)
            pytest.fail(case)


def test_fast_properties_accept_u_feff_that_paho_refuses():
    block = raw.properties(raw.prop(raw.RESPONSE_TOPIC, raw.utf8("a\ufeffb")),
                           raw.prop(raw.USER_PROPERTY, raw.utf8("\ufeff") + raw.utf8("v")))
    with pytest.raises(MalformedPacket):
        Properties(3).unpack(block)
    props, used = fast_properties.FastProperties(3).unpack(block)
    assert used == len(block)
    assert props.ResponseTopic == "a\ufeffb" and props.UserProperty == [("\ufeff", "v")]


# --------------------------------------------------------------------------- Maximum Packet Size

def test_connect_announces_a_maximum_packet_size_that_fits_the_largest_request():
    from edgevlm.config import validate_config

    config = validate_config({"mqtt": {"host": "x"}, "limits": {"max_payload_bytes": 1000}},
                             "test")
    settings = LinkSettings.from_config(config.mqtt, "x", "edgevlm/n/bridge/state",
                                        max_packet_size=max_incoming_packet(
                                            config.limits.max_payload_bytes))
    broker = raw.RawBroker()
    link = MqttLink(replace(settings, host=broker.host, port=broker.port),
                    on_message=lambda m: None, on_ready=lambda present: None)
    try:
        link.start()
        conn, hello = broker.accept()
        announced = struct.unpack("!I", raw.parse_connect_properties(hello)[
            raw.MAXIMUM_PACKET_SIZE])[0]
        conn.close()
    finally:
        link.stop()
        broker.close()
    assert announced == max_incoming_packet(config.limits.max_payload_bytes)
    # a request of max_payload_bytes with a long topic, response topic, correlation data
    # and content type still fits
    assert announced >= 1000 + 5 + 2 + 300 + 2 + 1 + 3 * (1 + 2 + 65_535)


def _vm(pid: int, key: str) -> int:
    match = re.search(rf"^{key}:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(),
                      re.MULTILINE)
    assert match, key
    return int(match.group(1)) * 1024


def test_a_50_mb_request_is_dropped_by_the_broker_before_the_daemon_buffers_it(
        broker, soak_daemon, mqtt_client):
    """limits.max_payload_bytes 16 MiB: Mosquitto does not send the daemon a 50 MB request
    (MQTT 5 Maximum Packet Size in the daemon's CONNECT); the publisher gets its PUBACK and
    stays connected, the daemon's memory does not move, the next request is answered."""
    client = mqtt_client()
    client.sub(REPLY, f"{BASE}/bridge/state")
    daemon = soak_daemon()
    client.inbox.wait(f"{BASE}/bridge/state", where=lambda m: m.payload == b"online",
                      timeout=WAIT_S * 3)
    sender = raw.RawClient.connect(broker.host, broker.port, "big-sender")
    warm = reply_props(REPLY, "warm")
    assert sender.publish(REQUEST_TOPIC, ask("warm"), warm, mid=1) is not None
    client.inbox.wait(REPLY, where=lambda m: m.properties.CorrelationData == b"warm")
    rss, hwm = rss_bytes(daemon.pid), _vm(daemon.pid, "VmHWM")
    big = b'{"v": 1, "id": "huge", "pad": "' + b"x" * 50_000_000 + b'"}'
    ack = sender.publish(REQUEST_TOPIC, big, reply_props(REPLY, "huge"), mid=2)
    assert ack is not None and ack.reason == 0, "Mosquitto refused the publisher"
    assert sender.publish(REQUEST_TOPIC, ask("after"), reply_props(REPLY, "after"),
                          mid=3) is not None, "the publisher was disconnected"
    client.inbox.wait(REPLY, where=lambda m: m.properties.CorrelationData == b"after")
    time.sleep(1.0)
    grown_rss, grown_hwm = rss_bytes(daemon.pid) - rss, _vm(daemon.pid, "VmHWM") - hwm
    print(f"50 MB request: daemon RSS {grown_rss / 1e6:+.1f} MB, peak {grown_hwm / 1e6:+.1f} MB")
    assert grown_hwm < 8e6 and grown_rss < 8e6, (grown_rss, grown_hwm)
    assert not [m for m in client.inbox.on(REPLY)
                if m.properties.CorrelationData == b"huge"], "the daemon received it"
    sender.disconnect()
    assert "Dropping too large outgoing PUBLISH for edgevlm-soak" in broker.log()
    log = Path(daemon.log).read_text()
    assert log.count("connected to the broker") == 1, log
