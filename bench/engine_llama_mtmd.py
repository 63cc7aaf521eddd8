"""The engine bench's ``llama-mtmd`` peer: llama.cpp's ``llama-mtmd-cli``, run per ViT measurement.

llama-bench has no vision path, so the ``vitS`` ops are measured against the tool llama.cpp
users run images through: ``llama-mtmd-cli`` (built by ``tools/llamacpp_tools.py`` from the
tree llama-cpp-python vendors, as ``--isa`` asks: native or AVX2-only). One measurement is one
process on the same ``model.gguf`` + ``mmproj.gguf`` with an S×S image, a short fixed prompt,
``-n 1 --temp 0`` (the fewest tokens that still end in llama.cpp's perf print) and
``-t``/``-c``/``-b``/``-ub`` as the bench's ``--threads``/``--ctx``/``--batch``, like the camera
stage. The time is llama.cpp's own "mtmd batch encoding done in N ms" (``mtmd_batch_encode``:
the ViT, mergers and DeepStack; image decoding, preprocessing, load and prefill excluded),
parsed by ``stage_camera.parse_mtmd_log``; its log's image-token count is reported beside it.

The image has the pixels edgevlm's ``vitS`` op encodes (``engine_common.random_image(S)``),
written as PNG: lossless, so both engines get the same pixels and the same patch count. Each
process loads anew and runs mtmd's own warm-up at load (as llama.cpp's tools do); the bench
runs no extra warm-up process.

Resident memory is a process's peak (``ru_maxrss`` of the children): "after load" is the peak
of the first process (started at load: it maps the pair, encodes the 256×256 image and decodes
one token); "peak" the highest of every measurement's process. Prefill and decode are refused:
they are llama-bench's.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from engine_common import cache_root, random_image
from engine_llama_bench import ToolPeer
from stage_camera import MTMD, parse_mtmd_log

# a fixed short question: what the model is asked does not change the encode
PROMPT = "Describe the image."
# the first process's image side: Qwen3-VL's pixel floor (65 536 = 256²), the smallest ViT op
LOAD_SIZE = 256


def vit_image(size: int) -> Path:
    """The S×S image of edgevlm's ``vitS`` op, as a PNG in the bench cache (lossless: the
    same pixels, hence the same patches, for both engines)."""
    from PIL import Image

    path = cache_root() / f"vit{size}.png"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(random_image(size)).save(path)
    return path


class LlamaMtmdWorker(ToolPeer):
    engine = "llama-mtmd"
    version = f"{MTMD} (llama-cpp-python 0.3.36 tree)"

    def __init__(self, args: argparse.Namespace) -> None:
        if not args.llama_bin:
            raise ValueError("the llama-mtmd worker needs --llama-bin DIR")
        self.args = args
        self.exe = Path(args.llama_bin) / MTMD
        self.gguf = Path(args.gguf_dir)
        done = subprocess.run([str(self.exe), "--version"], capture_output=True, text=True,
                              check=False)
        self.build = " ".join((done.stdout + done.stderr).split())
        self.peak_kib = 0
        first, self.load_rss_kib = self._run(LOAD_SIZE)
        self.load_ms = first["load_ms"]   # its own log: start -> model, context, mmproj ready
        self.settings = {"threads": args.threads, "n_ctx": args.ctx, "n_batch": args.batch,
                         "n_ubatch": args.batch, "n_predict": 1, "temp": 0, "prompt": PROMPT}

    def _run(self, size: int) -> tuple[dict[str, Any], int]:
        """One llama-mtmd-cli process on the S×S image: its parsed log and its peak RSS (KiB)."""
        a = self.args
        cmd = [str(self.exe), "-m", str(self.gguf / "model.gguf"),
               "--mmproj", str(self.gguf / "mmproj.gguf"), "--image", str(vit_image(size)),
               "-p", PROMPT, "-n", "1", "--temp", "0", "-t", str(a.threads), "-c", str(a.ctx),
               "-b", str(a.batch), "-ub", str(a.batch), "--perf", "--log-timestamps", "-lv", "4"]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        wall_ms = (time.perf_counter() - t0) * 1e3
        # this worker's only children are llama-mtmd-cli processes: the largest peak so far
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        # the worker's stderr is its log file (engine_driver.WorkerProc): keep the whole run
        print(f"===== {time.ctime()} {' '.join(cmd)}\n{proc.stderr}", file=sys.stderr,
              flush=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{MTMD} exited {proc.returncode}: {proc.stderr[-1500:]}")
        got = parse_mtmd_log(proc.stderr)
        got["process_ms"] = wall_ms
        self.peak_kib = max(self.peak_kib, rss)
        return got, rss

    def measure(self, op: str) -> dict[str, Any]:
        if not op.startswith("vit") or not op[3:].isdigit():
            raise ValueError(f"{MTMD} has no {op!r} measurement (the vision encoder vitS "
                             "only; prefill and decode are llama-bench's)")
        got, _ = self._run(int(op[3:]))
        # ms: the vision encode alone; the process's other phases for the log reader
        return {"ms": float(got["encode_ms"]), "image_tokens": got["image_tokens"],
                "process_ms": got["process_ms"], "mtmd_load_ms": got["load_ms"],
                "prompt_eval_ms": got["prompt_eval_ms"]}
