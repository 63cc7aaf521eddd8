#!/usr/bin/env python3
"""Native engine speed on a Qwen3-VL-2B-shaped model, side by side with llama.cpp.

    .venv/bin/python bench/bench_engine.py [--stages engine,ttft,camera,cold,threads] [--runs 5]
        [--threads 2] [--types q8_0,q4_0,bf16] [--ops pp128,pp512,tg64,vit256,vit448]
        [--engines edgevlm,llama.cpp,...] [--stage-type q8_0] [--scaling-threads 1,2]
        [--scaling-ops pp512,tg64,vit448] [--cold-ctx 4096] [--no-cold-cache] [--json]
    .venv/bin/python bench/bench_engine.py --render bench/results/engine-DATE.json  (md + png)

One command does everything, reusing what earlier runs left in ``~/.cache/edgevlm/bench/``
(``EDGEVLM_BENCH_CACHE`` overrides):

1. the random-weight 2B-shaped checkpoint (``tools/make_2b_model.py``; 4.3 GB bf16);
2. ``edgevlm convert`` of it at each type into ``gguf-<type>/{model,mmproj}.gguf``;
   the vision tower is stored as Q8_0 with ``q8_0``, F16 with ``q4_0`` (llama.cpp has no Q4_0
   vision path; F16 is what published mmproj files use) and BF16 with ``bf16``; the K-quant
   mixes (``q4_k_m``, ``q5_k_m``, ``q6_k``, ``q3_k_m``, ``iq4_xs``) with F16; ``lq-<type>``
   (``lq-q4_0``, ``lq-q4_k_m``, ...) is llama.cpp's own ``llama-quantize <TYPE>`` of the BF16
   text file (its mix: e.g. its Q4_0 keeps the output matrix at Q6_K) with the F16 tower;
3. the llama.cpp peer: ``llama-cpp-python`` (pinned below) compiled from source with
   ``CMAKE_ARGS=-DGGML_NATIVE=ON`` into its own venv ``venv-llamacpp`` (plus matplotlib for the
   plot), so the project venv stays clean. The first build takes ~30 min on 2 cores;
4. with ``--engines ...,llama-bench`` / ``...,llama-mtmd``: llama.cpp's own ``llama-bench`` /
   ``llama-mtmd-cli`` built from the same tree by ``tools/llamacpp_tools.py`` (``--isa avx2``:
   pinned to AVX2/FMA/F16C).

Stages (``--stages``, all by default, in this order):

- ``engine``: per ``--types`` type the measurements below;
- ``ttft``: time to first token of a 448×448 JPEG + a 20-token question, edgevlm through
  ``Engine.generate`` (the daemon's path) with an empty vision cache and again with the image
  cached (checked to skip the vision encoder), llama.cpp through its mtmd helpers
  (``stage_ttft.py``);
- ``camera``: the camera-event latency a user feels: a 640×360 JPEG snapshot (quality 70) +
  the daemon's camera prompt -> exactly 40 greedy tokens; edgevlm through ``Engine.generate``
  (engine loaded once) at the daemon's pixel budget and at a per-camera ``max_pixels``,
  llama.cpp as one ``llama-mtmd-cli`` process per run (its load timed and left out)
  (``stage_camera.py``);
- ``cold``: a fresh process loads the pair and answers a short text prompt: wall time from
  spawn and from the load call, resident memory against file sizes + KV cache + 200 MiB, with
  the files in the page cache and evicted from it (``stage_cold.py``, ``cold_start.py``);
- ``threads``: ``--scaling-ops`` at each of ``--scaling-threads`` (``stage_threads.py``).

``ttft``, ``camera``, ``cold`` and ``threads`` use the ``--stage-type`` pair (Q8_0 by default).

In the engine stage, per type, one worker process per engine (``engine_workers.py``) loads
the **same GGUF pair** (each engine in its own process, so its resident memory is its own:
``VmRSS`` after load, ``VmHWM`` at the end) and the parent (``engine_driver.py``) asks them
for one measurement at a time, alternating engines (and which goes first) measurement by
measurement, after one untimed warm-up of each:

- ``pp128`` / ``pp512``: prefill of N random text-token ids from an empty cache (positions
  0..N-1 on all three MRoPE axes), logits of the last token only; tokens/s.
- ``tg64``: 64 single-token decode steps from an empty cache (positions 0..63), full logits
  each step (llama-bench's ``tg64``); tokens/s.
- ``vit256`` / ``vit448``: the vision encoder (ViT + mergers + DeepStack) on a 256×256
  (64 tokens) and a 448×448 (196 tokens) random image, preprocessing excluded; ms.

``--engines ...,llama-bench`` adds llama.cpp's own benchmark tool for the ``ppN`` / ``tgN``
ops, a process per measurement (``engine_llama_bench.py``); ``--engines ...,llama-mtmd`` adds
llama.cpp's own ``llama-mtmd-cli`` for the ``vitS`` ops, a process per measurement on the same
pair and S×S image, its time "mtmd batch encoding done in N ms" from its log
(``engine_llama_mtmd.py``). Both run under ``--isa avx2`` (the bindings cannot).
``--engines ...,transformers`` adds transformers (bf16 safetensors checkpoint, sdpa, torch
threads = --threads) as a third engine in the bf16 rows (slow: ~10 more minutes).
``edgevlm`` runs at the default precision, ``auto`` (``fast`` for K-quant and IQ4 weights,
``exact`` otherwise; the report names what it chose per type); ``--engines
edgevlm,edgevlm-exact,edgevlm-fast,...`` adds edgevlm at each named precision (``fast``: the
prefill and ViT activations rounded as llama.cpp rounds them, where the CPU has kernels for it).

edgevlm runs through ``Engine.load(dir, threads, context)`` and its ``NativeSession``
(``prefill``/``decode``/``encode_vision``), with the daemon's defaults otherwise (KV cache f32,
the default pixel budget's ViT scratch); ``--batch`` sets its prefill batch. llama.cpp runs
through the low-level ``llama_cpp`` bindings (``llama_decode`` with ``n_batch = n_ubatch =
--batch``, its defaults otherwise: f16 KV cache, flash attention ``auto``) and its ``mtmd``
bindings (``mtmd_encode_chunk``; the mtmd warm-up at load is left on, as in llama.cpp's tools).

Every number is the median of ``--runs`` runs (≥ 5 for a quoted table). Ratios are edgevlm /
peer speed pair by pair (> 1: edgevlm faster; for the ViT's ms, the peer's time / edgevlm's),
against each peer that ran the measurement; issue 6's target is 1.0. Results go to
``bench/results/engine-<date>.{json,md,png}`` (the other stages' panels in
``engine-<date>-stages.png``) with machine, versions and load average.
Progress on stderr; the Markdown table (or with ``--json`` the JSON) on stdout.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from pathlib import Path
from typing import Any

import stage_camera
import stage_cold
import stage_threads
import stage_ttft
from engine_common import REPO, cache_root, display_path, log, project_python
from engine_driver import VISION_TYPE, run_type
from engine_report import markdown, plot, write_plot
from engine_setup import (
    LLAMA_CMAKE_ARGS,
    ensure_checkpoint,
    ensure_gguf,
    ensure_llama_venv,
    ensure_tools,
    machine_info,
    repo_state,
    tools_build_name,
)

ALL_OPS = ("pp128", "pp512", "tg64", "vit256", "vit448")
ALL_TYPES = ("q8_0", "q4_0", "bf16")   # the default; also f16, f32 and the K-quant mixes
ALL_STAGES = ("engine", "ttft", "camera", "cold", "threads")
# the engine peers that are llama.cpp's own tools, and the tool each runs
TOOL_OF = {"llama-bench": "llama-bench", "llama-mtmd": stage_camera.MTMD}


def _csv(text: str) -> list[str]:
    return [x for x in text.split(",") if x]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stages", default=",".join(ALL_STAGES),
                    help=f"which stages to run, in this order (default: all of "
                         f"{','.join(ALL_STAGES)})")
    ap.add_argument("--runs", type=int, default=5, help="runs per measurement (median)")
    ap.add_argument("--threads", type=int, default=2,
                    help="threads of the engine, ttft and cold stages")
    ap.add_argument("--types", default=",".join(ALL_TYPES), help="the engine stage's types")
    ap.add_argument("--ops", default=",".join(ALL_OPS),
                    help=f"the engine stage's subset of {','.join(ALL_OPS)} (ppN / tgN / vitS "
                         "also accepted)")
    ap.add_argument("--engines", default="edgevlm,llama.cpp",
                    help="edgevlm (default precision), edgevlm-exact, edgevlm-fast, llama.cpp "
                         "(the bindings), llama-bench (llama.cpp's own tool; prefill and "
                         "decode), llama-mtmd (llama.cpp's own llama-mtmd-cli; the vision "
                         "encoder vitS), transformers (engine stage, bf16 only)")
    ap.add_argument("--isa", default="native", choices=("native", "avx2"),
                    help="native: each engine's best code path for this CPU; avx2: both "
                         "pinned to the AVX2 path on any x86 host (edgevlm with "
                         "EDGEVLM_MAX_CPU_ISA=avx2, llama-bench and llama-mtmd-cli built "
                         "with AVX2/FMA/F16C only; default native)")
    ap.add_argument("--stage-type", default="q8_0",
                    help="the GGUF pair of the ttft, camera, cold and threads stages")
    ap.add_argument("--scaling-threads",
                    default=",".join(map(str, stage_threads.default_threads())),
                    help="thread counts of the threads stage (default: 1, 2, powers of two "
                         "up to the CPU count, and the CPU count)")
    ap.add_argument("--scaling-ops", default=",".join(stage_threads.DEFAULT_OPS),
                    help="measurements of the threads stage")
    ap.add_argument("--cold-ctx", type=int, default=4096,
                    help="context of the cold stage (default: the daemon's model.context)")
    ap.add_argument("--no-cold-cache", dest="cold_cache", action="store_false",
                    help="cold stage: skip the runs with the files evicted from the page cache")
    ap.add_argument("--ctx", type=int, default=1024,
                    help="context of both engines in the engine, ttft and threads stages")
    ap.add_argument("--batch", type=int, default=512,
                    help="prefill batch of both engines (llama.cpp n_batch = n_ubatch)")
    ap.add_argument("--reconvert", action="store_true", help="redo the GGUF conversions")
    ap.add_argument("--json", action="store_true", help="print the JSON report on stdout")
    ap.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    ap.add_argument("--edgevlm-python", default=project_python())
    ap.add_argument("--plot", nargs=2, metavar=("REPORT_JSON", "PNG"), help=argparse.SUPPRESS)
    ap.add_argument("--render", type=Path, metavar="REPORT_JSON",
                    help="only rewrite the .md and .png next to an existing report")
    args = ap.parse_args(argv)
    if args.plot or args.render:
        return args
    args.stages = _csv(args.stages)
    args.types = _csv(args.types) if "engine" in args.stages else []
    args.ops = _csv(args.ops)
    args.engines = _csv(args.engines)
    args.scaling_ops = _csv(args.scaling_ops)
    try:
        args.scaling_threads = [int(n) for n in _csv(args.scaling_threads)]
    except ValueError:
        ap.error("--scaling-threads takes thread counts, e.g. 1,2,4")
    for s in args.stages:
        if s not in ALL_STAGES:
            ap.error(f"unknown stage {s!r}; choose from {','.join(ALL_STAGES)}")
    for t in [*args.types, args.stage_type]:
        if t not in VISION_TYPE:
            ap.error(f"unknown type {t}; choose from {','.join(VISION_TYPE)}")
    if args.isa == "avx2" and (set(args.engines) & {"llama.cpp", "transformers"}
                               or set(args.stages) != {"engine"}):
        ap.error("--isa avx2 pins edgevlm, llama-bench and llama-mtmd in the engine stage; the "
                 "llama.cpp bindings and transformers are built for this CPU: use --stages "
                 "engine --engines edgevlm,llama-bench,llama-mtmd")
    if args.runs < 1:
        ap.error("--runs must be >= 1")
    if any(n < 1 for n in args.scaling_threads) or not args.scaling_threads:
        ap.error("--scaling-threads must be thread counts >= 1")
    n_tokens = [int(o[2:]) for o in [*args.ops, *args.scaling_ops] if o[:2] in ("pp", "tg")]
    if max(n_tokens, default=0) > args.ctx:
        ap.error("a measurement does not fit --ctx")
    return args


def llama_tools(args: argparse.Namespace) -> str:
    """The bin directory of the llama.cpp tools the engine peers run, built as ``--isa`` asks
    (one build directory per variant holds them all), or "" when none is asked for."""
    targets = [TOOL_OF[e] for e in args.engines if e in TOOL_OF]
    return ensure_tools(targets, args.isa) if targets else ""


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.plot:
        plot(json.loads(Path(args.plot[0]).read_text()), Path(args.plot[1]))
        return 0
    if args.render:
        md = markdown(json.loads(args.render.read_text()))
        args.render.with_suffix(".md").write_text(md)
        write_plot(args.render, args.render.with_suffix(".png"))
        print(md)
        return 0

    cache_root().mkdir(parents=True, exist_ok=True)
    loadavg_start = os.getloadavg()
    # the llama.cpp bindings' venv; the camera stage runs llama.cpp's own llama-mtmd-cli
    llama_py = (ensure_llama_venv() if "llama.cpp" in args.engines
                and set(args.stages) - {"camera"} else "")
    if args.isa == "avx2":   # inherited by every worker process
        os.environ["EDGEVLM_MAX_CPU_ISA"] = "avx2"
    args.llama_bin = llama_tools(args)
    args.mtmd_bin = (ensure_tools([stage_camera.MTMD], "native")
                     if "camera" in args.stages and "llama.cpp" in args.engines else "")
    checkpoint = ensure_checkpoint(args.edgevlm_python)
    stage_types = args.stage_type if set(args.stages) - {"engine"} else None
    ggufs = {t: ensure_gguf(args.edgevlm_python, checkpoint, t, args.reconvert)
             for t in dict.fromkeys([*args.types, *([stage_types] if stage_types else [])])}
    started = dt.datetime.now()
    args.results.mkdir(parents=True, exist_ok=True)
    stem = args.results / f"engine-{started.strftime('%Y-%m-%d-%H%M')}"
    json_path = stem.with_suffix(".json")
    reports: list[dict[str, Any]] = []
    stages: dict[str, Any] = {}

    def build_report(complete: bool) -> dict[str, Any]:
        versions: dict[str, str] = {}
        runs = [*reports, *stages.get("threads", {}).get("by_threads", {}).values()]
        for t in runs:
            for engine, e in t["engines"].items():
                versions[engine] = e["version"]
                versions[f"{engine} build"] = e["build"].strip()
        for name, v in stages.get("camera", {}).get("versions", {}).items():
            versions.setdefault(name, v)
        for tool in TOOL_OF:
            if tool in versions:
                versions[tool] += f" ({tools_build_name(args.isa)})"
        if "llama.cpp" in versions:
            versions["llama.cpp"] += f" (built from source, CMAKE_ARGS={LLAMA_CMAKE_ARGS})"
        return {
            "meta": {"date": started.strftime("%Y-%m-%d %H:%M"), "runs": args.runs,
                     "threads": args.threads, "ops": args.ops, "ctx": args.ctx,
                     "batch": args.batch, "stages": args.stages, "isa": args.isa,
                     "loadavg_start": loadavg_start,
                     "loadavg_end": os.getloadavg(), "complete": complete,
                     "duration_s": round((dt.datetime.now() - started).total_seconds()),
                     "checkpoint": display_path(checkpoint), "repo": repo_state()},
            "machine": machine_info(), "versions": versions, "types": reports, **stages}

    def save_partial() -> None:  # a partial report survives an interrupted run
        partial = build_report(complete=False)
        json_path.write_text(json.dumps(partial, indent=2) + "\n")
        stem.with_suffix(".md").write_text(markdown(partial))

    for stage in args.stages:
        log(f"stage {stage}")
        if stage == "engine":
            for t in args.types:
                reports.append(run_type(t, ggufs[t], checkpoint, args, llama_py))
                save_partial()
        elif stage == "ttft":
            stages["ttft"] = stage_ttft.run_ttft(args.stage_type, ggufs[args.stage_type], args,
                                                 llama_py)
        elif stage == "camera":
            stages["camera"] = stage_camera.run_camera(args.stage_type, ggufs[args.stage_type],
                                                       args, llama_py)
        elif stage == "cold":
            stages["cold"] = stage_cold.run_cold(args.stage_type, ggufs[args.stage_type], args,
                                                 llama_py)
        elif stage == "threads":
            stages["threads"] = stage_threads.run_threads(
                args.stage_type, ggufs[args.stage_type], checkpoint, args, llama_py)
        save_partial()
    report = build_report(complete=True)
    json_path.write_text(json.dumps(report, indent=2) + "\n")
    md = markdown(report)
    stem.with_suffix(".md").write_text(md)
    write_plot(json_path, stem.with_suffix(".png"))
    log(f"wrote {json_path}, .md, .png")
    print(json.dumps(report, indent=2) if args.json else md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
