"""Duplicates and losses of QoS 1 and QoS 2 publishes when the publisher's connection is reset.

Why the daemon answers with QoS 1, and why docs/mqtt.md asks for ``set_tcp_nodelay true`` in
Mosquitto: a publisher (paho, persistent session, TCP_NODELAY) sends ``--rate`` small messages
a second to a private Mosquitto (``set_tcp_nodelay true``; with ``--broker-nagle`` Mosquitto's
default, false); a subscriber counts each payload; every second the publisher's TCP
connection is destroyed with ``ss -K`` (needs root or CAP_NET_ADMIN), as a NAT timeout or a
Wi-Fi drop would. At the end: sent, received, duplicates (payloads received more than once)
and missing (never received).

    .venv/bin/python bench/mqtt_qos_reset.py --qos 1 2 --rate 300 --resets 10 \
        [--broker-nagle] [--json]
"""

from __future__ import annotations

import argparse
import collections
import json
import socket
import subprocess
import sys
import threading
import time
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from edgevlm.demo import mosquitto_binary, mosquitto_broker

TOPIC = "bench/qos-reset"


def _nodelay(client: Any, userdata: Any, sock: Any) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def reset(client: paho.Client, port: int) -> bool:
    """Destroy ``client``'s TCP connection to the broker (``ss -K``)."""
    sock = client.socket()
    if sock is None:
        return False
    local = sock.getsockname()[1]
    done = subprocess.run(["ss", "-K", "-tn", "src", "127.0.0.1", "sport", "=", f":{local}",
                           "dst", "127.0.0.1", "dport", "=", f":{port}"], capture_output=True)
    return done.returncode == 0


def run(port: int, qos: int, rate: float, resets: int) -> dict[str, Any]:
    got: collections.Counter[bytes] = collections.Counter()
    lock = threading.Lock()

    def on_message(client: Any, userdata: Any, message: paho.MQTTMessage) -> None:
        with lock:
            got[message.payload] += 1

    sub = paho.Client(CallbackAPIVersion.VERSION2, client_id=f"sub-{qos}",
                      protocol=paho.MQTTv5)
    sub.on_message = on_message
    sub.on_socket_open = _nodelay
    sub.connect("127.0.0.1", port)
    sub.subscribe(TOPIC, qos=qos)
    sub.loop_start()
    props = Properties(PacketTypes.CONNECT)
    props.SessionExpiryInterval = 3600
    pub = paho.Client(CallbackAPIVersion.VERSION2, client_id=f"pub-{qos}", protocol=paho.MQTTv5)
    pub.on_socket_open = _nodelay
    pub.reconnect_delay_set(0.1, 0.5)
    pub.connect("127.0.0.1", port, clean_start=False, properties=props)
    pub.loop_start()
    time.sleep(0.5)
    stop = threading.Event()
    sent = [0]

    def send() -> None:
        t0 = time.monotonic()
        while not stop.is_set():
            pub.publish(TOPIC, str(sent[0]).encode(), qos=qos)
            sent[0] += 1
            time.sleep(max(0.0, t0 + sent[0] / rate - time.monotonic()))

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    done = 0
    for _ in range(resets):
        time.sleep(1.0)
        done += reset(pub, port)
    stop.set()
    sender.join()
    deadline = time.monotonic() + 15.0   # everything still queued in paho is delivered
    while time.monotonic() < deadline:
        with lock:
            if len(got) >= sent[0]:
                break
        time.sleep(0.1)
    time.sleep(1.0)
    pub.loop_stop()
    sub.loop_stop()
    with lock:
        duplicates = sum(n - 1 for n in got.values())
        received = len(got)
    return {"qos": qos, "rate": rate, "resets": done, "sent": sent[0], "received": received,
            "duplicates": duplicates, "missing": sent[0] - received}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--qos", type=int, nargs="+", default=[1, 2], choices=[1, 2])
    parser.add_argument("--rate", type=float, default=300.0, help="messages a second")
    parser.add_argument("--resets", type=int, default=10, help="one a second")
    parser.add_argument("--broker-nagle", action="store_true",
                        help="leave Nagle's algorithm on in Mosquitto (its default)")
    parser.add_argument("--json", action="store_true", help="one JSON object per QoS")
    args = parser.parse_args()
    binary = mosquitto_binary()
    if binary is None:
        print("no mosquitto binary; run scripts/setup-env.sh", file=sys.stderr)
        return 2
    for qos in args.qos:
        with mosquitto_broker(binary, nodelay=not args.broker_nagle) as port:
            result = run(port, qos, args.rate, args.resets)
        if args.json:
            print(json.dumps(result))
        else:
            print(f"QoS {qos}, {result['rate']:g}/s, {result['resets']} resets: sent "
                  f"{result['sent']}, received {result['received']}, duplicates "
                  f"{result['duplicates']}, missing {result['missing']}")
        if result["resets"] == 0:
            print("no connection was reset: ss -K needs root (CAP_NET_ADMIN)", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
