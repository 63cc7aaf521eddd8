"""Stage ``threads``: thread scaling of prefill, decode and the ViT.

The engine stage's measurements (``--scaling-ops``, default pp512, tg64, vit448) at each
thread count of ``--scaling-threads`` (default 1, 2 and every further power of two up to
``os.cpu_count()``, plus the count itself), on one storage type; per thread count a fresh
worker per engine with ``--threads`` set to it, engines alternating as in the engine stage.
"""

from __future__ import annotations

import argparse
import copy
import os
from pathlib import Path
from typing import Any

from engine_common import op_fmt, op_label, op_value
from engine_driver import run_type

DEFAULT_OPS = ("pp512", "tg64", "vit448")


def default_threads(cpus: int | None = None) -> list[int]:
    cpus = cpus or os.cpu_count() or 2
    counts = [1, 2]
    while counts[-1] * 2 < cpus:
        counts.append(counts[-1] * 2)
    if cpus > counts[-1]:
        counts.append(cpus)
    return counts


def run_threads(qtype: str, gguf: Path, checkpoint: Path, args: argparse.Namespace,
                llama_py: str) -> dict[str, Any]:
    by_threads: dict[str, Any] = {}
    for n in args.scaling_threads:
        sub = copy.copy(args)
        sub.threads, sub.ops = n, args.scaling_ops
        sub.engines = [e for e in args.engines if e != "transformers"]
        by_threads[str(n)] = run_type(qtype, gguf, checkpoint, sub, llama_py,
                                      label=f"threads {qtype} ×{n}")
    return {"type": qtype, "ops": list(args.scaling_ops), "threads": args.scaling_threads,
            "by_threads": by_threads}


def series(s: dict[str, Any], engine: str, op: str) -> list[float | None]:
    return [op_value(s["by_threads"][str(n)]["engines"].get(engine, {}).get("ops", {}).get(op),
                   op) for n in s["threads"]]


def markdown(s: dict[str, Any]) -> list[str]:
    engines = [e for e in ("edgevlm", "llama.cpp")
               if any(e in s["by_threads"][str(n)]["engines"] for n in s["threads"])]
    head = "| measurement | threads |" + "".join(f" {e} | {e} speed-up |" for e in engines)
    lines = [f"#### Thread scaling ({s['type']})", "", head + " edgevlm / llama.cpp |",
             "|---|---|" + "---|---|" * len(engines) + "---|"]
    for op in s["ops"]:
        base = {e: series(s, e, op)[0] for e in engines}
        for n in s["threads"]:
            t = s["by_threads"][str(n)]
            row = f"| {op_label(op)} | {n} |"
            for e in engines:
                entry = t["engines"].get(e, {}).get("ops", {}).get(op)
                v, b = op_value(entry, op), base[e]
                speedup = "" if v is None or not b else (
                    f"{b / v:.2f}×" if op.startswith("vit") else f"{v / b:.2f}×")
                row += f" {op_fmt(entry, op)} | {speedup} |"
            r = t.get("ratios", {}).get("llama.cpp", {}).get(op)
            lines.append(row + (f" {r:.2f} |" if r is not None else " |"))
    lines += ["", "Speed-up: against the same engine at the first thread count; the ratio is "
              "a speed ratio (> 1: edgevlm faster).", ""]
    return lines


def draw(axes: list[Any], s: dict[str, Any]) -> None:
    colors = {"edgevlm": "#1f77b4", "llama.cpp": "#ff7f0e"}
    for ax, op in zip(axes, s["ops"], strict=True):
        for engine, color in colors.items():
            ys = series(s, engine, op)
            pts = [(n, y) for n, y in zip(s["threads"], ys, strict=True) if y is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=color,
                        label=engine)
        ax.set_xticks(s["threads"])
        ax.set_xlabel("threads", fontsize=7)
        ax.set_title(f"{op_label(op)} vs threads, {s['type']}"
                     + (" — lower is better" if op.startswith("vit") else ""), fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
