"""Bench the image input path: JPEG bytes -> ViT patches, and header-only probes.

Every number is the median of ``--runs`` timed runs (default 21) after one warm-up run, in
wall-clock time (what targets are judged on) and in this process's CPU time (less disturbed
by other work on a shared machine; the two agree on an idle one).

- a 1920x1080 photo-like JPEG (gradients, shapes and noise, quality 90) through
  ``decode_image`` + ``preprocess_image`` with the Qwen3-VL defaults (-> 1920x1088, 8160
  patches, 50 MB of float32) (target < 80 ms), and its parts: decode, Pillow resize, and
  normalise + patchify;
- ``probe_image`` of 8 different full-HD JPEGs, as the preflight does before any decode.

Run: ``.venv/bin/python bench/bench_preprocess.py [--runs N] [--json]``
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import PIL
from PIL import Image

from edgevlm.vision.decode import MediaPolicy, decode_image, probe_image
from edgevlm.vision.preprocess import preprocess_image
from edgevlm.vision.sizing import get_family

WIDTH, HEIGHT = 1920, 1080
PATCHES_TARGET_MS = 80.0
PROBES = 8
FAMILY = get_family("qwen3-vl")
POLICY = MediaPolicy()


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
    fn()  # warm-up: page faults, caches, the normalisation table
    wall, cpu = [], []
    for _ in range(runs):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        cpu.append(time.process_time() - start_cpu)
        wall.append(time.perf_counter() - start)
    return statistics.median(wall), statistics.median(cpu)


def photo_jpeg(seed: int, width: int = WIDTH, height: int = HEIGHT) -> bytes:
    """A natural-ish JPEG: smooth gradients, soft waves, a disc and sensor-like noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    red = 40 + 180 * x / width + 25 * np.sin(y / 37 + seed)
    green = 30 + 170 * y / height + 30 * np.cos(x / 53)
    blue = 255 * (x + y) / (width + height)
    disc = (x - width * 0.6) ** 2 + (y - height * 0.45) ** 2 < (height * 0.2) ** 2
    pixels = np.stack([np.where(disc, 220 - red / 2, red), green, blue], axis=-1)
    pixels += rng.normal(0, 6, pixels.shape).astype(np.float32)
    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


def row(name: str, timing: tuple[float, float], target_ms: float | None = None,
        scale: float = 1000.0, unit: str = "ms") -> Row:
    wall, cpu = timing
    value = wall * scale
    ok = None if target_ms is None else value < target_ms
    return Row(name, value, cpu * scale, unit,
               "-" if target_ms is None else f"< {target_ms:g} ms", ok)


def run(runs: int) -> list[Row]:
    jpeg = photo_jpeg(0)
    decoded = decode_image(jpeg, POLICY)
    sized = preprocess_image(decoded, FAMILY)
    height, width = sized.grid_thw[1] * 16, sized.grid_thw[2] * 16
    resized = decoded.resize((width, height), Image.Resampling.BICUBIC)
    headers = [photo_jpeg(seed) for seed in range(1, PROBES + 1)]
    return [
        row(f"{WIDTH}x{HEIGHT} JPEG -> patches", median_seconds(
            lambda: preprocess_image(decode_image(jpeg, POLICY), FAMILY), runs),
            PATCHES_TARGET_MS),
        row("  decode_image", median_seconds(lambda: decode_image(jpeg, POLICY), runs)),
        row(f"  resize to {width}x{height} (Pillow bicubic)", median_seconds(
            lambda: decoded.resize((width, height), Image.Resampling.BICUBIC), runs)),
        row("  normalise + patchify", median_seconds(
            lambda: preprocess_image(resized, FAMILY), runs)),
        row(f"probe_image x{PROBES} full-HD JPEGs", median_seconds(
            lambda: [probe_image(data, POLICY) for data in headers], runs)),
        row("  per probe", median_seconds(lambda: probe_image(headers[0], POLICY), runs),
            scale=1e6, unit="us"),
    ]


def environment() -> dict[str, object]:
    return {"python": platform.python_version(), "numpy": np.__version__,
            "pillow": PIL.__version__, "machine": platform.machine(),
            "cpus": os.cpu_count(), "jpeg_bytes": len(photo_jpeg(0))}


def print_table(rows: list[Row], runs: int) -> None:
    env = environment()
    print(f"edgevlm preprocess bench: median of {runs} runs; python {env['python']}, numpy "
          f"{env['numpy']}, Pillow {env['pillow']}, {env['machine']} x{env['cpus']}; "
          f"JPEG {env['jpeg_bytes']} bytes")
    print(f"{'benchmark':<42} {'wall':>8} {'cpu':>8}        {'target':<10} ok")
    for r in rows:
        ok = "-" if r.ok is None else ("yes" if r.ok else "NO")
        print(f"{r.name:<42} {r.value:>8.1f} {r.cpu_value:>8.1f} {r.unit:<6} {r.target:<10} "
              f"{ok}")


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
