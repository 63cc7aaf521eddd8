"""Stage ``cold``: a fresh process loads the GGUF pair and answers a short text prompt.

Each start is a new process (``cold_start.py``) that loads the decoder + vision files and
answers a chat-templated prompt with a few greedy tokens. Reported per engine, medians of the
runs: exec → answer (from the parent's spawn, so the interpreter's start-up counts), its
phases (start-up, imports, load, answer) and the load call → answer; resident memory after
the load and after the answer (``VmRSS`` = anonymous + file-backed pages, both shown) against
the issue's budget: file sizes + KV cache (at the context the engine allocates) + 200 MiB.

Page cache: ``warm`` runs follow an untimed start that leaves both files in the page cache
(the normal case on a board whose daemon restarts). ``cold`` runs first evict both files
from this machine's page cache with ``posix_fadvise(POSIX_FADV_DONTNEED)`` (no root needed;
``fincore`` confirms how much stayed resident). In a VM or container the host may still cache
the files below, so ``cold`` is a lower bound on a real first boot.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from engine_common import PAUSE_S, REPO, cache_root, log
from engine_driver import summarise

TARGET_MS = 1500.0  # issue 6: load a 2B Q8_0 pair and answer a text prompt in <= 1.5 s
MEMORY_SLACK_MIB = 200.0  # issue 6: RSS after load <= file sizes + KV cache + 200 MB
COLD_SCRIPT = Path(__file__).resolve().parent / "cold_start.py"
PHASES = ("startup_ms", "import_ms", "load_ms", "answer_ms")


def resident_mib(paths: list[Path]) -> float | None:
    """How much of the files is in the page cache (``fincore``), or None without it."""
    if not shutil.which("fincore"):
        return None
    out = subprocess.run(["fincore", "-b", "-n", "-o", "RES", *map(str, paths)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        return None
    return sum(int(x) for x in out.stdout.split()) / 2**20


def evict(paths: list[Path]) -> None:
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def one_start(engine: str, python: str, gguf: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Spawn one cold start and turn its stamps into phases (ms) and memory (MiB)."""
    cmd = [python, str(COLD_SCRIPT), "--engine", engine.replace(".", ""),
           "--gguf-dir", str(gguf), "--threads", str(args.threads),
           "--ctx", str(args.cold_ctx), "--batch", str(args.batch)]
    logs = cache_root() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / f"cold-{engine}.log", "a") as fh:
        fh.write(f"\n===== {time.ctime()} {' '.join(cmd)}\n")
        fh.flush()
        t_spawn = time.monotonic()
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=fh, text=True,
                              cwd=str(REPO), timeout=900)
    lines = proc.stdout.strip().splitlines()
    res = json.loads(lines[-1]) if lines else {"ok": False,
                                               "error": f"exited with {proc.returncode}"}
    if not res.get("ok"):
        raise RuntimeError(f"{engine} cold start failed: {res.get('error')} "
                           f"(log: {logs / f'cold-{engine}.log'})")
    out: dict[str, Any] = {
        "ms": (res["t_answered"] - t_spawn) * 1e3,
        "load_to_answer_ms": (res["t_answered"] - res["t_imported"]) * 1e3,
        "startup_ms": (res["t_main"] - t_spawn) * 1e3,
        "import_ms": (res["t_imported"] - res["t_main"]) * 1e3,
        "load_ms": (res["t_loaded"] - res["t_imported"]) * 1e3,
        "answer_ms": (res["t_answered"] - res["t_loaded"]) * 1e3,
        "prompt_tokens": res["prompt_tokens"], "answer_tokens": res["answer_tokens"]}
    for when in ("load", "answer"):
        mem = res[f"mem_after_{when}_kib"]
        out[f"rss_{when}_mib"] = mem["VmRSS"] / 1024
        out[f"anon_{when}_mib"] = mem["RssAnon"] / 1024
        out[f"file_{when}_mib"] = mem["RssFile"] / 1024
    out["kv"] = res["kv"]
    return out


def kv_mib(kv: dict[str, Any], shape: dict[str, Any]) -> float | None:
    """K and V of every layer at the allocated context; ``shape`` gives the layer/head
    sizes where the engine's answer did not (llama.cpp: edgevlm's, read from the same file)."""
    dims = {**shape, **kv}
    if dims.get("bytes_per_value") is None or "n_layer" not in dims:
        return None
    return (2 * dims["n_layer"] * dims["n_ctx"] * dims["n_head_kv"] * dims["head_dim"]
            * dims["bytes_per_value"] / 2**20)


def run_cold(qtype: str, gguf: Path, args: argparse.Namespace, llama_py: str
             ) -> dict[str, Any]:
    engines = [e for e in ("edgevlm", "llama.cpp") if e in args.engines]
    python = {e: llama_py if e == "llama.cpp" else args.edgevlm_python for e in engines}
    files = sorted(gguf.glob("*.gguf"))
    files_mib = sum(f.stat().st_size for f in files) / 2**20
    modes = ["warm", "cold"] if args.cold_cache else ["warm"]
    rows: dict[str, dict[str, list[dict[str, Any]]]] = {e: {m: [] for m in modes}
                                                        for e in engines}
    for engine in engines:  # untimed: the files into the page cache, the code too
        log(f"cold {qtype}: warm-up start of {engine}")
        one_start(engine, python[engine], gguf, args)
    for mode in modes:
        for run in range(args.runs):
            k = run % len(engines)
            line = []
            for engine in engines[k:] + engines[:k]:
                if mode == "cold":
                    evict(files)
                cached = resident_mib(files)
                res = one_start(engine, python[engine], gguf, args)
                res["page_cache_before_mib"] = cached
                rows[engine][mode].append(res)
                line.append(f"{engine} {res['ms']:.0f} ms (load {res['load_ms']:.0f}, "
                            f"RSS {res['rss_load_mib']:.0f} MiB)")
                time.sleep(PAUSE_S)
            log(f"cold {qtype} {mode} cache, run {run + 1}/{args.runs}: " + ", ".join(line))
    out: dict[str, Any] = {"type": qtype, "threads": args.threads, "ctx": args.cold_ctx,
                           "files_mib": round(files_mib, 1), "target_ms": TARGET_MS,
                           "memory_slack_mib": MEMORY_SLACK_MIB, "modes": modes,
                           "engines": {}}
    shape = rows["edgevlm"]["warm"][0]["kv"] if "edgevlm" in rows else {}
    for engine in engines:
        kv = kv_mib(rows[engine]["warm"][0]["kv"], shape)
        out["engines"][engine] = {
            "kv_mib": kv, "kv": rows[engine]["warm"][0]["kv"],
            "budget_mib": None if kv is None else files_mib + kv + MEMORY_SLACK_MIB,
            **{mode: summarise(rows[engine][mode]) for mode in modes}}
    return out


def markdown(c: dict[str, Any]) -> list[str]:
    lines = [f"#### Cold start ({c['type']} pair, {c['threads']} threads, context {c['ctx']})",
             "", f"A fresh process loads both files ({c['files_mib']:.0f} MiB) and answers a "
             "short chat prompt with a few greedy tokens. exec → answer counts from the "
             "parent's spawn (interpreter start-up included); load → answer from the engine's "
             "load call. warm: files in the page cache; cold: both files evicted from this "
             "machine's page cache first (`POSIX_FADV_DONTNEED`).", "",
             "| engine | page cache | exec → answer (ms) | start-up / imports / load / answer "
             "(ms) | load → answer (ms) | RSS after load (anon + file) | RSS after answer "
             "(anon + file) | budget (files + KV + 200) | met? (time, memory) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for engine, e in c["engines"].items():
        budget = (f"{e['budget_mib']:.0f} MiB (KV {e['kv_mib']:.0f})" if e["budget_mib"]
                  else "—")
        for mode in c["modes"]:
            r = e[mode]
            phases = " / ".join(f"{r[p]:.0f}" for p in PHASES)
            lines.append(
                f"| {engine} | {mode} | {r['ms']:.0f} | {phases} | {r['load_to_answer_ms']:.0f}"
                f" | {r['rss_load_mib']:.0f} ({r['anon_load_mib']:.0f} + "
                f"{r['file_load_mib']:.0f}) MiB | {r['rss_answer_mib']:.0f} "
                f"({r['anon_answer_mib']:.0f} + {r['file_answer_mib']:.0f}) MiB | {budget} | "
                f"{_met(r['ms'] <= c['target_ms'])}, "
                f"{_met(r['rss_load_mib'] <= e['budget_mib']) if e['budget_mib'] else '—'} |")
    lines += ["", f"Targets: ≤ {c['target_ms']:.0f} ms; RSS after load ≤ budget. MiB = 2^20 "
              "bytes. llama.cpp: mtmd warm-up off (its fastest start), f16 KV cache; edgevlm: "
              "Engine defaults (f32 KV cache, weights memory-mapped and paged in on use).", ""]
    return lines


def _met(ok: bool) -> str:
    return "yes" if ok else "**no**"


def draw(ax: Any, c: dict[str, Any]) -> None:
    labels = []
    colors = ("#c7c7c7", "#9467bd", "#1f77b4", "#2ca02c")
    bars = [(f"{engine}\n{mode}", e[mode]) for engine, e in c["engines"].items()
            for mode in c["modes"]]
    for i, (label, r) in enumerate(bars):
        labels.append(label)
        bottom = 0.0
        for phase, color in zip(PHASES, colors, strict=True):
            ax.bar(i, r[phase], bottom=bottom, color=color,
                   label=phase.removesuffix("_ms") if i == 0 else None)
            bottom += r[phase]
    ax.axhline(c["target_ms"], color="red", lw=0.8, ls="--", label="target")
    ax.set_xticks(range(len(labels)), labels, fontsize=7)
    ax.set_title(f"cold start, {c['type']} pair (ms) — lower is better", fontsize=8)
    ax.legend(fontsize=6)
    ax.grid(axis="y", alpha=0.3)
