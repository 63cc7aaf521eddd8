"""The parent's side of the engine bench: worker processes and alternating measurements."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from engine_common import PAUSE_S, REPO, cache_root, log, median

# edgevlm: edgevlm at its default precision ("auto": fast for K-quant and IQ4 weights, exact
# otherwise); edgevlm-exact / edgevlm-fast: the named precision ("fast" is llama.cpp's rounding
# of the prefill/ViT activations, where the CPU has kernels for it), compared like edgevlm
# llama-bench: llama.cpp's own benchmark tool (engine_llama_bench.py), prefill and decode only
# llama-mtmd: llama.cpp's own llama-mtmd-cli (engine_llama_mtmd.py), the vision encoder only
ENGINES = ("edgevlm", "edgevlm-exact", "edgevlm-fast", "llama.cpp", "llama-bench", "llama-mtmd",
           "transformers")
OURS = ENGINES[:3]
PEERS = ENGINES[3:]
# each of ours: its key of speed ratios in a type's report (its precision: engine_common.PRECISION)
RATIO_KEY = {"edgevlm": "ratios", "edgevlm-exact": "ratios_exact", "edgevlm-fast": "ratios_fast"}
# the peers that measure some kinds of op only (a ppN / tgN / vitS op's prefix): llama.cpp's
# tools split them between llama-bench (no vision path) and llama-mtmd-cli
OP_KINDS = {"llama-bench": ("pp", "tg"), "llama-mtmd": ("vit",)}
# the peers that run a process per measurement: a warm-up in the worker would carry nothing
# over, and each process warms up itself (llama-bench's warm-up run, mtmd's warm-up at load)
SPAWNING = ("llama-bench", "llama-mtmd")
# the vision tower's storage type next to each text type: F16 where llama.cpp has no vision
# path of the type (Q4_0, the K-quant mixes) - what published mmproj files use
VISION_TYPE = {"q8_0": "q8_0", "q4_0": "f16", "bf16": "bf16", "f16": "f16", "f32": "f32",
               "q4_k_m": "f16", "q5_k_m": "f16", "q6_k": "f16", "q3_k_m": "f16",
               "iq4_xs": "f16"}
# lq-<type>: llama-quantize's own file of that type (engine_setup.py), the F16 tower
VISION_TYPE.update({f"lq-{t}": "f16" for t in ("q4_0", "q8_0", "q4_k_m", "q5_k_m", "q6_k",
                                               "iq4_xs")})
WORKER_SCRIPT = Path(__file__).resolve().parent / "engine_workers.py"


class WorkerProc:
    """The parent's handle on a worker subprocess."""

    def __init__(self, engine: str, python: str, gguf_dir: Path, args: argparse.Namespace,
                 log_path: Path) -> None:
        self.engine = engine
        cmd = [python, str(WORKER_SCRIPT), "--worker", engine.replace(".", ""),
               "--gguf-dir", str(gguf_dir),
               "--threads", str(args.threads), "--ctx", str(args.ctx),
               "--batch", str(args.batch), "--llama-bin", str(getattr(args, "llama_bin", "") or "")]
        env = dict(os.environ)
        self.log_fh = open(log_path, "a")  # noqa: SIM115 - lives as long as the worker
        self.log_fh.write(f"\n===== {time.ctime()} {' '.join(cmd)}\n")
        self.log_fh.flush()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log_fh, text=True, env=env, cwd=str(REPO))
        self.hello = self._read()
        if not self.hello.get("ok"):
            self.close()
            raise RuntimeError(f"{engine} worker failed to start: {self.hello.get('error')} "
                               f"(log: {log_path})")

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            return {"ok": False, "error": f"worker exited with {self.proc.returncode}"}
        result: dict[str, Any] = json.loads(line)
        return result

    def ask(self, op: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op}) + "\n")
        self.proc.stdin.flush()
        res = self._read()
        if not res.get("ok"):
            raise RuntimeError(f"{self.engine} {op}: {res.get('error')}")
        return res

    def close(self) -> None:
        if self.proc.poll() is None and self.proc.stdin is not None:
            try:
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=60)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self.log_fh.close()




def start_workers(engines: list[str], qtype: str, path_of: dict[str, Path],
                  args: argparse.Namespace, llama_py: str, label: str = ""
                  ) -> dict[str, WorkerProc]:
    """One loaded worker per engine (the caller closes them), with progress on stderr."""
    logs = cache_root() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    workers: dict[str, WorkerProc] = {}
    try:
        for engine in engines:
            log(f"{label or qtype}: loading {engine}")
            python = llama_py if engine == "llama.cpp" else args.edgevlm_python
            workers[engine] = WorkerProc(engine, python, path_of[engine], args,
                                         logs / f"{engine}-{qtype}.log")
            hello = workers[engine].hello
            log(f"{label or qtype}: {engine} loaded in {hello['load_ms']:.0f} ms, RSS "
                f"{hello['mem_after_load']['VmRSS'] / 2**20:.2f} GiB")
    except BaseException:
        for w in workers.values():
            w.close()
        raise
    return workers


def alternate(workers: dict[str, WorkerProc], plan: dict[str, list[str]], runs: int,
              label: str) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Every engine's ops of ``plan``, one measurement at a time, engines alternating and
    which one goes first rotating run by run, after one untimed warm-up of each op (decode:
    4 steps are enough). Returns the answers per engine and op, in run order."""
    engines = list(plan)
    ops = list(dict.fromkeys(op for e in engines for op in plan[e]))
    log(f"{label}: untimed warm-up of {', '.join(ops)}")
    for op in ops:
        for engine in engines:
            if op in plan[engine] and engine not in SPAWNING:
                workers[engine].ask("tg4" if op.startswith("tg") else op)
                time.sleep(PAUSE_S)
    samples: dict[str, dict[str, list[dict[str, Any]]]] = {e: {op: [] for op in plan[e]}
                                                           for e in engines}
    for run in range(runs):
        # rotate who goes first, so that no engine always follows the same one
        k = run % len(engines)
        order = engines[k:] + engines[:k]
        for op in ops:
            line = []
            for engine in order:
                if op not in plan[engine]:
                    continue
                res = workers[engine].ask(op)
                samples[engine][op].append(res)
                line.append(f"{engine} {res['tok_s']:.2f} tok/s" if "tok_s" in res
                            else f"{engine} {res['ms']:.0f} ms")
                time.sleep(PAUSE_S)
            log(f"{label} run {run + 1}/{runs} {op}: " + ", ".join(line))
    return samples


def runs_op(engine: str, op: str) -> bool:
    """Whether ``engine`` measures ``op`` (every op, but for the peers of ``OP_KINDS``)."""
    return op.startswith(OP_KINDS.get(engine, ("",)))


def check_image_tokens(out: dict[str, Any], label: str) -> None:
    """Log when the engines' vitS ops encoded different numbers of image tokens (their
    preprocessing sized the same image differently): the times are then not comparable."""
    for op in {op for e in out["engines"].values() for op in e["ops"] if op.startswith("vit")}:
        counts = {e: r["ops"][op]["image_tokens"] for e, r in out["engines"].items()
                  if "image_tokens" in r["ops"].get(op, {})}
        if len(set(counts.values())) > 1:
            log(f"{label}: the engines' {op} image tokens differ: {counts}")


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of every number the runs answered (``ms``, ``cpu_ms``, ``tok_s``, ...),
    every run's wall time, and flags (``cache_hit``) true only when true in every run."""
    entry: dict[str, Any] = {"runs_ms": [round(r["ms"], 2) for r in rows]}
    for key in (rows[0] if rows else {}):
        values = [r[key] for r in rows if key in r]
        if key == "ok" or not values:
            continue
        if all(isinstance(v, bool) for v in values):
            entry[key] = all(values)
        elif all(isinstance(v, int | float) for v in values):
            entry[key] = median([float(v) for v in values])
    return entry


def run_type(qtype: str, gguf: Path, checkpoint: Path, args: argparse.Namespace,
             llama_py: str, label: str = "") -> dict[str, Any]:
    """All measurements of one storage type: a worker per engine, alternating. ``args``
    gives ops, runs, threads, ctx, batch, engines; ``label`` prefixes the progress lines."""
    label = label or qtype
    # transformers has no quantised path: it runs once, next to the bf16 files
    engines = [e for e in ENGINES if e in args.engines and (e != "transformers"
                                                              or qtype == "bf16")]
    workers: dict[str, WorkerProc] = {}
    out: dict[str, Any] = {"type": qtype, "vision_type": VISION_TYPE[qtype],
                           "files_mib": {f.name: round(f.stat().st_size / 2**20, 1)
                                         for f in sorted(gguf.glob("*.gguf"))},
                           "engines": {}}
    try:
        workers = start_workers(engines, qtype, {e: checkpoint if e == "transformers" else gguf
                                                 for e in engines}, args, llama_py, label)
        plan = {e: [op for op in args.ops if runs_op(e, op)] for e in engines}
        samples = alternate(workers, plan, args.runs, label)
        for engine in engines:
            mem = workers[engine].ask("mem")
            hello = workers[engine].hello
            ops = {op: summarise(rows) for op, rows in samples[engine].items()}
            out["engines"][engine] = {
                "version": hello["version"], "build": hello["build"],
                "settings": hello["settings"], "load_ms": hello["load_ms"],
                "rss_after_load_mib": hello["mem_after_load"]["VmRSS"] / 1024,
                "peak_rss_mib": mem["VmHWM"] / 1024, "ops": ops,
                # the vision file's resident pages (edgevlm maps the pair; llama-bench loads
                # the text model only; llama-mtmd reports its processes' peaks)
                "mmproj_rss_mib": mem.get("RssMmproj", 0) / 1024}
    finally:
        for w in workers.values():
            w.close()
    check_image_tokens(out, label)
    # speed ratios edgevlm / peer (> 1: edgevlm faster), pair by pair, under RATIO_KEY
    for mine, key in RATIO_KEY.items():
        out[key] = {}
        if mine not in out["engines"]:
            continue
        ours = out["engines"][mine]["ops"]
        for peer in PEERS:
            if peer in out["engines"]:
                theirs = out["engines"][peer]["ops"]
                out[key][peer] = {op: theirs[op]["ms"] / ours[op]["ms"] for op in args.ops
                                  if op in ours and op in theirs
                                  and ours[op]["ms"] and theirs[op]["ms"]}
    return out
