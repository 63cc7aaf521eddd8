#!/usr/bin/env python3
"""Score the demo model on the held-out test split: transformers, edgevlm F32, edgevlm Q8_0.

For each of ``--items`` test items (``scenes.TEST_SEED``, never used in training or model
selection) it runs greedy decoding

* in transformers (the float32 Hugging Face checkpoint, eager attention, the PIL processor),
* in edgevlm's engine on the shipped F32 GGUF pair,
* in edgevlm's engine on a Q8_0 conversion of the same checkpoint (``edgevlm convert --type
  q8_0``, vision tower at the converter's default F16),

and reports the share of exactly right answers (overall and per task) for each, plus how many
edgevlm F32 answers are token-for-token identical to transformers'. The JSON report goes to
standard output and, with ``--report``, to a file.

Usage: ``python tools/demo_model/evaluate.py [--hf tests/e2e/fixtures/qwen3vl-demo]
[--gguf daemon/edgevlm/models/qwen3vl-demo]``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tools.demo_model.scenes import TEST_SEED, Item, make_item  # noqa: E402

MAX_TOKENS = 32
DEFAULT_GGUF = REPO / "daemon" / "edgevlm" / "models" / "qwen3vl-demo"
DEFAULT_HF = REPO / "tests" / "e2e" / "fixtures" / "qwen3vl-demo"


@dataclass(frozen=True)
class Answer:
    text: str
    tokens: tuple[int, ...]  # without the end-of-turn token
    stopped: bool            # ended on an EOS token (not cut by MAX_TOKENS)


def held_out_items(count: int, seed: int = TEST_SEED) -> list[Item]:
    return [make_item(seed, i) for i in range(count)]


def is_right(item: Item, answer: Answer) -> bool:
    return answer.stopped and answer.text == item.answer


def score(items: Sequence[Item], answers: Sequence[Answer]) -> dict[str, Any]:
    per_task: dict[str, list[bool]] = {}
    for item, answer in zip(items, answers, strict=True):
        per_task.setdefault(item.task, []).append(is_right(item, answer))
    right = sum(sum(v) for v in per_task.values())
    return {"accuracy": right / len(items), "right": right, "items": len(items),
            "per_task": {t: f"{sum(v)}/{len(v)}" for t, v in sorted(per_task.items())}}


def engine_answers(model_dir: Path, items: Sequence[Item], threads: int = 2) -> list[Answer]:
    from edgevlm.engine import Engine

    engine = Engine.load(model_dir, threads=threads, context=1024)
    out = []
    for item in items:
        result = engine.generate(item.edgevlm_messages(), max_tokens=MAX_TOKENS,
                                 temperature=0.0)
        out.append(Answer(result.text, tuple(result.tokens), result.finish_reason == "stop"))
    return out


def transformers_answers(hf_dir: Path, items: Sequence[Item]) -> list[Answer]:
    import torch
    from transformers import GenerationConfig, Qwen3VLForConditionalGeneration

    from tools.demo_model.checkpoint import load_processor
    from tools.demo_model.samples import processor_call

    model = Qwen3VLForConditionalGeneration.from_pretrained(
        hf_dir, dtype=torch.float32, attn_implementation="eager").eval()
    processor = load_processor(hf_dir)
    tok = processor.tokenizer
    eos = [tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")]
    config = GenerationConfig(do_sample=False, max_new_tokens=MAX_TOKENS, eos_token_id=eos,
                              pad_token_id=eos[1])
    out = []
    with torch.no_grad():
        for item in items:
            inputs = processor(**processor_call(item, processor))
            model.model.rope_deltas = None
            generated = model.generate(**inputs, generation_config=config)
            tokens = generated[0, inputs["input_ids"].shape[1]:].tolist()
            stopped = bool(tokens) and tokens[-1] in eos
            if stopped:
                tokens = tokens[:-1]
            out.append(Answer(tok.decode(tokens, skip_special_tokens=True), tuple(tokens),
                              stopped))
    return out


def convert(hf_dir: Path, out: Path, text_type: str) -> None:
    from edgevlm.convert.cli import main as convert_main

    code = convert_main([str(hf_dir), "-o", str(out), "--type", text_type, "--quiet"])
    if code != 0:
        raise RuntimeError(f"edgevlm convert --type {text_type} failed ({code})")


def model_bytes(model_dir: Path) -> int:
    return sum(f.stat().st_size for f in model_dir.glob("*.gguf"))


def evaluate(hf_dir: Path | None, gguf_dir: Path, count: int, threads: int) -> dict[str, Any]:
    items = held_out_items(count)
    report: dict[str, Any] = {"split_seed": TEST_SEED, "items": count,
                              "gguf_f32_bytes": model_bytes(gguf_dir)}
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    f32 = engine_answers(gguf_dir, items, threads)
    timings["edgevlm_f32_s"] = time.perf_counter() - t0
    report["edgevlm_f32"] = score(items, f32)
    if hf_dir is not None:
        t0 = time.perf_counter()
        reference = transformers_answers(hf_dir, items)
        timings["transformers_s"] = time.perf_counter() - t0
        report["transformers"] = score(items, reference)
        same = [a.tokens == b.tokens and a.stopped == b.stopped
                for a, b in zip(f32, reference, strict=True)]
        report["token_agreement_f32"] = f"{sum(same)}/{len(same)}"
        report["disagreements"] = [
            {"index": i, "task": items[i].task, "prompt": items[i].prompt,
             "edgevlm": f32[i].text, "transformers": reference[i].text}
            for i, ok in enumerate(same) if not ok][:20]
        with tempfile.TemporaryDirectory() as tmp:
            q8_dir = Path(tmp) / "q8_0"
            convert(hf_dir, q8_dir, "q8_0")
            report["gguf_q8_0_bytes"] = model_bytes(q8_dir)
            t0 = time.perf_counter()
            report["edgevlm_q8_0"] = score(items, engine_answers(q8_dir, items, threads))
            timings["edgevlm_q8_0_s"] = time.perf_counter() - t0
    report["wrong_f32"] = [
        {"index": i, "task": it.task, "prompt": it.prompt, "want": it.answer, "got": a.text}
        for i, (it, a) in enumerate(zip(items, f32, strict=True)) if not is_right(it, a)][:30]
    report["timings_s"] = {k: round(v, 1) for k, v in timings.items()}
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hf", type=Path, default=DEFAULT_HF,
                        help="the float32 Hugging Face checkpoint (train.py --hf-out)")
    parser.add_argument("--no-reference", action="store_true",
                        help="edgevlm F32 only (no transformers, no Q8_0)")
    parser.add_argument("--gguf", type=Path, default=DEFAULT_GGUF, help="F32 GGUF directory")
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--report", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    if not args.no_reference:
        import transformers

        transformers.logging.set_verbosity_error()
    report = evaluate(None if args.no_reference else args.hf, args.gguf, args.items,
                      args.threads)
    text = json.dumps(report, indent=1)
    print(text)
    if args.report:
        args.report.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
