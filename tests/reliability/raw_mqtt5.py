"""A small raw MQTT 5 codec over a socket, for packets paho refuses to build or to read.

paho checks the strings it packs (it will not put U+FEFF in a property) and drops the
connection on what it cannot unpack, so the hostile-property tests build their bytes here:

- :func:`properties` packs (identifier, raw value bytes) pairs as they are, so a test can
  send ill-formed UTF-8, a U+0000, a length that runs past the properties, an unknown
  identifier, a duplicate;
- :class:`RawClient` is a client of a real broker (CONNECT, SUBSCRIBE, PUBLISH, DISCONNECT,
  packets read back whole);
- :class:`RawBroker` is the broker side of one connection (CONNACK, SUBACK, PUBLISH), to hand
  the daemon a PUBLISH that Mosquitto would never forward, and to read its CONNECT.

Only what the tests need; no keep-alive handling (tests are shorter than the keep-alive).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from dataclasses import dataclass, field

CONNECT, CONNACK, PUBLISH, PUBACK = 0x10, 0x20, 0x30, 0x40
PUBREC, SUBSCRIBE, SUBACK, PINGREQ, PINGRESP, DISCONNECT = 0x50, 0x82, 0x90, 0xC0, 0xD0, 0xE0

# property identifiers (MQTT 5 §2.2.2.2)
PAYLOAD_FORMAT, MESSAGE_EXPIRY, CONTENT_TYPE = 0x01, 0x02, 0x03
RESPONSE_TOPIC, CORRELATION_DATA, SESSION_EXPIRY = 0x08, 0x09, 0x11
RECEIVE_MAXIMUM, MAXIMUM_PACKET_SIZE, TOPIC_ALIAS, USER_PROPERTY = 0x21, 0x27, 0x23, 0x26


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n % 128, n // 128
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def read_varint(data: bytes, pos: int = 0) -> tuple[int, int]:
    """(value, bytes used) of the Variable Byte Integer at ``pos``."""
    value, mult = 0, 1
    for used in range(1, 5):
        byte = data[pos + used - 1]
        value += (byte & 0x7F) * mult
        if not byte & 0x80:
            return value, used
        mult *= 128
    raise ValueError("a Variable Byte Integer longer than 4 bytes")


def utf8(text: str | bytes) -> bytes:
    """A length-prefixed string; bytes are sent as they are (ill-formed on purpose)."""
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("!H", len(raw)) + raw


def prop(identifier: int, value: bytes) -> bytes:
    """One property: its identifier and its value bytes exactly as given."""
    return varint(identifier) + value


def properties(*props: bytes, length: int | None = None) -> bytes:
    """The property block; ``length`` overrides the Property Length (a lie on purpose)."""
    body = b"".join(props)
    return varint(len(body) if length is None else length) + body


def packet(first: int, body: bytes) -> bytes:
    return bytes([first]) + varint(len(body)) + body


def connect_packet(client_id: str, clean_start: bool = True, session_expiry: int = 0,
                   keepalive: int = 60) -> bytes:
    props = properties(prop(SESSION_EXPIRY, struct.pack("!I", session_expiry))) \
        if session_expiry else properties()
    flags = 0x02 if clean_start else 0x00
    body = utf8("MQTT") + bytes([5, flags]) + struct.pack("!H", keepalive) + props + \
        utf8(client_id)
    return packet(CONNECT, body)


def publish_packet(topic: str | bytes, payload: bytes, qos: int = 1, mid: int = 1,
                   props: bytes = b"\x00", dup: bool = False, retain: bool = False) -> bytes:
    first = PUBLISH | (0x08 if dup else 0) | (qos << 1) | (0x01 if retain else 0)
    body = utf8(topic) + (struct.pack("!H", mid) if qos else b"") + props + payload
    return packet(first, body)


def subscribe_packet(mid: int, *filters: str, qos: int = 1) -> bytes:
    body = struct.pack("!H", mid) + properties() + b"".join(
        utf8(f) + bytes([qos]) for f in filters)
    return packet(SUBSCRIBE, body)


@dataclass
class Packet:
    first: int
    body: bytes

    @property
    def kind(self) -> int:
        return self.first & 0xF0

    @property
    def mid(self) -> int:
        """The packet id of a PUBACK, PUBREC, SUBACK (the first two bytes of the body)."""
        return int(struct.unpack("!H", self.body[:2])[0])

    @property
    def reason(self) -> int:
        """The reason code of a PUBACK/PUBREC (0 when omitted), CONNACK or DISCONNECT."""
        if self.kind in (PUBACK, PUBREC):
            return self.body[2] if len(self.body) > 2 else 0
        if self.kind == CONNACK:
            return self.body[1]
        return self.body[0] if self.body else 0


@dataclass
class ParsedPublish:
    topic: bytes
    qos: int
    mid: int
    props: bytes      # the property block without its length
    payload: bytes


def parse_publish(pkt: Packet) -> ParsedPublish:
    qos = (pkt.first >> 1) & 3
    tlen = struct.unpack("!H", pkt.body[:2])[0]
    pos = 2 + tlen
    mid = 0
    if qos:
        mid = struct.unpack("!H", pkt.body[pos:pos + 2])[0]
        pos += 2
    plen, used = read_varint(pkt.body, pos)
    pos += used
    return ParsedPublish(pkt.body[2:2 + tlen], qos, mid, pkt.body[pos:pos + plen],
                         pkt.body[pos + plen:])


def parse_connect_properties(pkt: Packet) -> dict[int, bytes]:
    """The CONNECT's properties: identifier -> raw value (fixed-size and VBI ones only)."""
    body = pkt.body
    pos = 2 + struct.unpack("!H", body[:2])[0] + 1 + 1 + 2  # name, level, flags, keep-alive
    plen, used = read_varint(body, pos)
    pos += used
    end = pos + plen
    out: dict[int, bytes] = {}
    sizes = {SESSION_EXPIRY: 4, RECEIVE_MAXIMUM: 2, MAXIMUM_PACKET_SIZE: 4, 0x22: 2,
             0x19: 1, 0x17: 1}
    while pos < end:
        ident, used = read_varint(body, pos)
        pos += used
        if ident in sizes:
            out[ident] = body[pos:pos + sizes[ident]]
            pos += sizes[ident]
        else:  # a string or binary value: length-prefixed
            length = struct.unpack("!H", body[pos:pos + 2])[0]
            out[ident] = body[pos + 2:pos + 2 + length]
            pos += 2 + length
    return out


@dataclass
class _Conn:
    sock: socket.socket
    buffer: bytearray = field(default_factory=bytearray)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read(self, timeout: float = 10.0) -> Packet | None:
        """The next whole packet; None when the peer closed the connection."""
        deadline = time.monotonic() + timeout
        while True:
            got = self._split()
            if got is not None:
                return got
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no packet in time")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(1 << 16)
            except ConnectionResetError:
                return None
            if not data:
                return None
            self.buffer += data

    def _split(self) -> Packet | None:
        if len(self.buffer) < 2:
            return None
        try:
            length, used = read_varint(bytes(self.buffer[1:5]))
        except IndexError:
            return None
        end = 1 + used + length
        if len(self.buffer) < end:
            return None
        pkt = Packet(self.buffer[0], bytes(self.buffer[1 + used:end]))
        del self.buffer[:end]
        return pkt

    def expect(self, kind: int, timeout: float = 10.0) -> Packet:
        """The next packet of ``kind``, answering PINGREQs on the way."""
        while True:
            pkt = self.read(timeout)
            if pkt is None:
                raise ConnectionError(f"closed while waiting for packet type {kind:#x}")
            if pkt.kind == PINGREQ:
                self.send(packet(PINGRESP, b""))
                continue
            if pkt.kind == kind & 0xF0:
                return pkt

    def closed_within(self, seconds: float) -> bool:
        """Whether the peer closes the connection within ``seconds`` (packets are read and
        dropped meanwhile, PINGREQs answered)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                pkt = self.read(left)
            except TimeoutError:
                return False
            if pkt is None:
                return True
            if pkt.kind == PINGREQ:
                self.send(packet(PINGRESP, b""))
        return False

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


class RawClient(_Conn):
    """A raw MQTT 5 client connected to a broker."""

    @classmethod
    def connect(cls, host: str, port: int, client_id: str, clean_start: bool = True,
                session_expiry: int = 0) -> RawClient:
        sock = socket.create_connection((host, port), timeout=10)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = cls(sock)
        conn.send(connect_packet(client_id, clean_start, session_expiry))
        ack = conn.expect(CONNACK)
        if ack.reason:
            raise ConnectionError(f"CONNACK reason {ack.reason:#x}")
        return conn

    def subscribe(self, *filters: str, mid: int = 1) -> None:
        self.send(subscribe_packet(mid, *filters))
        self.expect(SUBACK)

    def publish(self, topic: str | bytes, payload: bytes, props: bytes = b"\x00", mid: int = 1,
                qos: int = 1) -> Packet | None:
        """Publish; QoS 1 waits for the PUBACK (None: the broker closed the connection)."""
        self.send(publish_packet(topic, payload, qos=qos, mid=mid, props=props))
        if not qos:
            return None
        try:
            return self.expect(PUBACK, timeout=30)
        except ConnectionError:
            return None

    def disconnect(self) -> None:
        with contextlib.suppress(OSError):
            self.send(packet(DISCONNECT, b"\x00\x00"))
        self.close()


class RawBroker:
    """The broker side of connections on 127.0.0.1: accept, read CONNECT, answer CONNACK."""

    def __init__(self) -> None:
        self.server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(4)
        self.host = "127.0.0.1"
        self.port = int(self.server.getsockname()[1])

    def accept(self, timeout: float = 20.0) -> tuple[_Conn, Packet]:
        """The next connection and its CONNECT, answered with CONNACK (success)."""
        self.server.settimeout(timeout)
        sock, _ = self.server.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Conn(sock)
        hello = conn.expect(CONNECT, timeout)
        conn.send(packet(CONNACK, b"\x00\x00" + properties()))
        return conn, hello

    def serve_subscription(self, conn: _Conn, timeout: float = 20.0) -> Packet:
        """Read the SUBSCRIBE and grant every filter QoS 1."""
        sub = conn.expect(SUBSCRIBE, timeout)
        plen, used = read_varint(sub.body, 2)
        rest = sub.body[2 + used + plen:]
        count = 0
        while rest:
            length = struct.unpack("!H", rest[:2])[0]
            rest = rest[2 + length + 1:]
            count += 1
        conn.send(packet(SUBACK, sub.body[:2] + properties() + bytes([1]) * count))
        return sub

    def close(self) -> None:
        self.server.close()
