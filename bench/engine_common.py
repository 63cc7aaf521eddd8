"""Small helpers shared by the engine bench's parent, its workers and its cold-start child.

Standard library only (the cold-start child imports it before timing the engine's imports).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TOKEN_SEED = 1234
N_TEXT_TOKENS = 151643  # random ids are drawn from the BPE part of the vocabulary
# Between measurements, so that the other engine's threads have gone to sleep. 0.3 s was too
# short on 2026-12-01 (Q4_0 pp128, AVX-512 host): edgevlm measured 61/101/91 tok/s right after
# llama.cpp's turn and 107 alone, llama.cpp 88-90; with 1.5 s, 106-112 and 92-94.
PAUSE_S = 1.5
# the precision each of edgevlm's bench engines loads with: the default (auto) and the two
# named ones, side by side when asked
PRECISION = {"edgevlm": "auto", "edgevlm-exact": "exact", "edgevlm-fast": "fast"}
# the time-to-first-token request: a 448×448 camera-like image and a 20-token question
# (20 tokens with the Qwen vocabulary; the demo model's tokenizer counts differently)
TTFT_QUESTION = ("Is anyone standing at the front door in this picture? Answer yes or no, "
                 "then say who.")
TTFT_IMAGE_SIZE = 448
# the cold start's text prompt and answer length
COLD_PROMPT = "Say hello in one word."
COLD_ANSWER_TOKENS = 4


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
    """This process's resident memory (KiB): total, peak, anonymous and file-backed, and
    ``RssMmproj``, the resident pages of a mapped ``mmproj.gguf`` (the vision file, which
    llama-bench does not load: subtracted to compare the text model's memory alone)."""
    out: dict[str, int] = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0])
    out["RssMmproj"] = 0
    in_mmproj = False
    with open("/proc/self/smaps") as fh:
        for line in fh:
            head = line.split(maxsplit=5)
            if head and "-" in head[0] and not head[0].endswith(":"):   # a mapping's header
                in_mmproj = len(head) == 6 and head[5].rstrip().endswith("mmproj.gguf")
            elif in_mmproj and line.startswith("Rss:"):
                out["RssMmproj"] += int(line.split()[1])
    return out


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def random_tokens(n: int) -> list[int]:
    import random

    rng = random.Random(TOKEN_SEED + n)
    return [rng.randrange(N_TEXT_TOKENS) for _ in range(n)]


def random_image(size: int) -> Any:
    import numpy as np

    rng = np.random.default_rng(size)
    return rng.integers(0, 256, (size, size, 3), dtype=np.uint8)


def ttft_image_jpeg(size: int = TTFT_IMAGE_SIZE) -> bytes:
    """The TTFT request's image as a camera would send it: a JPEG (quality 90) of a smooth
    random scene (blurred noise: realistic file size, unlike pure noise)."""
    import io

    import numpy as np
    from PIL import Image, ImageFilter

    img = Image.fromarray(np.asarray(random_image(size))).filter(ImageFilter.GaussianBlur(3))
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90)
    return buf.getvalue()


def chat_prompt(user_text: str, image_marker: str = "") -> str:
    """The Qwen chat template of one user turn (what edgevlm's template renders; no system
    turn), for llama.cpp, which is given text, not messages."""
    return f"<|im_start|>user\n{image_marker}{user_text}<|im_end|>\n<|im_start|>assistant\n"


def project_python() -> str:
    venv = REPO / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def llama_python() -> Path:
    return cache_root() / "venv-llamacpp" / "bin" / "python"


# ------------------------------------------------------------------ report labels

OP_LABEL = {"pp128": "prefill 128 (tok/s)", "pp512": "prefill 512 (tok/s)",
            "tg64": "decode 64 (tok/s)", "vit256": "ViT 256×256 (ms)",
            "vit448": "ViT 448×448 (ms)"}
FLOOR = 1.0   # issue 6: at least llama.cpp's speed (issue 3's floor was 0.5)


def op_label(op: str) -> str:
    if op in OP_LABEL:
        return OP_LABEL[op]
    kind, n = op[:2] if op[:2] in ("pp", "tg") else op[:3], op.lstrip("ptgvi")
    return {"pp": f"prefill {n} (tok/s)", "tg": f"decode {n} (tok/s)",
            "vit": f"ViT {n}×{n} (ms)"}.get(kind, op)


def op_value(entry: dict[str, Any] | None, op: str) -> float | None:
    if not entry:
        return None
    return float(entry["ms"] if op.startswith("vit") else entry["tok_s"])


def op_fmt(entry: dict[str, Any] | None, op: str) -> str:
    v = op_value(entry, op)
    if v is None:
        return "—"
    return f"{v:.0f}" if op.startswith("vit") or v >= 100 else f"{v:.1f}" if v >= 10 \
        else f"{v:.2f}"
