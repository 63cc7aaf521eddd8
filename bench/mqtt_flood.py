"""The flooding client of ``bench_mqtt.py``: a child process that publishes invalid requests.

Two implementations of the same traffic (QoS 1 requests to ``<base>/bench/request/describe``
with a v5 Response Topic and Correlation Data, prebuilt payloads ``{"v": 1, "id": "bad-<i>",
"messages": []}``; every answer received at QoS 1, acknowledged, parsed and checked to be
``invalid_request``):

- ``paho``: paho-mqtt, as a Python client would (its own CPU is ~0.25 ms per request: the
  bench shares 2 cores with it);
- ``raw``: prebuilt MQTT packets on a plain socket (~0.03 ms per request), so that on a small
  machine the load generator takes less CPU away from the daemon it measures; a client on
  another machine takes none.

Both report (first publish, last publish, last answer, all answers ok, own CPU seconds).
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from typing import Any

from edgevlm.frontdoors.mqtt import embedded_codec as codec

NODE = "bench"
REPLY = "edgevlm/clients/flood/reply"
TOPIC = f"edgevlm/{NODE}/request/describe"


def payloads(count: int) -> list[bytes]:
    return [json.dumps({"v": 1, "id": f"bad-{i}", "messages": []}).encode()
            for i in range(count)]


def _paced(count: int, rate: float, send: Any) -> tuple[float, float]:
    """Call ``send(i)`` for each request at ``rate``/s (0: back to back); (first, last)."""
    t0 = time.monotonic()
    for i in range(count):
        if rate > 0:
            ahead = t0 + i / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
        send(i)
    return t0, time.monotonic()


def paho_flooder(host: str, port: int, count: int, inflight: int, rate: float, go: Any,
                 out: Any) -> None:
    import paho.mqtt.client as paho
    from paho.mqtt.enums import CallbackAPIVersion

    from edgevlm.frontdoors.mqtt import fast_properties

    fast_properties.install()  # the daemon's cheaper property decoding, for this client too
    answers: dict[str, str] = {}
    done = threading.Event()
    last = [0.0]

    def on_message(client: Any, userdata: Any, msg: paho.MQTTMessage) -> None:
        body = json.loads(msg.payload)
        answers[body.get("id")] = (body.get("error") or {}).get("type", body.get("status"))
        last[0] = time.monotonic()
        if len(answers) >= count:
            done.set()

    subscribed = threading.Event()
    client = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5)
    client.max_inflight_messages_set(inflight)
    client.on_message = on_message
    client.on_subscribe = lambda *a: subscribed.set()
    client.connect(host, port)
    client.loop_start()
    client.subscribe(REPLY, qos=1)
    subscribed.wait(30)
    props = fast_properties.publish_properties(b"flood", response_topic=REPLY)
    bodies = payloads(count)
    out.put("ready")
    go.wait()
    cpu0 = time.process_time()
    t0, sent = _paced(count, rate, lambda i: client.publish(TOPIC, bodies[i], qos=1,
                                                            properties=props))
    done.wait(120)
    cpu = time.process_time() - cpu0
    ok = len(answers) == count and set(answers.values()) == {"invalid_request"}
    out.put((t0, sent, last[0], ok, cpu))
    client.disconnect()
    client.loop_stop()


def _read_packet(sock: socket.socket) -> tuple[int, bytes]:
    """One whole packet, blocking (the handshake only): (first byte, body)."""
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            data += chunk
        return data
    first = exactly(1)[0]
    length, shift = 0, 0
    while True:
        byte = exactly(1)[0]
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return first, exactly(length)


def _split_packets(buf: bytearray) -> tuple[list[tuple[int, bytes]], int]:
    """Whole packets at the start of ``buf`` and how many bytes they took."""
    packets, pos = [], 0
    while len(buf) - pos >= 2:
        length, shift, i = 0, 0, pos + 1
        while i < len(buf):
            byte = buf[i]
            i += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        else:
            break
        if i + length > len(buf):
            break
        packets.append((buf[pos], bytes(buf[i:i + length])))
        pos = i + length
    return packets, pos


def raw_flooder(host: str, port: int, count: int, inflight: int, rate: float, go: Any,
                out: Any) -> None:
    """The same traffic as :func:`paho_flooder` from prebuilt packets on a plain socket
    (``inflight`` is not limited either way: the requests are not waited for)."""
    sock = socket.create_connection((host, port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    client_id = f"edgevlm-bench-flood-{port}-{time.monotonic_ns() % 10**6}"
    sock.sendall(codec.packet(codec.CONNECT, codec.encode_string("MQTT") + bytes([5, 0x02])
                              + struct.pack("!H", 60) + b"\x00"
                              + codec.encode_string(client_id)))
    kind, body = _read_packet(sock)
    assert kind >> 4 == codec.CONNACK and body[1] == 0, f"refused: {body!r}"
    sock.sendall(codec.packet(codec.SUBSCRIBE, struct.pack("!H", 1) + b"\x00"
                              + codec.encode_string(REPLY) + b"\x01", flags=2))
    kind, body = _read_packet(sock)
    assert kind >> 4 == codec.SUBACK and body[3] == 1, f"subscription refused: {body!r}"
    props = [(0x08, REPLY), (0x09, b"flood")]
    packets = [codec.encode_publish(codec.Publish(TOPIC, body, 1, False, i + 1, props), 5)
               for i, body in enumerate(payloads(count))]
    send_lock = threading.Lock()
    answers: dict[str, str] = {}
    last = [0.0]

    def send(data: bytes) -> None:
        with send_lock:
            sock.sendall(data)

    def read_answers() -> None:
        buf = bytearray()
        while len(answers) < count:
            chunk = sock.recv(1 << 18)
            if not chunk:
                return
            buf += chunk
            packets_in, used = _split_packets(buf)
            del buf[:used]
            acks = bytearray()
            for first, body in packets_in:
                if first >> 4 != codec.PUBLISH:
                    continue  # PUBACKs of our requests
                msg = codec.parse_publish(first & 0x0F, body, 5)
                answer = json.loads(msg.payload)
                answers[answer.get("id")] = (answer.get("error") or {}).get(
                    "type", answer.get("status"))
                last[0] = time.monotonic()
                if msg.qos:
                    acks += codec.ack(codec.PUBACK, msg.packet_id, 5)
            if acks:
                send(bytes(acks))

    reader = threading.Thread(target=read_answers, daemon=True)
    out.put("ready")
    go.wait()
    cpu0 = time.process_time()
    reader.start()
    t0, sent = _paced(count, rate, lambda i: send(packets[i]))
    reader.join(120)
    cpu = time.process_time() - cpu0
    ok = len(answers) == count and set(answers.values()) == {"invalid_request"}
    out.put((t0, sent, last[0], ok, cpu))
    send(codec.packet(codec.DISCONNECT, b"\x00"))
    sock.close()


FLOODERS = {"paho": paho_flooder, "raw": raw_flooder}
