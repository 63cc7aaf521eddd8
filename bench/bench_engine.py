#!/usr/bin/env python3
"""Native engine speed on a Qwen3-VL-2B-shaped model, side by side with llama.cpp.

    .venv/bin/python bench/bench_engine.py [--types q8_0,q4_0,bf16] [--runs 5] [--threads 2]
        [--json] [--ops pp128,pp512,tg64,vit256,vit448] [--engines edgevlm,llama.cpp,...]
    .venv/bin/python bench/bench_engine.py --render bench/results/engine-DATE.json  (md + png)

One command does everything, reusing what earlier runs left in ``~/.cache/edgevlm/bench/``
(``EDGEVLM_BENCH_CACHE`` overrides):

1. the random-weight 2B-shaped checkpoint (``tools/make_2b_model.py``; 4.3 GB bf16);
2. ``edgevlm convert`` of it at each type into ``gguf-<type>/{model,mmproj}.gguf``;
   the vision tower is stored as Q8_0 with ``q8_0``, F16 with ``q4_0`` (llama.cpp has no Q4_0
   vision path; F16 is what published mmproj files use) and BF16 with ``bf16``;
3. the llama.cpp peer: ``llama-cpp-python`` (pinned below) compiled from source with
   ``CMAKE_ARGS=-DGGML_NATIVE=ON`` into its own venv ``venv-llamacpp`` (plus matplotlib for the
   plot), so the project venv stays clean. The first build takes ~30 min on 2 cores.

Then, per type, one worker process per engine loads the **same GGUF pair** (each engine in its
own process, so its resident memory is its own: ``VmRSS`` after load, ``VmHWM`` at the end) and
the parent asks them for one measurement at a time, alternating engines (and which goes first)
measurement by measurement, after one untimed warm-up of each:

- ``pp128`` / ``pp512``: prefill of N random text-token ids from an empty cache (positions
  0..N-1 on all three MRoPE axes), logits of the last token only; tokens/s.
- ``tg64``: 64 single-token decode steps from an empty cache (positions 0..63), full logits
  each step (llama-bench's ``tg64``); tokens/s.
- ``vit256`` / ``vit448``: the vision encoder (ViT + mergers + DeepStack) on a 256×256
  (64 tokens) and a 448×448 (196 tokens) random image, preprocessing excluded; ms.

``--engines ...,transformers`` adds transformers (bf16 safetensors checkpoint, sdpa, torch
threads = --threads) as a third engine in the bf16 rows (slow: ~10 more minutes).

edgevlm runs through ``Engine.load(dir, threads, context)`` and its ``NativeSession``
(``prefill``/``decode``/``encode_vision``), with the daemon's defaults otherwise (KV cache f32,
the default pixel budget's ViT scratch); ``--batch`` sets its prefill batch. llama.cpp runs
through the low-level ``llama_cpp`` bindings (``llama_decode`` with ``n_batch = n_ubatch =
--batch``, its defaults otherwise: f16 KV cache, flash attention ``auto``) and its ``mtmd``
bindings (``mtmd_encode_chunk``; the mtmd warm-up at load is left on, as in llama.cpp's tools).

Every number is the median of ``--runs`` runs (≥ 5 for a quoted table). Ratios are edgevlm /
llama.cpp speed pair by pair (> 1: edgevlm faster); the issue's floor is 0.5. Results go to
``bench/results/engine-<date>.{json,md,png}`` with machine, versions and load average.
Progress on stderr; the Markdown table (or with ``--json`` the JSON) on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
LLAMA_CPP_PYTHON_VERSION = "0.3.36"
LLAMA_CMAKE_ARGS = "-DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
ALL_OPS = ("pp128", "pp512", "tg64", "vit256", "vit448")
ALL_TYPES = ("q8_0", "q4_0", "bf16")
VISION_TYPE = {"q8_0": "q8_0", "q4_0": "f16", "bf16": "bf16", "f16": "f16", "f32": "f32"}
ENGINES = ("edgevlm", "llama.cpp", "transformers")
PEERS = ENGINES[1:]
TOKEN_SEED = 1234
N_TEXT_TOKENS = 151643  # random ids are drawn from the BPE part of the vocabulary
PAUSE_S = 0.3  # between measurements: lets the other engine's spinning threads go to sleep


def cache_root() -> Path:
    base = os.environ.get("EDGEVLM_BENCH_CACHE")
    return Path(base) if base else Path.home() / ".cache" / "edgevlm" / "bench"


def display_path(path: Path) -> str:
    """A path for the report: under the home directory as ``~/...`` (no machine paths)."""
    try:
        return "~/" + str(Path(path).resolve().relative_to(Path.home().resolve()))
    except ValueError:
        return Path(path).name


def log(msg: str) -> None:
    stamp = time.strftime("%H:%M:%S")
    print(f"[bench_engine {stamp}] {msg}", file=sys.stderr, flush=True)


def rss_kib() -> dict[str, int]:
    out: dict[str, int] = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
    return out


def random_tokens(n: int) -> list[int]:
    import random

    rng = random.Random(TOKEN_SEED + n)
    return [rng.randrange(N_TEXT_TOKENS) for _ in range(n)]


def random_image(size: int) -> Any:
    import numpy as np

    rng = np.random.default_rng(size)
    return rng.integers(0, 256, (size, size, 3), dtype=np.uint8)


# =============================================================================== workers
# A worker loads one engine on one GGUF pair, then answers JSON requests on stdin, one line
# each, on a private copy of stdout (fd 1 itself is pointed at stderr so that whatever the
# native code prints cannot corrupt the protocol).

class _Worker:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self._tokens: dict[int, list[int]] = {}

    def tokens(self, n: int) -> list[int]:
        if n not in self._tokens:
            self._tokens[n] = random_tokens(n)
        return self._tokens[n]

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req["op"]
        if op == "mem":
            return rss_kib()
        if op.startswith("pp"):
            return self._timed(lambda: self.prefill(self.tokens(int(op[2:]))), int(op[2:]))
        if op.startswith("tg"):
            return self._timed(lambda: self.decode(self.tokens(int(op[2:]))), int(op[2:]))
        if op.startswith("vit"):
            n_tokens = self.prepare_image(int(op[3:]))
            res = self._timed(lambda: self.encode_image(int(op[3:])), 0)
            res["image_tokens"] = n_tokens
            return res
        raise ValueError(f"unknown op {op!r}")

    @staticmethod
    def _timed(fn: Any, n: int) -> dict[str, Any]:
        cpu0, t0 = time.process_time(), time.perf_counter()
        fn()
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        out = {"ms": wall * 1e3, "cpu_ms": cpu * 1e3}
        if n:
            out["tok_s"] = n / wall
        return out

    # subclasses: info(), prefill(tokens), decode(tokens), prepare_image(size), encode_image(size)


class _EdgevlmWorker(_Worker):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        import numpy as np

        from edgevlm.engine import Engine
        from edgevlm.engine.native import ffi, lib

        self.np = np
        t0 = time.perf_counter()
        self.engine = Engine.load(args.gguf_dir, threads=args.threads, context=args.ctx,
                                  batch=args.batch)
        self.load_ms = (time.perf_counter() - t0) * 1e3
        self.session = self.engine.session
        self.logits = np.empty(self.session.n_vocab, dtype=np.float32)
        self.pixels: dict[int, Any] = {}
        self.build = ffi.string(lib.edgevlm_build_info()).decode()

    def info(self) -> dict[str, Any]:
        import edgevlm

        return {"engine": "edgevlm", "version": getattr(edgevlm, "__version__", "?"),
                "build": self.build, "load_ms": self.load_ms, "python": sys.version.split()[0],
                "settings": {"threads": self.args.threads, "n_ctx": self.args.ctx,
                             "n_batch": self.args.batch, "kv": "f32 (Engine default)",
                             "max_patches": self.session.max_patches}}

    def prefill(self, tokens: list[int]) -> None:
        from edgevlm.engine.prompt import PromptInputs

        np = self.np
        n = len(tokens)
        pos = np.ascontiguousarray(np.broadcast_to(np.arange(n, dtype=np.int32), (3, n)))
        prompt = PromptInputs(np.asarray(tokens, dtype=np.int32), pos,
                              np.full(n, -1, dtype=np.int32),
                              np.zeros((0, self.session.n_embd), dtype=np.float32), None, 0, 0)
        self.session.reset()
        self.session.prefill(prompt, 1)

    def decode(self, tokens: list[int]) -> None:
        self.session.reset()
        for i, tok in enumerate(tokens):
            self.session.decode(tok, i, self.logits)

    def prepare_image(self, size: int) -> int:
        if size not in self.pixels:
            from PIL import Image

            from edgevlm.vision.preprocess import preprocess_image
            from edgevlm.vision.sizing import pixel_bounds

            eng = self.engine
            lo, hi = pixel_bounds(eng.family, eng.max_pixels, None, None)
            self.pixels[size] = preprocess_image(
                Image.fromarray(random_image(size)), eng.family, lo, hi,
                eng.facts.image_mean, eng.facts.image_std)
        gt, gh, gw = self.pixels[size].grid_thw
        return int(gt * gh * gw // 4)

    def encode_image(self, size: int) -> None:
        self.session.encode_vision(self.pixels[size])


class _LlamaWorker(_Worker):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        import ctypes

        import llama_cpp as llama
        from llama_cpp import mtmd_cpp as mtmd

        self.llama, self.mtmd, self.ctypes = llama, mtmd, ctypes
        d = Path(args.gguf_dir)
        t0 = time.perf_counter()
        llama.llama_backend_init()
        mp = llama.llama_model_default_params()
        mp.n_gpu_layers = 0
        self.model = llama.llama_model_load_from_file(str(d / "model.gguf").encode(), mp)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {d / 'model.gguf'}")
        cp = llama.llama_context_default_params()
        cp.n_ctx = args.ctx
        cp.n_batch = args.batch
        cp.n_ubatch = args.batch
        cp.n_threads = args.threads
        cp.n_threads_batch = args.threads
        self.ctx = llama.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise RuntimeError("llama_init_from_model failed")
        self.cparams = {"n_ctx": llama.llama_n_ctx(self.ctx), "n_batch": args.batch,
                        "n_ubatch": args.batch, "threads": args.threads,
                        "flash_attn_type": int(cp.flash_attn_type),
                        "type_k": int(cp.type_k), "type_v": int(cp.type_v)}
        self.mem = llama.llama_get_memory(self.ctx)
        self.batch = llama.llama_batch_init(max(args.batch, 1), 0, 1)
        mparams = mtmd.mtmd_context_params_default()
        mparams.use_gpu = False
        mparams.n_threads = args.threads
        mparams.print_timings = False
        self.mctx = mtmd.mtmd_init_from_file(str(d / "mmproj.gguf").encode(), self.model, mparams)
        if not self.mctx:
            raise RuntimeError(f"mtmd could not load {d / 'mmproj.gguf'}")
        self.load_ms = (time.perf_counter() - t0) * 1e3
        self.chunks: dict[int, Any] = {}
        self._keep: list[Any] = []

    def info(self) -> dict[str, Any]:
        llama = self.llama
        return {"engine": "llama.cpp", "version": f"llama-cpp-python {llama.__version__}",
                "build": llama.llama_print_system_info().decode(errors="replace"),
                "load_ms": self.load_ms, "python": sys.version.split()[0],
                "settings": self.cparams}

    def _run(self, tokens: list[int], start: int) -> None:
        llama, b = self.llama, self.batch
        n = len(tokens)
        b.n_tokens = n
        for i, tok in enumerate(tokens):
            b.token[i] = tok
            b.pos[i] = start + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = i == n - 1
        rc = llama.llama_decode(self.ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")
        llama.llama_synchronize(self.ctx)

    def prefill(self, tokens: list[int]) -> None:
        self.llama.llama_memory_clear(self.mem, True)
        for c0 in range(0, len(tokens), self.args.batch):
            self._run(tokens[c0:c0 + self.args.batch], c0)

    def decode(self, tokens: list[int]) -> None:
        self.llama.llama_memory_clear(self.mem, True)
        for i, tok in enumerate(tokens):
            self._run([tok], i)

    def prepare_image(self, size: int) -> int:
        mtmd, ctypes = self.mtmd, self.ctypes
        if size not in self.chunks:
            rgb = random_image(size).tobytes()
            buf = (ctypes.c_ubyte * len(rgb)).from_buffer_copy(rgb)
            bitmap = mtmd.mtmd_bitmap_init(size, size, buf)
            chunks = mtmd.mtmd_input_chunks_init()
            text = mtmd.mtmd_input_text()
            text.text = mtmd.mtmd_default_marker()
            text.text_len = len(text.text) if hasattr(text, "text_len") else 0
            text.add_special = False
            text.parse_special = True
            bitmaps = (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap)
            rc = mtmd.mtmd_tokenize(self.mctx, chunks, ctypes.byref(text), bitmaps, 1)
            if rc != 0:
                raise RuntimeError(f"mtmd_tokenize returned {rc}")
            image_chunk = None
            for i in range(mtmd.mtmd_input_chunks_size(chunks)):
                chunk = mtmd.mtmd_input_chunks_get(chunks, i)
                if mtmd.mtmd_input_chunk_get_type(chunk) == mtmd.MTMD_INPUT_CHUNK_TYPE_IMAGE:
                    image_chunk = chunk
            if image_chunk is None:
                raise RuntimeError("mtmd_tokenize produced no image chunk")
            self._keep += [buf, bitmap, chunks, text, bitmaps]
            self.chunks[size] = image_chunk
        return int(mtmd.mtmd_input_chunk_get_n_tokens(self.chunks[size]))

    def encode_image(self, size: int) -> None:
        rc = self.mtmd.mtmd_encode_chunk(self.mctx, self.chunks[size])
        if rc != 0:
            raise RuntimeError(f"mtmd_encode_chunk returned {rc}")


class _TransformersWorker(_Worker):
    """transformers on the bf16 safetensors checkpoint (sdpa attention, ``torch`` threads =
    --threads): the text model with a ``DynamicCache`` + ``lm_head`` on the last position, and
    the vision tower on the same preprocessed pixels as edgevlm."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        import torch
        from transformers import Qwen3VLForConditionalGeneration

        torch.set_num_threads(args.threads)
        self.torch = torch
        t0 = time.perf_counter()
        self.model = Qwen3VLForConditionalGeneration.from_pretrained(
            args.gguf_dir, dtype=torch.bfloat16, attn_implementation="sdpa").eval()
        self.load_ms = (time.perf_counter() - t0) * 1e3
        self.lm = self.model.model.language_model
        self.pixels: dict[int, Any] = {}

    def info(self) -> dict[str, Any]:
        import transformers

        return {"engine": "transformers", "version": f"transformers {transformers.__version__}",
                "build": f"torch {self.torch.__version__}, bf16, sdpa",
                "load_ms": self.load_ms, "python": sys.version.split()[0],
                "settings": {"threads": self.args.threads, "dtype": "bfloat16",
                             "attn": "sdpa", "weights": "safetensors checkpoint"}}

    def _forward(self, ids: list[int], cache: Any) -> Any:
        torch = self.torch
        x = torch.tensor([ids], dtype=torch.long)
        h = self.lm(input_ids=x, cache=cache, use_cache=True).last_hidden_state
        return self.model.lm_head(h[:, -1:])

    def prefill(self, tokens: list[int]) -> None:
        from transformers import DynamicCache

        with self.torch.inference_mode():
            self._forward(tokens, DynamicCache(config=self.lm.config))

    def decode(self, tokens: list[int]) -> None:
        from transformers import DynamicCache

        with self.torch.inference_mode():
            cache = DynamicCache(config=self.lm.config)
            for tok in tokens:
                self._forward([tok], cache)

    def prepare_image(self, size: int) -> int:
        if size not in self.pixels:
            from PIL import Image

            from edgevlm.vision.preprocess import preprocess_image
            from edgevlm.vision.sizing import get_family

            px = preprocess_image(Image.fromarray(random_image(size)), get_family("qwen3-vl"))
            self.pixels[size] = (
                self.torch.from_numpy(px.pixel_values).to(self.torch.bfloat16),
                self.torch.tensor([list(px.grid_thw)], dtype=self.torch.long))
        grid = self.pixels[size][1][0]
        return int(grid.prod()) // 4

    def encode_image(self, size: int) -> None:
        values, grid = self.pixels[size]
        with self.torch.inference_mode():
            self.model.model.visual(values, grid_thw=grid)


WORKERS = {"edgevlm": _EdgevlmWorker, "llamacpp": _LlamaWorker,
           "transformers": _TransformersWorker}


def worker_main(args: argparse.Namespace) -> int:
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        worker: _Worker = WORKERS[args.worker](args)
        hello = {"ok": True, **worker.info(), "mem_after_load": rss_kib()}  # type: ignore[attr-defined]
    except Exception as exc:  # reported to the parent, which decides
        proto.write(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"}) + "\n")
        return 1
    proto.write(json.dumps(hello) + "\n")
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("op") == "quit":
            break
        try:
            proto.write(json.dumps({"ok": True, **worker.handle(req)}) + "\n")
        except Exception as exc:
            proto.write(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
                        + "\n")
    return 0


class WorkerProc:
    """The parent's handle on a worker subprocess."""

    def __init__(self, engine: str, python: str, gguf_dir: Path, args: argparse.Namespace,
                 log_path: Path) -> None:
        self.engine = engine
        cmd = [python, str(Path(__file__).resolve()), "--worker", engine.replace(".", ""),
               "--gguf-dir", str(gguf_dir),
               "--threads", str(args.threads), "--ctx", str(args.ctx),
               "--batch", str(args.batch)]
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


# =============================================================================== setup

def project_python() -> str:
    venv = REPO / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def llama_python() -> Path:
    return cache_root() / "venv-llamacpp" / "bin" / "python"


def ensure_llama_venv() -> str:
    """The bench venv with llama-cpp-python built from source (native flags) + matplotlib."""
    py = llama_python()
    probe = ("import llama_cpp, matplotlib; from llama_cpp import mtmd_cpp; "
             "print(llama_cpp.__version__)")
    if py.exists():
        out = subprocess.run([str(py), "-c", probe], capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.strip() == LLAMA_CPP_PYTHON_VERSION:
            return str(py)
    venv = py.parent.parent
    log(f"building llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} from source into {venv} "
        f"(CMAKE_ARGS={LLAMA_CMAKE_ARGS}); ~30 min on 2 cores")
    base = getattr(sys, "_base_executable", sys.executable)
    if not py.exists():
        subprocess.run([base, "-m", "venv", str(venv)], check=True)
    env = {**os.environ, "CMAKE_ARGS": LLAMA_CMAKE_ARGS,
           "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 2)}
    build_log = cache_root() / "build-llamacpp.log"
    with open(build_log, "a") as fh:
        subprocess.run([str(py), "-m", "pip", "install", "--no-binary", "llama-cpp-python",
                        f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}", "numpy", "pillow",
                        "matplotlib"], check=True, env=env, stdout=fh, stderr=subprocess.STDOUT)
    return str(py)


def ensure_checkpoint(python: str) -> Path:
    sys.path.insert(0, str(REPO / "tools"))
    from make_2b_model import default_dir, is_complete  # type: ignore[import-not-found]

    out = default_dir()
    if not is_complete(out):
        log(f"building the 2B-shaped checkpoint into {out} (~1-2 min, ~5 GB RAM)")
        subprocess.run([python, str(REPO / "tools" / "make_2b_model.py"), str(out)],
                       check=True, stdout=subprocess.DEVNULL)
    return out


def ensure_gguf(python: str, checkpoint: Path, qtype: str, reconvert: bool) -> Path:
    out = cache_root() / f"gguf-{qtype}"
    marker = out / ".complete"
    if marker.is_file() and not reconvert:
        return out
    marker.unlink(missing_ok=True)
    vtype = VISION_TYPE[qtype]
    log(f"converting to {qtype} (vision {vtype}) into {out}")
    t0 = time.perf_counter()
    subprocess.run([python, "-m", "edgevlm.convert.cli", str(checkpoint), "-o", str(out),
                    "--type", qtype, "--vision-type", vtype, "-q"], check=True, cwd=str(REPO))
    marker.write_text(json.dumps({"type": qtype, "vision_type": vtype,
                                  "converted": time.ctime()}) + "\n")
    log(f"converted in {time.perf_counter() - t0:.0f} s")
    return out


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {"platform": platform.platform(), "cores": os.cpu_count()}
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in lscpu.splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("Model name", "CPU(s)", "Thread(s) per core", "L3 cache"):
                info[key.strip()] = value.strip()
        flags = next((ln for ln in lscpu.splitlines() if ln.startswith("Flags")), "")
        info["simd"] = [f for f in ("avx2", "fma", "f16c", "avx512f", "avx512_bf16",
                                    "avx_vnni") if f" {f}" in flags]
    except OSError:
        pass
    with contextlib.suppress(ValueError, OSError):
        info["mem_total_gib"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
                                      / 2**30, 1)
    return info


def repo_state() -> dict[str, Any]:
    def git(*a: str) -> str:
        r = subprocess.run(["git", *a], capture_output=True, text=True, cwd=str(REPO))
        return r.stdout.strip()

    changed = git("status", "--porcelain", "--", "native", "daemon/edgevlm/engine")
    so = sorted((REPO / "daemon" / "edgevlm").glob("_native*.so"))
    built = (dt.datetime.fromtimestamp(so[0].stat().st_mtime).strftime("%Y-%m-%d %H:%M")
             if so else None)
    return {"commit": git("rev-parse", "--short", "HEAD"),
            "native_or_engine_modified": bool(changed), "native_module_built": built}


# =============================================================================== orchestration

def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def run_type(qtype: str, gguf: Path, checkpoint: Path, args: argparse.Namespace,
             llama_py: str) -> dict[str, Any]:
    """All measurements of one storage type: a worker per engine, alternating."""
    logs = cache_root() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    # transformers has no quantised path: it runs once, next to the bf16 files
    engines = [e for e in ENGINES if e in args.engines and (e != "transformers"
                                                              or qtype == "bf16")]
    workers: dict[str, WorkerProc] = {}
    samples: dict[str, dict[str, list[dict[str, Any]]]] = {e: {op: [] for op in args.ops}
                                                           for e in engines}
    out: dict[str, Any] = {"type": qtype, "vision_type": VISION_TYPE[qtype],
                           "files_mib": {f.name: round(f.stat().st_size / 2**20, 1)
                                         for f in sorted(gguf.glob("*.gguf"))},
                           "engines": {}}
    try:
        for engine in engines:
            log(f"{qtype}: loading {engine}")
            python = llama_py if engine == "llama.cpp" else args.edgevlm_python
            path = checkpoint if engine == "transformers" else gguf
            workers[engine] = WorkerProc(engine, python, path, args,
                                         logs / f"{engine}-{qtype}.log")
            hello = workers[engine].hello
            log(f"{qtype}: {engine} loaded in {hello['load_ms']:.0f} ms, RSS "
                f"{hello['mem_after_load']['VmRSS'] / 2**20:.2f} GiB")
        for op in args.ops:  # untimed warm-up of every shape (decode: 4 steps are enough)
            for engine in engines:
                workers[engine].ask("tg4" if op.startswith("tg") else op)
                time.sleep(PAUSE_S)
        for run in range(args.runs):
            # rotate who goes first, so that no engine always follows the same one
            k = run % len(engines)
            order = engines[k:] + engines[:k]
            for op in args.ops:
                line = []
                for engine in order:
                    res = workers[engine].ask(op)
                    samples[engine][op].append(res)
                    line.append(f"{engine} {res['tok_s']:.2f} tok/s" if "tok_s" in res
                                else f"{engine} {res['ms']:.0f} ms")
                    time.sleep(PAUSE_S)
                log(f"{qtype} run {run + 1}/{args.runs} {op}: " + ", ".join(line))
        for engine in engines:
            mem = workers[engine].ask("mem")
            hello = workers[engine].hello
            ops: dict[str, Any] = {}
            for op, rows in samples[engine].items():
                entry: dict[str, Any] = {"ms": _median([r["ms"] for r in rows]),
                                         "cpu_ms": _median([r["cpu_ms"] for r in rows]),
                                         "runs_ms": [round(r["ms"], 2) for r in rows]}
                if rows and "tok_s" in rows[0]:
                    entry["tok_s"] = _median([r["tok_s"] for r in rows])
                if rows and "image_tokens" in rows[0]:
                    entry["image_tokens"] = rows[0]["image_tokens"]
                ops[op] = entry
            out["engines"][engine] = {
                "version": hello["version"], "build": hello["build"],
                "settings": hello["settings"], "load_ms": hello["load_ms"],
                "rss_after_load_mib": hello["mem_after_load"]["VmRSS"] / 1024,
                "peak_rss_mib": mem["VmHWM"] / 1024, "ops": ops}
    finally:
        for w in workers.values():
            w.close()
    # speed ratios edgevlm / peer (> 1: edgevlm faster), pair by pair
    out["ratios"] = {}
    if "edgevlm" in out["engines"]:
        ours = out["engines"]["edgevlm"]["ops"]
        for peer in PEERS:
            if peer in out["engines"]:
                theirs = out["engines"][peer]["ops"]
                out["ratios"][peer] = {op: theirs[op]["ms"] / ours[op]["ms"] for op in args.ops
                                       if ours[op]["ms"] and theirs[op]["ms"]}
    return out


OP_LABEL = {"pp128": "prefill 128 (tok/s)", "pp512": "prefill 512 (tok/s)",
            "tg64": "decode 64 (tok/s)", "vit256": "ViT 256×256 (ms)",
            "vit448": "ViT 448×448 (ms)"}
FLOOR = 0.5


def op_label(op: str) -> str:
    if op in OP_LABEL:
        return OP_LABEL[op]
    kind, n = op[:2] if op[:2] in ("pp", "tg") else op[:3], op.lstrip("ptgvi")
    return {"pp": f"prefill {n} (tok/s)", "tg": f"decode {n} (tok/s)",
            "vit": f"ViT {n}×{n} (ms)"}.get(kind, op)


def _value(entry: dict[str, Any] | None, op: str) -> float | None:
    if not entry:
        return None
    return float(entry["ms"] if op.startswith("vit") else entry["tok_s"])


def _fmt(entry: dict[str, Any] | None, op: str) -> str:
    v = _value(entry, op)
    if v is None:
        return "—"
    return f"{v:.0f}" if op.startswith("vit") or v >= 100 else f"{v:.1f}" if v >= 10 \
        else f"{v:.2f}"


def markdown(report: dict[str, Any]) -> str:
    m, meta = report["machine"], report["meta"]
    peers = [p for p in PEERS if any(p in t["engines"] for t in report["types"])]
    lines = [f"### Qwen3-VL-2B shape, {meta['threads']} threads — {meta['date']}", "",
             f"Machine: {m.get('Model name', '?')}, {m.get('cores')} cores "
             f"({', '.join(m.get('simd', []))}), {m.get('mem_total_gib', '?')} GiB; load "
             f"average {meta['loadavg_start'][0]:.2f} at start, {meta['loadavg_end'][0]:.2f} at "
             f"end. Medians of {meta['runs']} runs, engines alternating per measurement; "
             f"context {meta['ctx']}, prefill batch {meta['batch']}.", ""]
    head = "| type | measurement | edgevlm |"
    rule = "|---|---|---|"
    for p in peers:
        head += f" {p} | edgevlm / {p} |"
        rule += "---|---|"
    lines += [head, rule]
    for t in report["types"]:
        eng = t["engines"]
        for op in meta["ops"]:
            e = eng.get("edgevlm", {}).get("ops", {}).get(op)
            label = op_label(op)
            if op.startswith("vit"):
                counts = {eng[x]["ops"][op].get("image_tokens") for x in eng
                          if op in eng[x]["ops"]}
                label += ", " + "/".join(str(c) for c in sorted(counts, key=str)) + " tok"
            row = f"| {t['type']} | {label} | {_fmt(e, op)} |"
            for p in peers:
                r = t.get("ratios", {}).get(p, {}).get(op)
                rs = "" if r is None else (f"**{r:.2f}**" if r < FLOOR else f"{r:.2f}")
                row += f" {_fmt(eng.get(p, {}).get('ops', {}).get(op), op)} | {rs} |"
            lines.append(row)

        def mem(x: dict[str, Any]) -> str:
            if "peak_rss_mib" not in x:
                return "—"
            return f"{x['rss_after_load_mib']:.0f} / {x['peak_rss_mib']:.0f}"

        row = f"| {t['type']} | RSS after load / peak (MiB) | {mem(eng.get('edgevlm', {}))} |"
        for p in peers:
            row += f" {mem(eng.get(p, {}))} | |"
        lines.append(row)
    lines += ["", "Ratios are speed ratios edgevlm / peer (> 1: edgevlm faster); **bold**: "
              f"below the {FLOOR} floor. Vision tower storage: "
              + ", ".join(f"{t['type']} → {t['vision_type']}" for t in report["types"])
              + " (transformers: the bf16 checkpoint).", "",
              "Versions: " + "; ".join(f"{k}: {v}" for k, v in report["versions"].items())]
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ops = report["meta"]["ops"]
    types = [t["type"] for t in report["types"]]
    engines = [e for e in ENGINES if any(e in t["engines"] for t in report["types"])]
    fig, axes = plt.subplots(1, len(ops), figsize=(3.3 * len(ops), 4.0), squeeze=False)
    width = 0.8 / len(engines)
    colors = {"edgevlm": "#1f77b4", "llama.cpp": "#ff7f0e", "transformers": "#2ca02c"}
    for ax, op in zip(axes[0], ops, strict=True):
        for k, engine in enumerate(engines):
            xs, vals = [], []
            for i, t in enumerate(report["types"]):
                v = _value(t["engines"].get(engine, {}).get("ops", {}).get(op), op)
                if v is not None:
                    xs.append(i + (k - (len(engines) - 1) / 2) * width)
                    vals.append(v)
            ax.bar(xs, vals, width, label=engine, color=colors.get(engine))
        ax.set_xticks(range(len(types)), types)
        ax.set_title(op_label(op) + (" — lower is better" if op.startswith("vit") else ""),
                     fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    meta = report["meta"]
    fig.suptitle(f"Qwen3-VL-2B shape, {meta['threads']} threads, {meta['date']}, median of "
                 f"{meta['runs']} — {report['machine'].get('Model name', '')}, load average "
                 f"{meta['loadavg_start'][0]:.1f}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_plot(report_path: Path, png: Path) -> None:
    """The PNG, drawn here if matplotlib is importable, else by the bench venv's python."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        py = llama_python()
        if py.exists():
            subprocess.run([str(py), str(Path(__file__).resolve()), "--plot",
                            str(report_path), str(png)], check=False)
        else:
            log("no matplotlib: skipping the plot")
        return
    plot(json.loads(report_path.read_text()), png)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--types", default=",".join(ALL_TYPES))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ops", default=",".join(ALL_OPS),
                    help=f"subset of {','.join(ALL_OPS)} (ppN / tgN / vitS also accepted)")
    ap.add_argument("--engines", default="edgevlm,llama.cpp")
    ap.add_argument("--ctx", type=int, default=1024, help="context of both engines")
    ap.add_argument("--batch", type=int, default=512,
                    help="prefill batch of both engines (llama.cpp n_batch = n_ubatch)")
    ap.add_argument("--reconvert", action="store_true", help="redo the GGUF conversions")
    ap.add_argument("--json", action="store_true", help="print the JSON report on stdout")
    ap.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    ap.add_argument("--edgevlm-python", default=project_python())
    # internal modes
    ap.add_argument("--worker", choices=tuple(WORKERS), help=argparse.SUPPRESS)
    ap.add_argument("--gguf-dir", help=argparse.SUPPRESS)
    ap.add_argument("--plot", nargs=2, metavar=("REPORT_JSON", "PNG"), help=argparse.SUPPRESS)
    ap.add_argument("--render", type=Path, metavar="REPORT_JSON",
                    help="only rewrite the .md and .png next to an existing report")
    args = ap.parse_args(argv)
    if args.worker:
        return worker_main(args)
    if args.plot:
        plot(json.loads(Path(args.plot[0]).read_text()), Path(args.plot[1]))
        return 0
    if args.render:
        md = markdown(json.loads(args.render.read_text()))
        args.render.with_suffix(".md").write_text(md)
        write_plot(args.render, args.render.with_suffix(".png"))
        print(md)
        return 0

    args.types = [t for t in args.types.split(",") if t]
    args.ops = [o for o in args.ops.split(",") if o]
    args.engines = [e for e in args.engines.split(",") if e]
    for t in args.types:
        if t not in VISION_TYPE:
            ap.error(f"unknown type {t}")
    if args.runs < 1:
        ap.error("--runs must be >= 1")
    if max((int(o[2:]) for o in args.ops if o[:2] in ("pp", "tg")), default=0) > args.ctx:
        ap.error("a measurement does not fit --ctx")

    cache_root().mkdir(parents=True, exist_ok=True)
    loadavg_start = os.getloadavg()
    llama_py = ensure_llama_venv() if "llama.cpp" in args.engines else None
    checkpoint = ensure_checkpoint(args.edgevlm_python)
    ggufs = {t: ensure_gguf(args.edgevlm_python, checkpoint, t, args.reconvert)
             for t in args.types}
    started = dt.datetime.now()
    args.results.mkdir(parents=True, exist_ok=True)
    stem = args.results / f"engine-{started.strftime('%Y-%m-%d-%H%M')}"
    json_path = stem.with_suffix(".json")
    reports: list[dict[str, Any]] = []

    def build_report(complete: bool) -> dict[str, Any]:
        versions: dict[str, str] = {}
        for t in reports:
            for engine, e in t["engines"].items():
                versions[engine] = e["version"]
                versions[f"{engine} build"] = e["build"].strip()
        if "llama.cpp" in versions:
            versions["llama.cpp"] += f" (built from source, CMAKE_ARGS={LLAMA_CMAKE_ARGS})"
        return {
            "meta": {"date": started.strftime("%Y-%m-%d %H:%M"), "runs": args.runs,
                     "threads": args.threads, "ops": args.ops, "ctx": args.ctx,
                     "batch": args.batch, "loadavg_start": loadavg_start,
                     "loadavg_end": os.getloadavg(), "complete": complete,
                     "duration_s": round((dt.datetime.now() - started).total_seconds()),
                     "checkpoint": display_path(checkpoint), "repo": repo_state()},
            "machine": machine_info(), "versions": versions, "types": reports}

    for t in args.types:
        reports.append(run_type(t, ggufs[t], checkpoint, args, llama_py or ""))
        if t != args.types[-1]:  # a partial report survives an interrupted run
            partial = build_report(complete=False)
            json_path.write_text(json.dumps(partial, indent=2) + "\n")
            stem.with_suffix(".md").write_text(markdown(partial))
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
