"""Bench request admission: a request with 8 full-HD JPEGs through preflight (headers only)
and through the whole admission (JSON + schema + limits + preflight).

Median of ``--runs`` runs after a warm-up; wall-clock and CPU time.
Run: ``.venv/bin/python bench/bench_admission.py [--runs N] [--json]``
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import statistics
import time
from collections.abc import Callable

import numpy as np
from PIL import Image

from edgevlm.engine.families.qwen3vl import render_segments as qwen3vl_chat
from edgevlm.pipeline.admission import RequestSide, admit
from edgevlm.pipeline.limits import MMLimits, RequestLimits
from edgevlm.pipeline.preflight import PreflightContext, preflight
from edgevlm.tokenizer import ByteCountTokenizer
from edgevlm.vision.sizing import get_family
from edgevlm.wire.protocol import parse_request

TARGET_PREFLIGHT_MS = 2.0


def full_hd_jpeg(seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:1080, 0:1920]
    img = np.stack([x % 256, y % 256, (x + y) % 256], -1) + rng.integers(0, 40, (1080, 1920, 3))
    buf = io.BytesIO()
    Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def timed(fn: Callable[[], object], runs: int) -> tuple[float, float]:
    fn()
    wall, cpu = [], []
    for _ in range(runs):
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return statistics.median(wall) * 1e3, statistics.median(cpu) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    parts = [{"type": "image", "image": "data:image/jpeg;base64,"
              + base64.b64encode(full_hd_jpeg(i)).decode()} for i in range(8)]
    payload = json.dumps({"v": 1, "id": "bench", "messages": [{"role": "user", "content": [
        *parts, {"type": "text", "text": "What changed between these frames?"}]}]}).encode()
    ctx = PreflightContext(family=get_family("qwen3-vl"), context_length=32768,
                           chat_template=qwen3vl_chat,
                           tokenizer=ByteCountTokenizer(), max_pixels=1_003_520,
                           mm=MMLimits.parse({"image": 8}))
    side = RequestSide(RequestLimits(mm=ctx.mm, max_payload_bytes=64 << 20), ctx)
    request = parse_request(payload)
    rows = {
        "preflight (8 full-HD JPEG headers)": timed(lambda: preflight(request, ctx), args.runs),
        "whole admission (JSON + schema + limits + preflight)": timed(
            lambda: admit(payload, side), args.runs),
    }
    if args.json:
        print(json.dumps({"payload_bytes": len(payload), "runs": args.runs,
                          "rows": {k: {"wall_ms": w, "cpu_ms": c} for k, (w, c) in rows.items()},
                          "target_preflight_ms": TARGET_PREFLIGHT_MS}, indent=2))
        return
    print(f"payload {len(payload) / 1e6:.1f} MB, median of {args.runs} runs")
    for name, (wall, cpu) in rows.items():
        print(f"  {name:55s} {wall:8.2f} ms wall  {cpu:8.2f} ms cpu")
    print(f"  target: preflight < {TARGET_PREFLIGHT_MS} ms")


if __name__ == "__main__":
    main()
