#!/usr/bin/env python3
"""How far each vision-tower storage type is from the float32 reference, on the 2B checkpoint.

    .venv/bin/python bench/vision_accuracy.py [--types f32,q8_0,f16,bf16] [--sizes 448,256]
        [--precision exact,fast] [--threads 2] [--json] [--results DIR]

The reference is transformers (float32, eager) on the bench's 2B-shaped checkpoint
(``tools/make_2b_model.py``, built or reused under ``~/.cache/edgevlm/bench/``):
``get_image_features`` -> the merged rows (what the decoder gets in place of the image's
tokens) and the three DeepStack taps. Each edgevlm tower type encodes the same pixels
(edgevlm's preprocessing, which the parity tests hold equal to transformers' processor):

* ``f32``: a pair converted with ``--vision-type f32`` (text Q4_0, unused) into
  ``gguf-vision-f32``;
* ``q8_0`` / ``f16`` / ``bf16``: the engine bench's pairs (``gguf-q8_0``: vision Q8_0, the
  default; ``gguf-q4_0``: vision F16; ``gguf-bf16``: vision BF16), converted if missing.

Each type runs at every ``--precision`` (default ``exact``, the engine's default; ``fast``
rounds the activations as llama.cpp does where the CPU has kernels for it, see
docs/configuration.md ``model.precision``); a fast row is labelled ``<type> fast``. A row
``transformers bf16`` (skip it with ``--no-peer``) scores the engine bench's peer the same way:
the checkpoint run in bf16, which rounds weights and activations to bf16.
Per type, precision and image size: the relative Frobenius error ``||ours - ref|| / ||ref||``
of the merged rows and of the worst DeepStack tap, the mean and the smallest cosine similarity
of a merged row with its reference row, and ``max|ours - ref| / max|ref|`` (the parity
tests' measure).
The images are the engine bench's: a 448x448 blurred random scene (the TTFT request's JPEG)
and 256x256 random noise. Writes ``vision-accuracy-<date>.{md,json}`` into ``--results``
(default ``bench/results/``). Exit codes: 0 ok, 1 failed, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from engine_common import REPO, cache_root, display_path, log, random_image, ttft_image_jpeg
from engine_setup import ensure_checkpoint, ensure_gguf, machine_info, repo_state

from edgevlm.engine.engine import PRECISIONS  # precision name -> the session's kernel mode

# vision type -> the engine bench's text type whose pair carries that tower
BENCH_PAIR = {"q8_0": "q8_0", "f16": "q4_0", "bf16": "bf16"}
TYPES = ("f32", "q8_0", "f16", "bf16")


def ensure_f32_tower(checkpoint: Path) -> Path:
    out = cache_root() / "gguf-vision-f32"
    marker = out / ".complete"
    if not marker.is_file():
        log(f"converting a pair with an F32 vision tower into {out} (text Q4_0, ~1 min)")
        subprocess.run([sys.executable, "-m", "edgevlm.convert.cli", str(checkpoint), "-o",
                        str(out), "--type", "q4_0", "--vision-type", "f32", "-q"], check=True,
                       cwd=str(REPO))
        marker.write_text(json.dumps({"type": "q4_0", "vision_type": "f32"}) + "\n")
    return out


def accuracy_images() -> dict[int, Any]:
    from PIL import Image

    return {448: Image.open(io.BytesIO(ttft_image_jpeg(448))).convert("RGB"),
            256: Image.fromarray(random_image(256))}


def transformers_features(checkpoint: Path, pixels: dict[int, Any], bf16: bool = False
                          ) -> dict[int, dict[str, Any]]:
    """transformers float32 eager (the reference) or bf16 sdpa (the engine bench's peer):
    merged rows [N/4, D] and DeepStack taps [taps, N/4, D] as float32, and the encode time."""
    import torch
    from transformers import Qwen3VLForConditionalGeneration

    dtype = torch.bfloat16 if bf16 else torch.float32
    attn = "sdpa" if bf16 else "eager"      # the bench's peer runs sdpa
    log(f"loading the checkpoint in transformers ({'bf16' if bf16 else 'float32'}, {attn})")
    model = Qwen3VLForConditionalGeneration.from_pretrained(
        checkpoint, dtype=dtype, attn_implementation=attn).eval()
    out: dict[int, dict[str, Any]] = {}
    with torch.no_grad():
        for size, px in pixels.items():
            t0 = time.perf_counter()
            feats = model.model.get_image_features(
                torch.from_numpy(np.ascontiguousarray(px.pixel_values, dtype=np.float32))
                .to(dtype), torch.tensor([px.grid_thw], dtype=torch.int64))
            ms = (time.perf_counter() - t0) * 1e3
            out[size] = {
                "embeds": feats.pooler_output[0].float().numpy(),
                "deepstack": torch.stack([tap[0] for tap in feats.deepstack_features])
                .float().numpy(), "encode_ms": ms}
            log(f"transformers {'bf16' if bf16 else 'float32'} {size}x{size}: {ms / 1e3:.1f} s")
    del model
    return out


def scored(feats: dict[str, Any], ref: dict[str, Any], ms: float) -> dict[str, Any]:
    taps = [compare(feats["deepstack"][i], ref["deepstack"][i])
            for i in range(ref["deepstack"].shape[0])]
    return {"encode_ms": ms, "merged": compare(feats["embeds"], ref["embeds"]),
            "deepstack_worst": max(taps, key=lambda t: t["rel_frobenius"])}


def compare(ours: np.ndarray, ref: np.ndarray) -> dict[str, float]:
    """Relative Frobenius error, max-abs error relative to max|ref|, row cosines."""
    a, r = ours.astype(np.float64), ref.astype(np.float64)
    cos = (a * r).sum(-1) / np.maximum(np.linalg.norm(a, axis=-1) * np.linalg.norm(r, axis=-1),
                                       1e-300)
    return {"rel_frobenius": float(np.linalg.norm(a - r) / np.linalg.norm(r)),
            "rel_max": float(np.abs(a - r).max() / np.abs(r).max()),
            "cos_mean": float(cos.mean()), "cos_min": float(cos.min())}


def measure(gguf: Path, pixels: dict[int, Any], refs: dict[int, dict[str, np.ndarray]],
            threads: int, precision: str = "exact") -> dict[int, dict[str, Any]]:
    from edgevlm.engine.model import NativeModel, find_model_files
    from edgevlm.engine.session import NativeSession

    model = NativeModel(find_model_files(gguf))
    biggest = max(int(np.prod(px.grid_thw)) for px in pixels.values())
    session = NativeSession(model, n_ctx=64, n_threads=threads, n_batch=32,
                            max_patches=biggest)
    session.use_kernels(PRECISIONS[precision])
    out: dict[int, dict[str, Any]] = {}
    for size, px in pixels.items():
        t0 = time.perf_counter()
        features, _ = session.encode_vision(px)
        ms = (time.perf_counter() - t0) * 1e3
        out[size] = scored({"embeds": features.embeddings, "deepstack": features.deepstack},
                           refs[size], ms)
    return out


def row_label(key: str) -> str:
    """``q8_0 fast`` -> ``Q8_0 fast``; the peer's row as it is."""
    head, _, rest = key.partition(" ")
    return key if head == "transformers" else " ".join(filter(None, [head.upper(), rest]))


def markdown(report: dict[str, Any]) -> str:
    lines = [f"# Vision tower accuracy against transformers float32 ({report['date']})", "",
             f"Checkpoint: {report['checkpoint']} (random weights, bf16 safetensors, read as "
             f"float32 by both); {report['threads']} threads; images: 448x448 = the TTFT "
             "request's JPEG (196 merged rows), 256x256 random noise (64 rows).", "",
             "| tower | image | merged rows: rel. Frobenius | cos mean / min | max-abs rel. | "
             "worst DeepStack tap: rel. Frobenius | encode (ms) |",
             "|---|---|---|---|---|---|---|"]
    for vtype, by_size in report["types"].items():
        for size, m in by_size.items():
            g, d = m["merged"], m["deepstack_worst"]
            lines.append(f"| {row_label(vtype)} | {size}x{size} | {g['rel_frobenius']:.2e} | "
                         f"{g['cos_mean']:.6f} / {g['cos_min']:.6f} | {g['rel_max']:.2e} | "
                         f"{d['rel_frobenius']:.2e} | {m['encode_ms']:.0f} |")
    command = " ".join(["bench/vision_accuracy.py", report.get("args", "")]).strip()
    lines += ["", f"Command: `.venv/bin/python {command}`", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--types", default=",".join(TYPES),
                    help=f"vision tower types to compare (default {','.join(TYPES)})")
    ap.add_argument("--precision", default="exact",
                    help="comma-separated: exact (the default arithmetic), fast (default exact)")
    ap.add_argument("--no-peer", dest="peer", action="store_false",
                    help="skip the transformers bf16 row (the engine bench's peer, measured "
                         "the same way)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    ap.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    args = ap.parse_args(argv)
    types = [t.strip() for t in args.types.split(",") if t.strip()]
    unknown = [t for t in types if t not in TYPES]
    if unknown or not types:
        ap.error(f"--types: {', '.join(unknown) or 'empty'} (known: {', '.join(TYPES)})")
    precisions = [p.strip() for p in args.precision.split(",") if p.strip()]
    if not precisions or any(p not in PRECISIONS for p in precisions):
        ap.error(f"--precision: {args.precision!r} (known: {', '.join(PRECISIONS)})")

    from edgevlm.engine.model import NativeModel, find_model_files, model_family
    from edgevlm.vision.preprocess import preprocess_image
    from edgevlm.vision.sizing import pixel_bounds

    checkpoint = ensure_checkpoint(sys.executable)
    ggufs = {t: ensure_f32_tower(checkpoint) if t == "f32"
             else ensure_gguf(sys.executable, checkpoint, BENCH_PAIR[t], False) for t in types}
    model = NativeModel(find_model_files(ggufs[types[0]]))
    family = model_family(model)
    lo, hi = pixel_bounds(family, 1_003_520, None, None)
    pixels = {size: preprocess_image(img, family, lo, hi, model.info["v_image_mean"],
                                     model.info["v_image_std"])
              for size, img in accuracy_images().items()}
    del model
    refs = transformers_features(checkpoint, pixels)
    report: dict[str, Any] = {
        "date": dt.datetime.now().strftime("%Y-%m-%d %H:%M"), "threads": args.threads,
        "checkpoint": display_path(checkpoint), "machine": machine_info(), "repo": repo_state(),
        "args": " ".join(argv if argv is not None else sys.argv[1:]), "types": {}}
    if args.peer:
        peer = transformers_features(checkpoint, pixels, bf16=True)
        report["types"]["transformers bf16"] = {
            size: scored(peer[size], refs[size], peer[size]["encode_ms"]) for size in pixels}
    for t in types:
        for prec in precisions:
            label = t if prec == "exact" else f"{t} fast"
            log(f"encoding with the {label.upper()} tower ({display_path(ggufs[t])})")
            report["types"][label] = measure(ggufs[t], pixels, refs, args.threads, prec)
    md = markdown(report)
    args.results.mkdir(parents=True, exist_ok=True)
    stem = args.results / f"vision-accuracy-{dt.datetime.now():%Y-%m-%d-%H%M}"
    stem.with_suffix(".md").write_text(md)
    stem.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    log(f"wrote {stem}.md and .json")
    print(json.dumps(report) if args.json else md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
