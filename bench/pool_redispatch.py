"""What Mosquitto does with a shared-subscription member's unacknowledged QoS 1 messages when
the member dies (issue 22).

A private Mosquitto (127.0.0.1, a free port, ``allow_anonymous true``, a temp dir) and two
members of ``$share/g/bench/pool``, each a child process (paho 2.x, MQTT 5, ``manual_ack``):
member A never acknowledges, member B acknowledges everything. Three cases:

- ``persistent``: A has a persistent session (Clean Start 0, Session Expiry 3600: the
  daemon's old setup). Publish 10 (QoS 1), SIGKILL A, publish 10 more; which reached B?
- ``clean``: the same with A on Clean Start 1, Session Expiry 0 (the daemon's new pool
  connection).
- ``cut``: A (clean, keepalive 4 s, acknowledging, i.e. a healthy board until then) connects
  through tests/reliability/tcp_cut.py's proxy; 10 messages a second are published; the
  proxy black-holes A's connection (a pulled cable) and the publishing goes on. Reported:
  the time from the cut until the broker hands the group's messages only to B (the publish
  time of the last message after the cut that B never got), the messages lost on the way,
  and when Mosquitto's log says A's keepalive ran out.

    .venv/bin/python bench/pool_redispatch.py [--case persistent clean cut] [--cuts 3] \
        [--cut-keepalive 4] [--json]

Result (2026-12-02, Mosquitto 2.0.11, paho 2.2.0, load average < 1; ``--cuts 6``):

    case        A got  B got (of 1-10)  B got (of 11-20)  lost  redispatched  only-B after
    persistent      5                5                 5    10             0             -
    clean           5                5                10     5             0             -
    cut             -                -                 -    44             0         8.6 s
    cut             -                -                 -    41             0         8.0 s
    cut             -                -                 -    32             0         6.3 s
    cut             -                -                 -    30             0         5.9 s
    cut             -                -                 -    52             0        10.3 s
    cut             -                -                 -    50             0         9.8 s

- persistent: A's 5 in flight are lost and half of the later 10 are queued to the dead
  session (10 of the 20 never reach a live member);
- clean: A's 5 in flight are lost too, NOT redispatched to B, but all later 10 go to B;
- cut: every other message still goes to A's black hole for 5.9-10.3 s, not the 6 s of
  "1.5 × keepalive": Mosquitto 2.0.11 checks keepalives only every ~6 s
  (``keepalive__check``: ``last_keepalive_check + 5 < now``, whole seconds), so a cut member
  leaves the group between 1.5 keepalives and 1.5 keepalives + 6 s after its last packet
  (keepalive 4: ~6-13 s; the runs start the cut at different phases of that check). The
  messages sent to A meanwhile are lost, not redispatched; the log's ``Client A has exceeded
  timeout`` agrees to its 1 s resolution. In tests/reliability/test_pool_failover.py (three
  boards, keepalive 4) the cut board left the group 5.9-11.6 s after the cut. With
  ``--cut-keepalive 2`` (the pool's keepalive since): 3.2, 4.9, 5.5, 7.1, 7.8, 8.4 s.

So the broker never recovers a dead member's messages: the client has to republish (the
``PoolRetry`` of edgevlm.ask), and a fast keepalive on the pool connection bounds the time a
cut board keeps swallowing requests.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from edgevlm.demo import mosquitto_binary, private_mosquitto  # noqa: E402
from tests.reliability.tcp_cut import Proxy  # noqa: E402

TOPIC = "bench/pool"
SHARED = f"$share/g/{TOPIC}"
CASES = ("persistent", "clean", "cut")


# --------------------------------------------------------------------------- the broker

def mosquitto(binary: str) -> contextlib.AbstractContextManager[tuple[int, Path]]:
    """A private mosquitto; yields its port and log file (timestamps in Unix seconds)."""
    return private_mosquitto(binary, log_all=True)


# --------------------------------------------------------------------------- a member

def member_main(args: argparse.Namespace) -> int:
    """A child process: one member of the shared subscription; prints a JSON line per event."""

    def say(**event: Any) -> None:
        print(json.dumps({"t": time.time(), **event}), flush=True)

    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=args.member,
                         protocol=paho.MQTTv5, manual_ack=True)
    props = Properties(PacketTypes.CONNECT)
    props.SessionExpiryInterval = 0 if args.clean else 3600

    def on_connect(c: Any, u: Any, flags: Any, reason: Any, p: Any = None) -> None:
        c.subscribe(SHARED, qos=1)

    def on_subscribe(c: Any, u: Any, mid: Any, reasons: Any, p: Any = None) -> None:
        say(event="subscribed")

    def on_message(c: Any, u: Any, msg: paho.MQTTMessage) -> None:
        say(event="message", payload=msg.payload.decode(), dup=bool(msg.dup))
        if args.ack:
            c.ack(msg.mid, msg.qos)

    client.on_connect = on_connect
    client.on_subscribe = on_subscribe
    client.on_message = on_message
    client.reconnect_delay_set(1, 2)
    client.connect("127.0.0.1", args.port, keepalive=args.keepalive,
                   clean_start=args.clean, properties=props)
    client.loop_forever(retry_first_connection=True)
    return 0


class Member:
    """A member child process and what it printed."""

    def __init__(self, name: str, port: int, *, ack: bool, clean: bool,
                 keepalive: int = 60) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--member", name, "--port", str(port),
             "--keepalive", str(keepalive), *(["--ack"] if ack else []),
             *(["--clean"] if clean else [])],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.got: list[tuple[float, str]] = []      # (wall time, payload)
        self.subscribed = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if event["event"] == "subscribed":
                    self.subscribed.set()
                elif event["event"] == "message":
                    self.got.append((event["t"], event["payload"]))

    def payloads(self) -> set[str]:
        return {p for _, p in self.got}

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def close(self) -> None:
        self.kill()
        self._reader.join(5)


# --------------------------------------------------------------------------- the cases

def publisher(port: int) -> paho.Client:
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id="publisher",
                         protocol=paho.MQTTv5)
    client.connect("127.0.0.1", port)
    client.loop_start()
    return client


def publish(client: paho.Client, payload: str) -> None:
    info = client.publish(TOPIC, payload.encode(), qos=1)
    info.wait_for_publish(10)


def settle(members: list[Member], count: int, timeout: float = 3.0) -> None:
    """Until the members got ``count`` messages in all (or ``timeout``), then a little more."""
    deadline = time.monotonic() + timeout
    while sum(len(m.got) for m in members) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)


def kill_case(binary: str, clean: bool) -> dict[str, Any]:
    with mosquitto(binary) as (port, _log):
        a = Member("A", port, ack=False, clean=clean)
        b = Member("B", port, ack=True, clean=True)
        pub = publisher(port)
        try:
            for m in (a, b):
                if not m.subscribed.wait(10):
                    raise RuntimeError(f"member {m.name} did not subscribe")
            first = [str(i) for i in range(1, 11)]
            later = [str(i) for i in range(11, 21)]
            for p in first:
                publish(pub, p)
            settle([a, b], 10)
            a_got = a.payloads()
            b_before = b.payloads()
            a.kill()
            time.sleep(1.0)             # the broker sees the socket close at once
            for p in later:
                publish(pub, p)
            settle([b], len(b_before) + 10)
            b_all = b.payloads()
        finally:
            pub.disconnect()
            pub.loop_stop()
            a.close()
            b.close()
    return {
        "case": "clean" if clean else "persistent",
        "a_session": "clean start 1, expiry 0" if clean else "clean start 0, expiry 3600",
        "a_got": sorted(a_got, key=int),
        "b_got_first": sorted(set(first) & b_all, key=int),
        "b_got_later": sorted(set(later) & b_all, key=int),
        "lost": sorted(set(first + later) - b_all, key=int),
        "redispatched": sorted(a_got & b_all, key=int),
    }


def cut_case(binary: str, rate: float = 10.0, before_s: float = 2.0, after_s: float = 12.0,
             keepalive: int = 4) -> dict[str, Any]:
    with mosquitto(binary) as (port, log), Proxy("127.0.0.1", port) as proxy:
        a = Member("A", proxy.port, ack=True, clean=True, keepalive=keepalive)
        b = Member("B", port, ack=True, clean=True)
        pub = publisher(port)
        sent: list[tuple[float, str]] = []      # (seconds from the cut, payload)
        try:
            for m in (a, b):
                if not m.subscribed.wait(10):
                    raise RuntimeError(f"member {m.name} did not subscribe")
            t0 = time.monotonic()
            cut_wall = cut_mono = 0.0
            k = 0
            while True:
                now = time.monotonic()
                if not cut_mono and now - t0 >= before_s:
                    proxy.cut()
                    cut_mono, cut_wall = time.monotonic(), time.time()
                if cut_mono and now - cut_mono >= after_s:
                    break
                k += 1
                publish(pub, str(k))
                sent.append((time.monotonic() - cut_mono if cut_mono else now - t0 - before_s,
                             str(k)))
                time.sleep(max(0.0, t0 + k / rate - time.monotonic()))
            settle([b], 0, timeout=0)
            b_got = b.payloads()
            a_got = a.payloads()
        finally:
            pub.disconnect()
            pub.loop_stop()
            a.close()
            b.close()
        timeout_at = None
        text = log.read_text(errors="replace") if log.exists() else ""
        for line in text.splitlines():
            if "Client A has exceeded timeout" in line:
                timeout_at = float(line.split(":", 1)[0]) - cut_wall
    after = [(t, p) for t, p in sent if t >= 0]
    missed = [(t, p) for t, p in after if p not in b_got]
    return {
        "case": "cut", "keepalive_s": keepalive, "rate": rate,
        "sent_after_cut": len(after),
        "lost": [p for _, p in missed],
        "redispatched": sorted(a_got & b_got, key=int),
        "only_b_after_s": round(missed[-1][0], 2) if missed else 0.0,
        "broker_timeout_log_s": None if timeout_at is None else round(timeout_at, 1),
        "a_got_after_cut": sorted({p for _, p in after} & a_got, key=int),
        "proxy_errors": proxy.errors,
    }


# --------------------------------------------------------------------------- main

def table(results: list[dict[str, Any]]) -> str:
    rows = [f"{'case':<11} {'A got':>5} {'B got (of 1-10)':>16} {'B got (of 11-20)':>17} "
            f"{'lost':>5} {'redispatched':>13} {'only-B after':>13}"]
    for r in results:
        if r["case"] == "cut":
            rows.append(f"{'cut':<11} {'-':>5} {'-':>16} {'-':>17} {len(r['lost']):>5} "
                        f"{len(r['redispatched']):>13} {r['only_b_after_s']:>11.1f} s")
        else:
            rows.append(f"{r['case']:<11} {len(r['a_got']):>5} {len(r['b_got_first']):>16} "
                        f"{len(r['b_got_later']):>17} {len(r['lost']):>5} "
                        f"{len(r['redispatched']):>13} {'-':>13}")
    for r in results:
        if r["case"] == "cut":
            rows.append(f"cut: keepalive {r['keepalive_s']} s, {r['rate']:g} msg/s, "
                        f"{r['sent_after_cut']} sent after the cut, {len(r['lost'])} lost "
                        f"(went to A's black hole); mosquitto logged A's timeout "
                        f"{r['broker_timeout_log_s']} s after the cut (1 s resolution)")
        else:
            rows.append(f"{r['case']}: A got {','.join(r['a_got'])}; lost "
                        f"{','.join(r['lost']) or 'none'}")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--case", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--cuts", type=int, default=3, help="runs of the cut case")
    parser.add_argument("--cut-keepalive", type=int, default=4,
                        help="member A's keepalive in the cut case (s)")
    parser.add_argument("--json", action="store_true", help="one JSON object per case")
    # a member child process (internal)
    parser.add_argument("--member", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--keepalive", type=int, default=60, help=argparse.SUPPRESS)
    parser.add_argument("--ack", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--clean", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.member:
        return member_main(args)
    binary = mosquitto_binary()
    if binary is None:
        print("no mosquitto binary; run scripts/setup-env.sh", file=sys.stderr)
        return 2
    results = []
    for case in args.case:
        runs = args.cuts if case == "cut" else 1
        for i in range(runs):
            # the cut lands at a different phase of Mosquitto's keepalive check each run
            result = (cut_case(binary, before_s=2.0 + 6.0 * i / runs,
                               keepalive=args.cut_keepalive) if case == "cut"
                      else kill_case(binary, case == "clean"))
            results.append(result)
            if args.json:
                print(json.dumps(result), flush=True)
    if not args.json:
        print(table(results))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
