"""Bench the HTTP front door's overhead with the model call excluded (issue 24).

The daemon runs in this process (a private broker on loopback for its MQTT side, the bundled
demo model, ``http.enabled`` on a free port); a client on one keep-alive connection
(``http.client``, so the client library's own parsing is not billed to the server) sends an
OpenAI chat completion with a ~200 KB JPEG data URL, one request at a time. Everything is
timed on one clock (``time.monotonic``):

- inbound: the client starts sending -> the model call starts (``Engine.generate_prepared``):
  HTTP parsing, JSON, translation, admission with the budget from the image header, the queue
  hand-off to the worker, and media preparation is *not* in it (the model call starts after
  it; the answer's ``media_ms`` is reported beside);
- outbound: the model call returns -> the client has the whole answer;
- streaming: the worker hands the first token to the front door -> the client has that SSE
  chunk.

The same numbers for the ``openai`` client (what Frigate and LLM Vision use) are printed with
``--openai``. Targets: inbound and outbound <= 2 ms p50 each (as MQTT's). Not run in CI.
Run: ``.venv/bin/python bench/bench_http.py [--runs N] [--openai] [--json]``
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import logging
import os
import statistics
import time
from typing import Any

from bench_mqtt import jpeg_near, p

from edgevlm.config import default_config
from edgevlm.demo import private_broker
from edgevlm.frontdoors.http.submit import HttpReply
from edgevlm.service import Service

TARGETS = {"inbound_ms": 2.0, "outbound_ms": 2.0}


class Probe:
    """The model call's start and end, and the first streamed token's hand-off."""

    def __init__(self, service: Service) -> None:
        self.started: list[float] = []
        self.ready: list[float] = []
        self.first_chunk: list[float] = []
        engine = service.engine
        generate = engine.generate_prepared

        def timed_generate(*args: Any, **kwargs: Any) -> Any:
            self.started.append(time.monotonic())
            result = generate(*args, **kwargs)
            self.ready.append(time.monotonic())
            return result

        engine.generate_prepared = timed_generate  # type: ignore[method-assign]
        chunk = HttpReply.chunk

        def timed_chunk(reply: HttpReply, piece: Any) -> None:
            if not getattr(reply, "_bench_seen", False):
                reply._bench_seen = True  # type: ignore[attr-defined]
                self.first_chunk.append(time.monotonic())
            chunk(reply, piece)

        HttpReply.chunk = timed_chunk  # type: ignore[method-assign]


def body(image: bytes, stream: bool) -> bytes:
    url = "data:image/jpeg;base64," + base64.b64encode(image).decode()
    return json.dumps({"model": "m", "max_tokens": 8, "temperature": 0, "stream": stream,
                       "messages": [{"role": "user", "content": [
                           {"type": "image_url", "image_url": {"url": url}},
                           {"type": "text", "text": "Describe the scene."}]}]}).encode()


def raw_overhead(port: int, probe: Probe, image: bytes, runs: int) -> dict[str, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    inbound, outbound, media = [], [], []
    payload = body(image, False)
    for i in range(runs + 3):
        t0 = time.monotonic()
        conn.request("POST", "/v1/chat/completions", payload,
                     {"Content-Type": "application/json"})
        response = conn.getresponse()
        answer = json.loads(response.read())
        t3 = time.monotonic()
        assert response.status == 200, answer
        if i < 3:
            continue  # warm-up
        inbound.append((probe.started[-1] - t0) * 1e3)
        outbound.append((t3 - probe.ready[-1]) * 1e3)
        media.append(answer["edgevlm"]["metrics"]["media_ms"])
    streamed = []
    payload = body(image, True)
    for i in range(runs + 3):
        conn.request("POST", "/v1/chat/completions", payload,
                     {"Content-Type": "application/json"})
        response = conn.getresponse()
        first_at = None
        while True:
            line = response.readline()
            if not line:
                break
            if line.startswith(b"data: ") and b'"content":"' in line and first_at is None \
                    and b'"content":""' not in line:
                first_at = time.monotonic()
            if line.strip() == b"data: [DONE]":
                break
        response.read()
        if i >= 3 and first_at is not None:
            streamed.append((first_at - probe.first_chunk[-1]) * 1e3)
    conn.close()
    return {"inbound_ms": summary(inbound), "outbound_ms": summary(outbound),
            "first_chunk_ms": summary(streamed), "media_ms": summary(media)}


def openai_overhead(port: int, probe: Probe, image: bytes, runs: int) -> dict[str, Any]:
    import openai

    api = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
    request = json.loads(body(image, False))
    inbound, outbound = [], []
    for i in range(runs + 3):
        t0 = time.monotonic()
        api.chat.completions.create(**request)
        t3 = time.monotonic()
        if i >= 3:
            inbound.append((probe.started[-1] - t0) * 1e3)
            outbound.append((t3 - probe.ready[-1]) * 1e3)
    return {"inbound_ms": summary(inbound), "outbound_ms": summary(outbound)}


def summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": float("nan"), "p95": float("nan")}
    return {"p50": round(statistics.median(values), 3), "p95": round(p(values, 0.95), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--openai", action="store_true", help="also time the openai client")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    image = jpeg_near(200_000)
    load = os.getloadavg()
    with private_broker("auto") as (what, broker_port):
        config = default_config(env=None, overrides={
            "mqtt.host": "127.0.0.1", "mqtt.port": broker_port, "mqtt.node_id": "bench",
            "mqtt.clean_start": True, "mqtt.session_expiry_s": 0,
            "homeassistant.discovery": False, "zeroconf.enabled": False,
            "model.threads": args.threads, "http.enabled": True, "http.port": 0})
        service = Service(config)
        probe = Probe(service)
        service.start()
        try:
            assert service.http is not None and service.http.port is not None
            result: dict[str, Any] = {"broker": what, "load_average": load,
                                      "image_bytes": len(image), "runs": args.runs,
                                      "raw": raw_overhead(service.http.port, probe, image,
                                                          args.runs)}
            if args.openai:
                result["openai"] = openai_overhead(service.http.port, probe, image, args.runs)
        finally:
            service.stop("bench over")
    raw = result["raw"]
    result["targets"] = TARGETS
    result["met"] = {k: raw[k]["p50"] <= v for k, v in TARGETS.items()}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"load average {load[0]:.2f}; {args.runs} requests with a "
          f"{len(image) / 1000:.0f} KB JPEG data URL, one keep-alive connection")
    for key in ("inbound_ms", "outbound_ms", "first_chunk_ms", "media_ms"):
        mark = (f"  target <= {TARGETS[key]:g} ms p50: "
                f"{'met' if result['met'][key] else 'NOT met'}" if key in TARGETS else "")
        print(f"  {key:16s} p50 {raw[key]['p50']:8.3f}  p95 {raw[key]['p95']:8.3f}{mark}")
    if "openai" in result:
        for key in ("inbound_ms", "outbound_ms"):
            r = result["openai"][key]
            print(f"  openai {key:9s} p50 {r['p50']:8.3f}  p95 {r['p95']:8.3f}")


if __name__ == "__main__":
    main()
