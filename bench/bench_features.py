"""Bench the vision-feature path: cache-key hashing and ``vision_tokens`` decode + validate.

Every number is the median of ``--runs`` timed runs (default 21) after one warm-up run, in
wall-clock time (what targets are judged on) and in this process's CPU time (less disturbed
by other work on a shared machine; the two agree on an idle one).

- ``cache_key`` throughput over a 4 MiB and a 64 MiB buffer (target >= 500 MiB/s);
- ``decode_vision_tokens`` of a 784-token payload (d = 2048, 3 DeepStack entries: 25.7 MB
  of float32) as f32/f16 x separate/packed (target < 40 ms for f32 separate);
- for scale, ``strict_base64.decode`` alone over the same f32 base64 texts.

Run: ``.venv/bin/python bench/bench_features.py [--runs N] [--json]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from edgevlm.vision.cache_key import cache_key
from edgevlm.wire import strict_base64
from edgevlm.wire.protocol import VisionTokensPayload
from edgevlm.wire.vision_tokens import (
    FeatureDtype,
    Layout,
    VisionFeatures,
    decode_vision_tokens,
    encode_vision_tokens,
)

N_TOKENS, HIDDEN, DEEPSTACK = 784, 2048, 3
GRID = (1, 28, 28)
KEY_TARGET_MIBS = 500.0
DECODE_TARGET_MS = 40.0


@dataclass(frozen=True)
class Row:
    name: str
    value: float  # from the wall-clock median
    cpu_value: float  # the same from the CPU-time median
    unit: str
    target: str
    ok: bool | None  # None: informational, no target


def median_seconds(fn: Callable[[], object], runs: int) -> tuple[float, float]:
    """(wall, cpu) medians in seconds."""
    fn()  # warm-up: page faults, caches
    wall, cpu = [], []
    for _ in range(runs):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        cpu.append(time.process_time() - start_cpu)
        wall.append(time.perf_counter() - start)
    return statistics.median(wall), statistics.median(cpu)


def bench_cache_key(mib: int, runs: int) -> Row:
    buffer = np.random.default_rng(mib).integers(0, 256, mib * 2**20, dtype=np.uint8).tobytes()
    wall, cpu = median_seconds(
        lambda: cache_key("bench-model", "qwen3_vl", 3136, 1_003_520, buffer), runs)
    rate = mib / wall
    return Row(f"cache_key {mib} MiB", rate, mib / cpu, "MiB/s",
               f">= {KEY_TARGET_MIBS:g} MiB/s", rate >= KEY_TARGET_MIBS)


def make_features() -> VisionFeatures:
    rng = np.random.default_rng(0)
    embeddings = rng.standard_normal((N_TOKENS, HIDDEN), dtype=np.float32)
    deepstack = rng.standard_normal((DEEPSTACK, N_TOKENS, HIDDEN), dtype=np.float32)
    return VisionFeatures(embeddings, deepstack, GRID)


def bench_decode(features: VisionFeatures, dtype: FeatureDtype, layout: Layout,
                 runs: int) -> Row:
    wire = encode_vision_tokens(features, dtype=dtype, layout=layout)
    payload = VisionTokensPayload.model_validate(wire)
    wall, cpu = median_seconds(lambda: decode_vision_tokens(payload, HIDDEN, DEEPSTACK), runs)
    ms = wall * 1000
    headline = dtype == "f32" and layout == "separate"
    return Row(f"decode {N_TOKENS}x{HIDDEN} ds={DEEPSTACK} {dtype} {layout}", ms, cpu * 1000,
               "ms",
               f"< {DECODE_TARGET_MS:g} ms" if headline else "-",
               ms < DECODE_TARGET_MS if headline else None)


def bench_base64_only(features: VisionFeatures, runs: int) -> Row:
    wire = encode_vision_tokens(features)
    texts = [wire["tokens_b64"], *wire["ds_b64"]]
    wall, cpu = median_seconds(lambda: [strict_base64.decode(t) for t in texts], runs)
    return Row("  of which strict_base64.decode (f32)", wall * 1000, cpu * 1000, "ms", "-",
               None)


def run(runs: int) -> list[Row]:
    rows = [bench_cache_key(4, runs), bench_cache_key(64, runs)]
    features = make_features()
    rows.append(bench_decode(features, "f32", "separate", runs))
    rows.append(bench_base64_only(features, runs))
    rows.append(bench_decode(features, "f16", "separate", runs))
    rows.append(bench_decode(features, "f32", "packed", runs))
    rows.append(bench_decode(features, "f16", "packed", runs))
    return rows


def environment() -> dict[str, object]:
    return {"python": platform.python_version(), "numpy": np.__version__,
            "machine": platform.machine(), "cpus": os.cpu_count(),
            "payload_mb": round(features_mb(), 1)}


def features_mb() -> float:
    return N_TOKENS * HIDDEN * 4 * (1 + DEEPSTACK) / 1e6


def print_table(rows: list[Row], runs: int) -> None:
    env = environment()
    print(f"edgevlm feature bench: median of {runs} runs; python {env['python']}, numpy "
          f"{env['numpy']}, {env['machine']} x{env['cpus']}; payload {env['payload_mb']} MB f32")
    print(f"{'benchmark':<40} {'wall':>8} {'cpu':>8}        {'target':<14} ok")
    for row in rows:
        ok = "-" if row.ok is None else ("yes" if row.ok else "NO")
        print(f"{row.name:<40} {row.value:>8.1f} {row.cpu_value:>8.1f} {row.unit:<6} "
              f"{row.target:<14} {ok}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=21, help="timed runs per benchmark (>= 20)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be >= 1")
    rows = run(args.runs)
    if args.json:
        print(json.dumps({"runs": args.runs, "environment": environment(),
                          "results": [asdict(r) for r in rows]}, indent=2))
    else:
        print_table(rows, args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
