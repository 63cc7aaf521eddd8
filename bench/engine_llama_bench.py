"""The engine bench's ``llama-bench`` peer: llama.cpp's own benchmark tool, run per measurement.

``llama-bench`` (built by ``tools/llamacpp_tools.py`` from the tree llama-cpp-python vendors)
is what llama.cpp users quote. One measurement is one ``llama-bench`` process on the same
``model.gguf``: ``ppN`` = ``-p N -n 0``, ``tgN`` = ``-p 0 -n N``, with ``-r 1`` (the bench
repeats and takes medians itself, alternating with edgevlm), its default untimed warm-up run,
``-t``/``-b``/``-ub`` as the bench's ``--threads``/``--batch``, and llama-bench's defaults
otherwise (f16 KV cache, mmap, its flash-attention default). The time is llama-bench's own
``avg_ns`` (the timed run only, no load).

Resident memory is a process's peak (``ru_maxrss`` of the children): "after load" is the
peak of the first process, which loads the model and decodes one token; "peak" the highest
of every measurement's process. llama-bench has no vision path (``vitS`` ops are refused).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any


class ToolPeer(ABC):
    """What the bench's llama.cpp tool peers (llama-bench, llama-mtmd-cli) share: a process per
    measurement, whose load and memory they report alike. A subclass sets ``engine`` and
    ``version``, the fields ``build``, ``load_ms``, ``settings``, ``load_rss_kib`` and
    ``peak_kib`` while it loads, and answers its measurements in :meth:`measure`."""

    engine: str
    version: str
    build: str
    load_ms: float
    settings: dict[str, Any]
    load_rss_kib: int
    peak_kib: int

    def info(self) -> dict[str, Any]:
        return {"engine": self.engine, "version": self.version, "build": self.build,
                "load_ms": self.load_ms, "settings": self.settings,
                "mem_after_load": {"VmRSS": self.load_rss_kib, "VmHWM": self.load_rss_kib}}

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req["op"]
        if op == "mem":
            return {"VmRSS": self.load_rss_kib, "VmHWM": self.peak_kib}
        return self.measure(op)

    @abstractmethod
    def measure(self, op: str) -> dict[str, Any]:
        """One measurement (``op``: the bench's ``ppN``/``tgN``/``vitS``) in a new process."""


class LlamaBenchWorker(ToolPeer):
    engine = "llama-bench"
    version = "llama-bench (llama-cpp-python 0.3.36 tree)"

    def __init__(self, args: argparse.Namespace) -> None:
        if not args.llama_bin:
            raise ValueError("the llama-bench worker needs --llama-bin DIR")
        self.args = args
        self.exe = Path(args.llama_bin) / "llama-bench"
        self.model = Path(args.gguf_dir) / "model.gguf"
        self.peak_kib = 0
        t0 = time.perf_counter()
        first, self.load_rss_kib = self._run(["-p", "0", "-n", "1", "--no-warmup"])
        self.load_ms = (time.perf_counter() - t0) * 1e3
        self.build = (f"{first.get('cpu_info', '?')}; backends {first.get('backends', '?')}; "
                      f"build {first.get('build_commit', '?')} ({first.get('build_number', '?')})")
        self.settings = {k: first.get(k) for k in ("n_threads", "n_batch", "n_ubatch", "type_k",
                                                   "type_v", "flash_attn", "use_mmap",
                                                   "n_gpu_layers")}

    def _run(self, extra: list[str]) -> tuple[dict[str, Any], int]:
        """One llama-bench process: its single JSON result and its peak RSS (KiB)."""
        cmd = [str(self.exe), "-m", str(self.model), "-t", str(self.args.threads),
               "-b", str(self.args.batch), "-ub", str(self.args.batch), "-r", "1",
               "-o", "json", *extra]
        proc = subprocess.run(cmd, capture_output=True, check=False)
        # this worker's only children are llama-bench processes: the largest peak of any of
        # them so far (the first call: the loading process's own)
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: "
                               f"{proc.stderr.decode(errors='replace')[-1500:]}")
        results = json.loads(proc.stdout)
        if len(results) != 1:
            raise RuntimeError(f"llama-bench gave {len(results)} results, expected 1")
        self.peak_kib = max(self.peak_kib, rss)
        return results[0], rss

    def measure(self, op: str) -> dict[str, Any]:
        if op[:2] not in ("pp", "tg") or not op[2:].isdigit():
            raise ValueError(f"llama-bench has no {op!r} measurement (prefill ppN and "
                             "decode tgN only; the vision encoder is llama-mtmd-cli's)")
        n = int(op[2:])
        flags = ["-p", str(n), "-n", "0"] if op.startswith("pp") else ["-p", "0", "-n", str(n)]
        result, _ = self._run(flags)
        ms = result["avg_ns"] / 1e6
        return {"ms": ms, "tok_s": n / (ms / 1e3), "llama_bench_tok_s": result["avg_ts"]}
