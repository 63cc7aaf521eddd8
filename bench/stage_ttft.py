"""Stage ``ttft``: time to first token of a 448×448 image + 20-token question.

edgevlm answers through ``Engine.generate`` with a vision cache (the daemon's path: base64 and
JPEG decode, preprocessing, cache lookup, ViT, prompt, prefill, first sampled token);
llama.cpp through its mtmd helpers (JPEG decode, tokenize, eval of text + image chunks,
greedy sample). Both get the same JPEG bytes and the same question in the same chat template.
Every run: llama.cpp and edgevlm with an empty vision cache (alternating, rotating who goes
first), then edgevlm again with the same image, which must be a cache hit that does not run
the vision encoder (the worker counts the encoder's calls and checks the hit).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from engine_common import TTFT_IMAGE_SIZE, TTFT_QUESTION, log, ttft_image_jpeg
from engine_driver import alternate, start_workers, summarise

TARGET = 0.8  # issue 6: edgevlm's TTFT <= 0.8 x llama.cpp's


def run_ttft(qtype: str, gguf: Path, args: argparse.Namespace, llama_py: str
             ) -> dict[str, Any]:
    engines = [e for e in ("edgevlm", "llama.cpp") if e in args.engines]
    plan = {e: ["ttft", "ttft_hit"] if e == "edgevlm" else ["ttft"] for e in engines}
    workers = start_workers(engines, qtype, dict.fromkeys(engines, gguf), args, llama_py,
                            label=f"ttft {qtype}")
    try:
        samples = alternate(workers, plan, args.runs, f"ttft {qtype}")
    finally:
        for w in workers.values():
            w.close()
    out: dict[str, Any] = {
        "type": qtype, "threads": args.threads,
        "image": f"{TTFT_IMAGE_SIZE}x{TTFT_IMAGE_SIZE} JPEG, {len(ttft_image_jpeg())} bytes",
        "question": TTFT_QUESTION, "target": TARGET, "runs": args.runs, "engines": {}}
    for engine, ops in samples.items():
        out["engines"][engine] = {("hit" if op == "ttft_hit" else "miss"): summarise(rows)
                                  for op, rows in ops.items()}
    eng = out["engines"]
    if "edgevlm" in eng and "llama.cpp" in eng:
        counts = {e: (eng[e]["miss"]["prompt_tokens"], eng[e]["miss"]["image_tokens"])
                  for e in eng}
        if len(set(counts.values())) > 1:
            log(f"ttft {qtype}: the engines' prompts differ (prompt, image tokens): {counts}")
        ours, theirs = eng["edgevlm"]["miss"]["ms"], eng["llama.cpp"]["miss"]["ms"]
        out["ratio"] = ours / theirs  # time ratio: <= TARGET meets the target
        out["ratio_hit"] = eng["edgevlm"]["hit"]["ms"] / theirs
    return out


def markdown(t: dict[str, Any]) -> list[str]:
    eng = t["engines"]
    e = eng.get("edgevlm", {})
    lines = [f"#### Time to first token ({t['type']}, {t['threads']} threads)", "",
             f"{t['image']} + a {_tokens(e)}-token question, greedy, one token; medians of "
             f"{t['runs']} runs.", "",
             "| engine | TTFT (ms) | of which encode / prefill (ms) | prompt tokens (image) "
             "| / llama.cpp |",
             "|---|---|---|---|---|"]
    rows = [("edgevlm, new image", e.get("miss")), ("edgevlm, cached image", e.get("hit")),
            ("llama.cpp (mtmd)", eng.get("llama.cpp", {}).get("miss"))]
    theirs = rows[2][1]["ms"] if rows[2][1] else None
    for name, r in rows:
        if not r:
            continue
        split = (f"{r['encode_ms']:.0f} / {r['prefill_ms']:.0f}" if "encode_ms" in r else "—")
        ratio = ""
        if theirs and name.startswith("edgevlm"):
            x = r["ms"] / theirs
            ratio = f"{x:.2f}" if x <= t["target"] else f"**{x:.2f}**"
        lines.append(f"| {name} | {r['ms']:.0f} | {split} | {r['prompt_tokens']:.0f} "
                     f"({r['image_tokens']:.0f}) | {ratio} |")
    hit = e.get("hit")
    lines += ["", f"Target: edgevlm ≤ {t['target']}× llama.cpp's time (**bold**: not met). "
              "Cached image: "
              + ("vision encoder calls 0, cache hit in every run (checked)."
                 if hit and hit.get("cache_hit") and hit.get("encoder_calls") == 0
                 else "not measured."), ""]
    return lines


def _tokens(edgevlm: dict[str, Any]) -> str:
    miss = edgevlm.get("miss", {})
    return f"{miss['question_tokens']:.0f}" if "question_tokens" in miss else "20"


def draw(ax: Any, t: dict[str, Any]) -> None:
    eng = t["engines"]
    bars = [("edgevlm\nnew image", eng.get("edgevlm", {}).get("miss"), "#1f77b4"),
            ("edgevlm\ncached", eng.get("edgevlm", {}).get("hit"), "#aec7e8"),
            ("llama.cpp\nmtmd", eng.get("llama.cpp", {}).get("miss"), "#ff7f0e")]
    bars = [b for b in bars if b[1]]
    ax.bar(range(len(bars)), [b[1]["ms"] for b in bars], color=[b[2] for b in bars])
    ax.set_xticks(range(len(bars)), [b[0] for b in bars], fontsize=7)
    ax.set_title(f"TTFT 448×448 + question, {t['type']} (ms) — lower is better", fontsize=8)
    ax.grid(axis="y", alpha=0.3)
