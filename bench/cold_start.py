#!/usr/bin/env python3
"""One cold start, in a fresh process: load a GGUF pair, answer a short text prompt, report.

    python bench/cold_start.py --engine edgevlm|llamacpp --gguf-dir DIR --threads N --ctx N
        --batch N

Prints one JSON line on stdout: ``time.monotonic()`` stamps (CLOCK_MONOTONIC, the same clock
as the parent's, so the parent adds the interpreter's start-up before ``t_main``) at the
script's first line, after the engine's imports, after the load (decoder + vision file,
session / context) and after the answer; resident memory (``/proc/self/status``) after the
load and after the answer; the prompt and answer lengths and the KV cache's shape. The
engine code is the bench worker's (:mod:`engine_workers`), so both stages load alike;
llama.cpp's mtmd warm-up (an encode of a 1472×1472 dummy image) is off here, its fastest
start.
"""

from __future__ import annotations

import time

T_MAIN = time.monotonic()

import argparse  # noqa: E402 - after the first time stamp
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from engine_common import COLD_ANSWER_TOKENS, COLD_PROMPT, rss_kib  # noqa: E402


def cold_start(args: argparse.Namespace) -> dict[str, Any]:
    if args.engine == "edgevlm":
        import edgevlm.engine  # noqa: F401 - timed as the import phase
    else:
        import llama_cpp  # noqa: F401
        from llama_cpp import mtmd_cpp  # noqa: F401
    t_imported = time.monotonic()
    from engine_workers import WORKERS

    args.mtmd_warmup = False
    worker = WORKERS[args.engine](args)
    t_loaded = time.monotonic()
    mem_load = rss_kib()
    answer = worker.answer(COLD_PROMPT, COLD_ANSWER_TOKENS)
    t_answered = time.monotonic()
    return {"t_main": T_MAIN, "t_imported": t_imported, "t_loaded": t_loaded,
            "t_answered": t_answered, "engine_load_ms": worker.load_ms,
            "mem_after_load_kib": mem_load, "mem_after_answer_kib": rss_kib(), **answer}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engine", choices=("edgevlm", "llamacpp"), required=True)
    ap.add_argument("--gguf-dir", required=True, type=Path)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--ctx", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    args = ap.parse_args(argv)
    proto = os.fdopen(os.dup(1), "w", buffering=1)  # fd 1 -> stderr: native prints stay off
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        result: dict[str, Any] = {"ok": True, **cold_start(args)}
    except Exception as exc:  # reported to the parent, which fails the stage
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    proto.write(json.dumps(result) + "\n")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
