"""MQTT 3.1.1 / 5.0 wire encoding for the embedded broker: fixed headers, strings, properties.

Only what :mod:`edgevlm.frontdoors.mqtt.embedded_broker` needs. Properties are kept as an ordered
list of
``(identifier, value)`` pairs, so repeated ones (user properties) survive a round trip.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

CONNECT, CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP = 1, 2, 3, 4, 5, 6, 7
SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK, PINGREQ, PINGRESP, DISCONNECT = 8, 9, 10, 11, 12, 13, 14

# v5 property identifiers this broker reads or writes
MESSAGE_EXPIRY = 0x02
SUBSCRIPTION_ID = 0x0B
SESSION_EXPIRY = 0x11
ASSIGNED_CLIENT_ID = 0x12
WILL_DELAY = 0x18
REASON_STRING = 0x1F
TOPIC_ALIAS_MAXIMUM = 0x22
TOPIC_ALIAS = 0x23
RETAIN_AVAILABLE = 0x25
MAXIMUM_PACKET_SIZE = 0x27
WILDCARD_AVAILABLE = 0x28
SHARED_AVAILABLE = 0x2A

_BYTE = {0x01, 0x17, 0x19, 0x24, 0x25, 0x28, 0x29, 0x2A}
_TWO = {0x13, 0x21, 0x22, 0x23}
_FOUR = {0x02, 0x11, 0x18, 0x27}
_VARINT = {0x0B}
_STRING = {0x03, 0x08, 0x12, 0x15, 0x1A, 0x1C, 0x1F}
_BINARY = {0x09, 0x16}
_PAIR = {0x26}

PropValue = int | str | bytes | tuple[str, str]
Properties = list[tuple[int, PropValue]]


class ProtocolError(Exception):
    """A malformed packet; the connection is closed."""


def encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value % 128, value // 128
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def encode_string(text: str) -> bytes:
    data = text.encode("utf-8")
    return struct.pack("!H", len(data)) + data


def encode_binary(data: bytes) -> bytes:
    return struct.pack("!H", len(data)) + data


def packet(kind: int, body: bytes, flags: int = 0) -> bytes:
    return bytes([kind << 4 | flags]) + encode_varint(len(body)) + body


def encode_properties(props: Properties) -> bytes:
    out = bytearray()
    for ident, value in props:
        out += encode_varint(ident)
        if ident in _BYTE and isinstance(value, int):
            out.append(value)
        elif ident in _TWO and isinstance(value, int):
            out += struct.pack("!H", value)
        elif ident in _FOUR and isinstance(value, int):
            out += struct.pack("!I", value)
        elif ident in _VARINT and isinstance(value, int):
            out += encode_varint(value)
        elif ident in _STRING and isinstance(value, str):
            out += encode_string(value)
        elif ident in _BINARY and isinstance(value, bytes):
            out += encode_binary(value)
        elif ident in _PAIR and isinstance(value, tuple):
            out += encode_string(value[0]) + encode_string(value[1])
        else:
            raise ValueError(f"property 0x{ident:02x} cannot hold {value!r}")
    return encode_varint(len(out)) + bytes(out)


def get_property(props: Properties, ident: int) -> PropValue | None:
    return next((value for key, value in props if key == ident), None)


class Reader:
    """Sequential reads from one packet body; any overrun is a :class:`ProtocolError`."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def remaining(self) -> int:
        return len(self.data) - self.pos

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ProtocolError("packet shorter than its fields")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def byte(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        value: int = struct.unpack("!H", self.take(2))[0]
        return value

    def u32(self) -> int:
        value: int = struct.unpack("!I", self.take(4))[0]
        return value

    def varint(self) -> int:
        value, shift = 0, 0
        for _ in range(4):
            byte = self.byte()
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
        raise ProtocolError("variable byte integer longer than 4 bytes")

    def binary(self) -> bytes:
        return self.take(self.u16())

    def string(self) -> str:
        try:
            return self.binary().decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("string is not UTF-8") from None

    def properties(self) -> Properties:
        sub = Reader(self.take(self.varint()))
        props: Properties = []
        while sub.remaining():
            ident = sub.varint()
            value: PropValue
            if ident in _BYTE:
                value = sub.byte()
            elif ident in _TWO:
                value = sub.u16()
            elif ident in _FOUR:
                value = sub.u32()
            elif ident in _VARINT:
                value = sub.varint()
            elif ident in _STRING:
                value = sub.string()
            elif ident in _BINARY:
                value = sub.binary()
            elif ident in _PAIR:
                value = (sub.string(), sub.string())
            else:
                raise ProtocolError(f"unknown property 0x{ident:02x}")
            props.append((ident, value))
        return props


@dataclass
class Will:
    topic: str
    payload: bytes
    qos: int
    retain: bool
    props: Properties = field(default_factory=list)


@dataclass
class Connect:
    version: int                 # 4 = 3.1.1, 5 = 5.0
    client_id: str
    clean: bool
    keepalive: int
    props: Properties
    will: Will | None
    username: str | None
    password: bytes | None


def parse_connect(body: bytes) -> Connect:
    r = Reader(body)
    name, version = r.string(), r.byte()
    if name not in ("MQTT", "MQIsdp") or version not in (3, 4, 5):
        raise ProtocolError(f"unsupported protocol {name!r} level {version}")
    flags, keepalive = r.byte(), r.u16()
    props = r.properties() if version == 5 else []
    client_id = r.string()
    will = None
    if flags & 0x04:
        will_props = r.properties() if version == 5 else []
        will = Will(r.string(), r.binary(), (flags >> 3) & 3, bool(flags & 0x20), will_props)
    username = r.string() if flags & 0x80 else None
    password = r.binary() if flags & 0x40 else None
    return Connect(version, client_id, bool(flags & 0x02), keepalive, props, will,
                   username, password)


@dataclass
class Publish:
    topic: str
    payload: bytes
    qos: int
    retain: bool
    packet_id: int = 0
    props: Properties = field(default_factory=list)


def parse_publish(flags: int, body: bytes, version: int) -> Publish:
    r = Reader(body)
    qos = (flags >> 1) & 3
    if qos == 3:
        raise ProtocolError("QoS 3 does not exist")
    topic = r.string()
    packet_id = r.u16() if qos else 0
    props = r.properties() if version == 5 else []
    return Publish(topic, r.take(r.remaining()), qos, bool(flags & 1), packet_id, props)


def encode_publish(msg: Publish, version: int, dup: bool = False) -> bytes:
    body = encode_string(msg.topic)
    if msg.qos:
        body += struct.pack("!H", msg.packet_id)
    if version == 5:
        body += encode_properties(msg.props)
    flags = (8 if dup else 0) | msg.qos << 1 | int(msg.retain)
    return packet(PUBLISH, body + msg.payload, flags)


def parse_subscribe(body: bytes, version: int) -> tuple[int, list[tuple[str, int]]]:
    """(packet id, [(filter, options byte)])."""
    r = Reader(body)
    packet_id = r.u16()
    if version == 5:
        r.properties()
    topics = []
    while r.remaining():
        topics.append((r.string(), r.byte()))
    if not topics:
        raise ProtocolError("SUBSCRIBE without topics")
    return packet_id, topics


def parse_unsubscribe(body: bytes, version: int) -> tuple[int, list[str]]:
    r = Reader(body)
    packet_id = r.u16()
    if version == 5:
        r.properties()
    topics = []
    while r.remaining():
        topics.append(r.string())
    return packet_id, topics


def ack(kind: int, packet_id: int, version: int, reasons: bytes = b"") -> bytes:
    """PUBACK/PUBREC/PUBREL/PUBCOMP (no reasons) or SUBACK/UNSUBACK (reason per topic)."""
    body = struct.pack("!H", packet_id)
    if kind in (SUBACK, UNSUBACK):
        body += (b"\x00" if version == 5 else b"") + reasons
    return packet(kind, body, 2 if kind == PUBREL else 0)


def topic_matches(pattern: str, topic: str) -> bool:
    """MQTT filter matching; wildcards at the first level never match ``$`` topics."""
    if topic.startswith("$") and pattern[:1] in ("+", "#"):
        return False
    pat, top = pattern.split("/"), topic.split("/")
    for i, level in enumerate(pat):
        if level == "#":
            return True
        if i >= len(top) or (level != "+" and level != top[i]):
            return False
    return len(pat) == len(top)


def valid_filter(pattern: str) -> bool:
    levels = pattern.split("/")
    for i, level in enumerate(levels):
        if ("#" in level and (level != "#" or i != len(levels) - 1)) or (
                "+" in level and level != "+"):
            return False
    return bool(pattern)
