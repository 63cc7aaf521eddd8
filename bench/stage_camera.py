"""Stage ``camera``: the camera-event latency a user feels, snapshot in, 40 tokens out.

One Frigate-sized snapshot (640×360 JPEG, quality 70 as Frigate's snapshots, made from the
committed sample ``front_door.jpg``: its middle 16:9 band scaled up) with the camera prompt
the daemon sends by default (``cameras.<name>.prompt`` filled for a camera ``front_door``),
greedy, exactly :data:`ANSWER_TOKENS` tokens (the random model's EOS is ignored), on the
``--stage-type`` pair:

- edgevlm: ``Engine.generate`` in a worker that loaded the engine once (the ``camera`` / ``cameraN``
  ops of ``engine_workers.py``): base64 + JPEG decode + preprocessing, ViT, prefill, 39 decode
  steps, and the same again with a per-camera pixel budget (:data:`SMALL_MAX_PIXELS`, what
  ``cameras.<name>.max_pixels`` sets: the frame's request carries it as
  ``mm_processor_kwargs.max_pixels``, verbs/describe.py ``frame_request``);
- llama.cpp: one ``llama-mtmd-cli`` process per run (:class:`MtmdCli`), whose load (model,
  context, mmproj, warm-ups) is timed from its log and kept out of the total.

Runs alternate the engines (``engine_driver.alternate``) after one untimed run of each.
"""

from __future__ import annotations

import argparse
import io
import re
import resource
import subprocess
import time
from functools import cache
from pathlib import Path
from typing import Any

from engine_common import REPO, cache_root, display_path, log
from engine_driver import alternate, start_workers, summarise
from engine_setup import tools_build_name

SAMPLE = REPO / "daemon" / "edgevlm" / "models" / "samples" / "front_door.jpg"
SNAPSHOT_SIZE = (640, 360)     # a Frigate snapshot of a 640×360 (16:9) detect stream
SNAPSHOT_QUALITY = 70          # Frigate's snapshots.quality default
CAMERA = "front_door"
ANSWER_TOKENS = 40
# A per-camera budget of 320×180 pixels; the model's floor (Qwen3-VL: 65 536) raises it.
SMALL_MAX_PIXELS = 320 * 180
OPS = ("camera", f"camera{SMALL_MAX_PIXELS}")
MTMD = "llama-mtmd-cli"


@cache
def snapshot_jpeg() -> bytes:
    """The snapshot: the sample's middle 16:9 band, scaled to 640×360, JPEG quality 70."""
    from PIL import Image

    img = Image.open(SAMPLE).convert("RGB")
    w, h = img.size
    band = w * SNAPSHOT_SIZE[1] // SNAPSHOT_SIZE[0]
    top = (h - band) // 2
    img = img.crop((0, top, w, top + band)).resize(SNAPSHOT_SIZE, Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=SNAPSHOT_QUALITY)
    return buf.getvalue()


def camera_prompt() -> str:
    """The daemon's default camera prompt, filled in as the camera sources fill it."""
    from edgevlm.config import CameraConfig
    from edgevlm.sources.camera_messages import fill_prompt

    return fill_prompt(CameraConfig().prompt, CAMERA, None, None)


def max_pixels_of(op: str) -> int | None:
    """``camera`` -> None (the daemon's ``model.max_pixels``); ``cameraN`` -> N."""
    return int(op[len("camera"):]) if op[len("camera"):] else None


# llama-mtmd-cli's log lines (``--log-timestamps -lv 4``: "M.SS.mmm.uuu I text"), the
# timestamp counted from the process's log start
_STAMP = re.compile(r"^(\d+)\.(\d\d)\.(\d{3})\.(\d{3}) \w (.*)$")
_PARSE = {
    # the mtmd_cli_context constructor is done: model, context, mmproj and warm-ups
    "loaded": re.compile(r"^main: loading model: "),
    "encode_ms": re.compile(r"^mtmd batch encoding done in (\d+) ms"),
    "image_decode_ms": re.compile(r"^image decoded \(batch 1/1\) in (\d+) ms"),
    "image_tokens": re.compile(r"^decoding image batch 1/1, n_tokens_batch = (\d+)"),
    "prompt_eval": re.compile(r"prompt eval time =\s+([\d.]+) ms /\s+(\d+) tokens"),
    "eval": re.compile(r"\s eval time =\s+([\d.]+) ms /\s+(\d+) runs"),
    "done": re.compile(r"llama_perf_context_print:\s+total time ="),
}


def parse_mtmd_log(stderr: str) -> dict[str, Any]:
    """The numbers of one ``llama-mtmd-cli`` run, and the lines they came from.

    ``prompt eval`` is llama.cpp's own timer from the first queued prompt decode to the first
    sampled token: with an image it spans the ViT encode (nothing synchronises between the
    text chunk, the encode and the image embeddings), so prefill = prompt eval - encode."""
    out: dict[str, Any] = {"parsed_lines": []}
    stamps: dict[str, float] = {}
    for line in stderr.splitlines():
        m = _STAMP.match(line)
        if not m:
            continue
        t_ms = (int(m[1]) * 60 + int(m[2])) * 1e3 + int(m[3]) + int(m[4]) / 1e3
        text = m[5]
        for key, rx in _PARSE.items():
            hit = rx.search(text)
            if not hit:
                continue
            if key == "loaded":   # no machine paths in the report
                text = f"main: loading model: {display_path(Path(text.split(': ', 2)[2]))}"
            out["parsed_lines"].append(text.strip())
            if key in ("loaded", "done"):
                stamps[key] = t_ms
            elif key in ("prompt_eval", "eval"):
                out[f"{key}_ms"], out[f"{key}_tokens"] = float(hit[1]), int(hit[2])
            else:
                out[key] = int(hit[1])
    missing = [k for k in ("loaded", "done") if k not in stamps] + [
        k for k in ("encode_ms", "prompt_eval_ms", "eval_ms", "image_tokens") if k not in out]
    if missing:
        raise RuntimeError(f"{MTMD}: no {', '.join(missing)} in its log:\n{stderr[-3000:]}")
    out["load_ms"] = stamps["loaded"]
    out["total_ms"] = stamps["done"] - stamps["loaded"]
    out["prefill_ms"] = out["prompt_eval_ms"] - out["encode_ms"]
    return out


def _children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


class MtmdCli:
    """The llama.cpp peer: a ``llama-mtmd-cli`` process per request, answering like a
    :class:`engine_driver.WorkerProc` (``ask``/``close``) so that ``alternate`` drives it."""

    engine = MTMD

    def __init__(self, bin_dir: str, gguf: Path, image: Path, prompt: str,
                 args: argparse.Namespace) -> None:
        self.cmd = [str(Path(bin_dir) / MTMD), "-m", str(gguf / "model.gguf"),
                    "--mmproj", str(gguf / "mmproj.gguf"), "--image", str(image),
                    "-p", prompt, "-n", str(ANSWER_TOKENS), "--ignore-eos", "--temp", "0",
                    "-t", str(args.threads), "-c", str(args.ctx), "-b", str(args.batch),
                    "-ub", str(args.batch), "--perf", "--log-timestamps", "-lv", "4"]
        self.log_path = cache_root() / "logs" / f"{MTMD}-camera.log"
        done = subprocess.run([self.cmd[0], "--version"], capture_output=True, text=True,
                              check=False)
        self.version = " ".join((done.stdout + done.stderr).split())

    def ask(self, op: str) -> dict[str, Any]:
        if op != "camera":
            raise ValueError(f"{MTMD} runs the camera request at its own pixel budget only")
        cpu0, t0 = _children_cpu_s(), time.perf_counter()
        proc = subprocess.run(self.cmd, capture_output=True, text=True, check=False)
        wall_ms = (time.perf_counter() - t0) * 1e3
        cpu_ms = (_children_cpu_s() - cpu0) * 1e3   # the whole process, load included
        with open(self.log_path, "a") as fh:
            fh.write(f"\n===== {time.ctime()} {' '.join(self.cmd)}\n{proc.stderr}")
        if proc.returncode != 0:
            raise RuntimeError(f"{MTMD} exited {proc.returncode} (log: {self.log_path})")
        got = parse_mtmd_log(proc.stderr)
        if got["eval_tokens"] != ANSWER_TOKENS - 1:
            raise RuntimeError(f"{MTMD} decoded {got['eval_tokens']} tokens after the first, "
                               f"expected {ANSWER_TOKENS - 1}")
        return {"ms": got.pop("total_ms"), "process_ms": wall_ms, "process_cpu_ms": cpu_ms,
                **got}

    def close(self) -> None:
        pass


def run_camera(qtype: str, gguf: Path, args: argparse.Namespace, llama_py: str
               ) -> dict[str, Any]:
    jpeg = snapshot_jpeg()
    prompt = camera_prompt()
    workers: dict[str, Any] = {}
    if "edgevlm" in args.engines:
        workers.update(start_workers(["edgevlm"], qtype, {"edgevlm": gguf}, args, llama_py,
                                     label=f"camera {qtype}"))
    try:
        plan = {e: list(OPS) for e in workers}
        if "llama.cpp" in args.engines:
            image = cache_root() / "camera-snapshot.jpg"
            image.write_bytes(jpeg)
            workers[MTMD] = MtmdCli(args.mtmd_bin, gguf, image, prompt, args)
            plan[MTMD] = ["camera"]
        versions: dict[str, str] = {}   # as the engine stage's report names them
        if "edgevlm" in workers:
            hello = workers["edgevlm"].hello
            versions |= {"edgevlm": hello["version"], "edgevlm build": hello["build"].strip()}
        if MTMD in workers:
            versions[MTMD] = f"{workers[MTMD].version} ({tools_build_name('native')})"
        samples = alternate(workers, plan, args.runs, f"camera {qtype}")
    finally:
        for w in workers.values():
            w.close()
    out: dict[str, Any] = {
        "type": qtype, "threads": args.threads, "runs": args.runs,
        "image": f"{SNAPSHOT_SIZE[0]}×{SNAPSHOT_SIZE[1]} JPEG (quality {SNAPSHOT_QUALITY}, "
                 f"from samples/{SAMPLE.name}), {len(jpeg)} bytes",
        "prompt": prompt, "answer_tokens": ANSWER_TOKENS, "small_max_pixels": SMALL_MAX_PIXELS,
        "versions": versions, "engines": {}}
    for engine, ops in samples.items():
        out["engines"][engine] = {op: summarise(rows) for op, rows in ops.items()}
        for op, rows in ops.items():   # the last run's resized size / parsed log lines
            out["engines"][engine][op].update(
                {k: rows[-1][k] for k in ("resized", "parsed_lines") if k in rows[-1]})
    eng = out["engines"]
    if "edgevlm" in eng and MTMD in eng:
        ours, theirs = eng["edgevlm"]["camera"], eng[MTMD]["camera"]
        counts = {e: (r["prompt_tokens"], r["image_tokens"]) for e, r in (
            ("edgevlm", ours), (MTMD, {"prompt_tokens": theirs["prompt_eval_tokens"],
                                       "image_tokens": theirs["image_tokens"]}))}
        if len(set(counts.values())) > 1:
            log(f"camera {qtype}: the engines' prompts differ (prompt, image tokens): {counts}")
        out["ratio"] = ours["ms"] / theirs["ms"]
    return out


def _ms(r: dict[str, Any], key: str) -> str:
    v = r.get(key)
    return "—" if v is None else f"{v:.0f}"


def markdown(t: dict[str, Any]) -> list[str]:
    eng = t["engines"]
    n = t["answer_tokens"]
    lines = [f"#### Camera event: snapshot → {n}-token description ({t['type']}, "
             f"{t['threads']} threads)", "",
             f"{t['image']}, the daemon's camera prompt \"{t['prompt']}\", greedy, exactly "
             f"{n} tokens (EOS ignored); medians of {t['runs']} runs, engines alternating. "
             "Total: snapshot bytes in → last token out, the engine already loaded; "
             "/ llama.cpp: time ratio at the same image (< 1: edgevlm faster).", "",
             "| engine | image tokens (prompt) | JPEG + preprocess (ms) | ViT (ms) "
             f"| prefill (ms) | {n - 1} decode steps (ms/token) | total (ms) | / llama.cpp |",
             "|---|---|---|---|---|---|---|---|"]
    theirs = eng.get(MTMD, {}).get("camera")
    for op in OPS:
        r = eng.get("edgevlm", {}).get(op)
        if not r:
            continue
        px = max_pixels_of(op)
        name = (f"edgevlm, model.max_pixels {r['max_pixels']:.0f} ({r['resized']})" if px is None
                else f"edgevlm, camera max_pixels {px} ({r['resized']})")
        # the ratio at the same pixel budget only
        ratio = f"{r['ms'] / theirs['ms']:.2f}" if theirs and px is None else ""
        lines.append(f"| {name} | {r['image_tokens']:.0f} ({r['prompt_tokens']:.0f}) | "
                     f"{_ms(r, 'media_ms')} | {_ms(r, 'encode_ms')} | {_ms(r, 'prefill_ms')} | "
                     f"{r['decode_ms'] / (n - 1):.1f} | {r['ms']:.0f} | {ratio} |")
    if theirs:
        lines.append(f"| llama.cpp ({MTMD}) | {theirs['image_tokens']:.0f} "
                     f"({theirs['prompt_eval_tokens']:.0f}) | — | {_ms(theirs, 'encode_ms')} | "
                     f"{_ms(theirs, 'prefill_ms')} | "
                     f"{theirs['eval_ms'] / theirs['eval_tokens']:.1f} | {theirs['ms']:.0f} "
                     "| |")
    lines.append("")
    base, small = (eng.get("edgevlm", {}).get(op) for op in OPS)
    if base and small:
        lines.append(f"A per-camera `max_pixels` of {t['small_max_pixels']} (320×180, raised "
                     f"to the model's floor: {small['max_pixels']:.0f}) resizes the snapshot "
                     f"to {small['resized']} instead of {base['resized']}: "
                     f"{base['image_tokens']:.0f} → {small['image_tokens']:.0f} image tokens, "
                     f"total {base['ms']:.0f} → {small['ms']:.0f} ms "
                     f"({(small['ms'] / base['ms'] - 1) * 100:+.0f} %).")
    if theirs:
        lines.append(f"llama.cpp: one `{MTMD}` process per run; its load (model, context, "
                     f"mmproj, warm-ups: {theirs['load_ms']:.0f} ms) is left out, the whole "
                     f"process took {theirs['process_ms']:.0f} ms "
                     f"({theirs['process_cpu_ms']:.0f} ms of CPU). Its timings are parsed from "
                     "its log: ViT = \"mtmd batch encoding done\", prefill = \"prompt eval "
                     "time\" − ViT (llama.cpp's prompt timer spans the encode), decode = \"eval "
                     "time\", total = from the end of the load to the perf print; JPEG "
                     "decoding and preprocessing are not printed on their own.")
    return [*lines, ""]


def draw(ax: Any, t: dict[str, Any]) -> None:
    eng = t["engines"]
    bars = [(f"edgevlm\n{r['image_tokens']:.0f} img tok", r, "#1f77b4") for r in (
        eng.get("edgevlm", {}).get(op) for op in OPS) if r]
    if eng.get(MTMD, {}).get("camera"):
        r = eng[MTMD]["camera"]
        bars.append((f"llama.cpp\n{r['image_tokens']:.0f} img tok", r, "#ff7f0e"))
    ax.bar(range(len(bars)), [b[1]["ms"] for b in bars], color=[b[2] for b in bars])
    ax.set_xticks(range(len(bars)), [b[0] for b in bars], fontsize=7)
    ax.set_title(f"camera event, {t['answer_tokens']} tokens, {t['type']} (ms) — lower is "
                 "better", fontsize=8)
    ax.grid(axis="y", alpha=0.3)
