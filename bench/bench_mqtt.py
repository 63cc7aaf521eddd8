"""Bench the daemon's MQTT overhead with the model call excluded (issue 5 §7).

The daemon runs in this process against a private broker on loopback (mosquitto when present,
else the embedded broker; or ``--broker HOST:PORT``), with the bundled demo model. Everything
is timed on one clock (``time.monotonic``), inside the daemon where it matters:

- received -> work started: the answer's ``metrics.queue_ms`` (message arrival on the
  network thread -> the worker takes the job), for a ~200 KB JPEG, one request at a time.
- answer ready -> published: the model call returns (``Engine.generate_prepared``) -> the
  answer is handed to paho (``MqttLink.publish``), and -> it arrives at the client.
- flood: 1,000 invalid requests (wrong schema, each with an id) published as fast as paho
  can, answered ``invalid_request`` on the network thread; the rate is end to end (first
  publish -> last error answer at the client). A valid request sent in the middle of the
  flood: its round trip minus the idle round trip is its delay.

Targets: received -> started <= 2 ms p50, ready -> published <= 2 ms p50, flood >= 2,000
req/s, valid request delayed <= 50 ms. Not run in CI.
Run: ``.venv/bin/python bench/bench_mqtt.py [--runs N] [--flood N] [--json]``
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import statistics
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
from PIL import Image

from edgevlm.ask import DescribeClient, describe_request, image_part
from edgevlm.config import Config, default_config
from edgevlm.demo import load_samples, private_broker
from edgevlm.service import Service

NODE = "bench"
TARGETS = {"received_to_started_ms": 2.0, "ready_to_published_ms": 2.0,
           "flood_rate_per_s": 2000.0, "valid_delay_ms": 50.0}


def jpeg_near(size_bytes: int, seed: int = 0) -> bytes:
    """A noisy photo-like JPEG of about ``size_bytes`` (quality 90, size grown to fit)."""
    rng = np.random.default_rng(seed)
    width = 640
    while True:
        height = width * 9 // 16
        y, x = np.mgrid[0:height, 0:width]
        pixels = np.stack([x % 256, y % 256, (x + y) % 256], -1) + rng.integers(
            0, 48, (height, width, 3))
        buf = io.BytesIO()
        Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(buf, "JPEG", quality=90)
        if buf.tell() >= size_bytes or width >= 4096:
            return buf.getvalue()
        width = int(width * (size_bytes / buf.tell()) ** 0.5) + 16


class Probe:
    """Timestamps from inside the daemon: model call end and answer hand-off, by request id."""

    def __init__(self, service: Service) -> None:
        self.ready: dict[str, float] = {}
        self.handed: dict[str, float] = {}
        self.flood_cpu: list[float] = []   # network-thread CPU time at each flood message
        engine, link, requests = service.engine, service.link, service.requests
        generate, publish, handle = engine.generate_prepared, link.publish, requests.handle

        def timed_handle(msg: Any, topic: Any) -> None:
            handle(msg, topic)
            if b'"bad-' in msg.payload[:40]:
                self.flood_cpu.append(time.thread_time())

        def timed_generate(request: Any, *args: Any, **kwargs: Any) -> Any:
            result = generate(request, *args, **kwargs)
            if request.id is not None:
                self.ready[request.id] = time.monotonic()
            return result

        def timed_publish(topic: str, payload: bytes | str, *args: Any, **kwargs: Any) -> Any:
            info = publish(topic, payload, *args, **kwargs)
            now = time.monotonic()
            if "/reply/" in topic:
                with contextlib.suppress(ValueError, AttributeError):
                    rid = json.loads(payload).get("id")
                    if rid is not None:
                        self.handed.setdefault(rid, now)
            return info

        engine.generate_prepared = timed_generate  # type: ignore[method-assign]
        link.publish = timed_publish  # type: ignore[method-assign]
        requests.handle = timed_handle  # type: ignore[method-assign]


def bench_config(host: str, port: int, threads: int) -> Config:
    return default_config(env=None, overrides={
        "mqtt.host": host, "mqtt.port": port, "mqtt.node_id": NODE,
        "mqtt.client_id": f"edgevlm-bench-{port}", "mqtt.clean_start": True,
        "mqtt.session_expiry_s": 0, "homeassistant.discovery": False,
        "zeroconf.enabled": False, "model.threads": threads, "limits.max_queue": 64,
        "limits.default_deadline_ms": 600_000})


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def overhead(client: DescribeClient, probe: Probe, image: bytes, runs: int
             ) -> dict[str, Any]:
    started, handed, delivered = [], [], []
    for i in range(runs + 3):
        request = describe_request("Describe the scene.", [image_part(image, "image/jpeg")],
                                   request_id=f"size-{i}", max_tokens=8, temperature=0.0)
        waiter = client.send(request, NODE)
        answer = client.wait(waiter, 120)
        if i < 3:
            continue  # warm-up
        rid = request["id"]
        assert answer["status"] == "ok", answer
        deadline = time.monotonic() + 10  # the worker may record after the client has it
        while rid not in probe.handed and time.monotonic() < deadline:
            time.sleep(0.001)
        started.append(answer["data"]["metrics"]["queue_ms"])
        handed.append((probe.handed[rid] - probe.ready[rid]) * 1e3)
        delivered.append((waiter.received_at - probe.ready[rid]) * 1e3)
    return {"image_bytes": len(image), "runs": runs,
            "received_to_started_ms": {"p50": statistics.median(started),
                                       "p95": p(started, 0.95)},
            "ready_to_published_ms": {"p50": statistics.median(handed),
                                      "p95": p(handed, 0.95)},
            "ready_to_client_ms": {"p50": statistics.median(delivered),
                                   "p95": p(delivered, 0.95)}}


def round_trip(client: DescribeClient, image: bytes, rid: str) -> float:
    t0 = time.monotonic()
    waiter = client.send(describe_request("Is there a cat?", [image_part(image)],
                                          request_id=rid, max_tokens=4, temperature=0.0), NODE)
    answer = client.wait(waiter, 120)
    assert answer["status"] == "ok", answer
    return (waiter.received_at - t0) * 1e3


def _flooder(host: str, port: int, count: int, inflight: int, rate: float, go: Any, out: Any
             ) -> None:
    """Child process: publish ``count`` invalid requests at ``rate`` per second (0: as fast as
    paho can) with prebuilt payloads; report when the first went out, when the last error
    answer came back, and whether every answer was ``invalid_request``."""
    import paho.mqtt.client as paho
    from paho.mqtt.enums import CallbackAPIVersion
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    reply = f"edgevlm/{NODE}/reply/flood"
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
    client.subscribe(reply, qos=1)
    subscribed.wait(30)
    props = Properties(PacketTypes.PUBLISH)
    props.ResponseTopic = reply
    props.CorrelationData = b"flood"
    topic = f"edgevlm/{NODE}/request/describe"
    payloads = [json.dumps({"v": 1, "id": f"bad-{i}", "messages": []}).encode()
                for i in range(count)]
    out.put("ready")
    go.wait()
    t0 = time.monotonic()
    for i, payload in enumerate(payloads):
        if rate > 0:
            ahead = t0 + i / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
        client.publish(topic, payload, qos=1, properties=props)
    sent = time.monotonic()
    done.wait(120)
    ok = len(answers) == count and set(answers.values()) == {"invalid_request"}
    out.put((t0, sent, last[0], ok))
    client.disconnect()
    client.loop_stop()


def flood(host: str, port: int, client: DescribeClient, probe: Probe, image: bytes, count: int,
          inflight: int, rate: float) -> dict[str, Any]:
    import multiprocessing

    idle = statistics.median(round_trip(client, image, f"idle-{i}") for i in range(10))
    ctx = multiprocessing.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    child = ctx.Process(target=_flooder, args=(host, port, count, inflight, rate, go, out))
    child.start()
    assert out.get(timeout=60) == "ready"
    go.set()
    time.sleep(count / (rate or 4000) / 3)  # a third of the flood on its way
    valid = round_trip(client, image, "valid-during-flood")
    t0, sent, t_last, ok = out.get(timeout=180)
    child.join(30)
    assert ok, "some flood request got no answer or another answer than invalid_request"
    cpu = probe.flood_cpu
    elapsed = t_last - t0
    return {"invalid_requests": count, "offered_rate_per_s": rate or None,
            "sent_rate_per_s": count / max(sent - t0, 1e-9), "seconds": elapsed,
            "flood_rate_per_s": count / elapsed,
            "network_thread_cpu_ms_per_request": (cpu[-1] - cpu[0]) / (len(cpu) - 1) * 1e3,
            "network_thread_capacity_per_s": (len(cpu) - 1) / max(cpu[-1] - cpu[0], 1e-9),
            "idle_round_trip_ms": idle,
            "valid_round_trip_during_flood_ms": valid,
            "valid_delay_ms": max(valid - idle, 0.0)}


@contextlib.contextmanager
def broker_for(args: argparse.Namespace) -> Iterator[tuple[str, int, str]]:
    if args.broker:
        host, _, port = args.broker.partition(":")
        yield host, int(port or 1883), f"{args.broker} (given)"
        return
    with private_broker(args.broker_kind) as (what, port):
        yield "127.0.0.1", port, what


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--flood", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--broker", metavar="HOST:PORT")
    parser.add_argument("--broker-kind", choices=["auto", "mosquitto", "embedded"],
                        default="auto")
    parser.add_argument("--flood-rate", type=float, default=2000.0, help="requests/s the "
                        "flood is offered at (0: as fast as one paho client publishes)")
    parser.add_argument("--client-inflight", type=int, default=0, help="the flooding "
                        "client's QoS 1 in-flight window (paho's default is 20; 0: no limit)")
    parser.add_argument("--daemon-inflight", type=int, default=None, help="experiment: set "
                        "the daemon's paho in-flight window (default: the daemon's own)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    image = jpeg_near(200_000)
    small = load_samples()[0].image.read_bytes()
    with broker_for(args) as (host, port, what):
        service = Service(bench_config(host, port, args.threads))
        probe = Probe(service)
        if args.daemon_inflight is not None:  # experiment: paho's window on the daemon side
            service.link._client.max_inflight_messages_set(args.daemon_inflight)
        service.start()
        try:
            with DescribeClient(host, port) as client:
                client.connect()
                result = {"broker": what, **overhead(client, probe, image, args.runs),
                          "flood": flood(host, port, client, probe, small, args.flood,
                                         args.client_inflight, args.flood_rate)}
        finally:
            service.stop("bench over")
    met = {
        "received_to_started_ms": result["received_to_started_ms"]["p50"]
        <= TARGETS["received_to_started_ms"],
        "ready_to_published_ms": result["ready_to_published_ms"]["p50"]
        <= TARGETS["ready_to_published_ms"],
        "flood_rate_per_s": result["flood"]["flood_rate_per_s"] >= TARGETS["flood_rate_per_s"],
        "valid_delay_ms": result["flood"]["valid_delay_ms"] <= TARGETS["valid_delay_ms"]}
    result["targets"], result["met"] = TARGETS, met
    if args.json:
        print(json.dumps(result, indent=2))
        return
    fl = result["flood"]
    print(f"broker: {result['broker']}; {args.runs} requests with a "
          f"{result['image_bytes'] / 1000:.0f} KB JPEG")
    for key in ("received_to_started_ms", "ready_to_published_ms", "ready_to_client_ms"):
        r = result[key]
        mark = f"  target <= {TARGETS[key]:g} ms p50: {'met' if met[key] else 'NOT met'}" \
            if key in met else ""
        print(f"  {key:<24} p50 {r['p50']:7.3f} ms  p95 {r['p95']:7.3f} ms{mark}")
    offered = f"offered at {fl['offered_rate_per_s']:.0f}/s" if fl["offered_rate_per_s"] \
        else "offered as fast as one client publishes"
    print(f"flood ({offered}): {fl['invalid_requests']} invalid requests answered in "
          f"{fl['seconds']:.3f} s "
          f"= {fl['flood_rate_per_s']:.0f} req/s (target >= 2000: "
          f"{'met' if met['flood_rate_per_s'] else 'NOT met'}); sent at "
          f"{fl['sent_rate_per_s']:.0f}/s; the daemon's network thread spent "
          f"{fl['network_thread_cpu_ms_per_request']:.3f} ms CPU per request = "
          f"{fl['network_thread_capacity_per_s']:.0f} req/s capacity")
    print(f"  valid request: {fl['valid_round_trip_during_flood_ms']:.1f} ms during the flood, "
          f"{fl['idle_round_trip_ms']:.1f} ms idle -> delayed {fl['valid_delay_ms']:.1f} ms "
          f"(target <= 50: {'met' if met['valid_delay_ms'] else 'NOT met'})")


if __name__ == "__main__":
    main()
