"""Bench structured answers (issue 25): the grammar mask's cost per decoded token on the full
Qwen vocabulary, and choices scored against generating the longest choice.

The model is a tiny random-weight Qwen3-VL with the real Qwen vocabulary (151,643 ranks + the
Qwen3 added tokens; built the way tests/native/test_structured_full_vocab.py builds it), so the
mask covers the whole vocabulary as on Qwen3-VL-2B while the network itself costs little:

- mask: ``TokenConstraint.mask`` (llguidance's next-token bitmask + applying it to the
  logits) timed alone, per token, over JSON answers of a schema;
- TPOT: the same answers decoded with and without the schema (the difference is the mask's
  cost inside the loop, with the token accepted by the grammar);
- choices: scoring N choices after one prefill vs decoding the longest choice's tokens.

The mask's share of a 2B decode step is its per-token cost over ``--tpot-2b-ms`` (the 2B
model's TPOT at 2 threads from bench_engine.py on the same machine; pass yours).
Target: <= 10 %. Run: ``.venv/bin/python bench/bench_structured.py [--runs N] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SCHEMA = {"type": "object", "additionalProperties": False,
          "required": ["person", "count", "label"],
          "properties": {"person": {"type": "boolean"},
                         "count": {"type": "integer", "minimum": 0, "maximum": 99},
                         "label": {"type": "string", "maxLength": 24}}}
CHOICES = ["nobody", "a person", "a car", "a delivery van", "a cat", "a dog", "a parcel",
           "someone carrying a large parcel to the front door"]


def build(root: Path) -> Any:
    from edgevlm.convert.cli import main as convert_main
    from edgevlm.engine import Engine
    from tests.qwen3vl_checkpoints import legacy_config_dict, write_numpy_checkpoint
    from tests.qwen_tokenizers import qwen_reference_tokenizer

    tok = qwen_reference_tokenizer()
    write_numpy_checkpoint(root / "ckpt", tok, legacy_config_dict(tok))
    if convert_main([str(root / "ckpt"), "-o", str(root / "gguf"), "--type", "f16",
                     "--quiet"]) != 0:
        raise RuntimeError("convert failed")
    return Engine.load(root / "gguf", threads=2, context=1024)


def mask_cost_us(engine: Any, runs: int) -> dict[str, float]:
    import numpy as np

    from edgevlm.structured import TokenConstraint, compile_grammar

    grammar = compile_grammar(SCHEMA)
    assert grammar is not None
    answers = [engine.generate([{"role": "user", "content": f"Scene {i}?"}], max_tokens=64,
                               temperature=1.0, seed=i, schema=SCHEMA) for i in range(runs)]
    per_token: list[float] = []
    logits = np.zeros(engine.session.n_vocab, dtype=np.float32)
    for answer in answers:
        constraint = TokenConstraint(grammar, engine.tokenizer.backend, engine.special.eos)
        for token in answer.tokens:
            logits[:] = 0.0
            t0 = time.perf_counter()
            constraint.mask(logits)
            per_token.append((time.perf_counter() - t0) * 1e6)
            constraint.accept(token)
    return {"p50_us": statistics.median(per_token),
            "p95_us": sorted(per_token)[int(0.95 * (len(per_token) - 1))],
            "tokens": float(len(per_token))}


def tpot(engine: Any, runs: int, schema: Any) -> float:
    values = []
    for i in range(runs):
        result = engine.generate([{"role": "user", "content": f"Scene {i}?"}], max_tokens=32,
                                 temperature=1.0, seed=i, schema=schema)
        if len(result.tokens) > 2:
            values.append(result.metrics["tpot_ms"])
    return statistics.median(values)


def choices_vs_generate(engine: Any, runs: int) -> dict[str, float]:
    longest = max(CHOICES, key=lambda c: len(engine.tokenizer.encode_text(c)))
    n_longest = len(engine.tokenizer.encode_text(longest)) + 1
    scored, generated = [], []
    messages = [{"role": "user", "content": "Who is at the door?"}]
    for _ in range(runs):
        t0 = time.perf_counter()
        engine.generate(messages, choices=CHOICES)
        scored.append((time.perf_counter() - t0) * 1e3)
        t0 = time.perf_counter()
        engine.generate(messages, max_tokens=n_longest, temperature=0.0, stop=["\u0000"])
        generated.append((time.perf_counter() - t0) * 1e3)
    return {"choices": float(len(CHOICES)), "longest_tokens": float(n_longest),
            "score_all_ms": statistics.median(scored),
            "generate_longest_ms": statistics.median(generated)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--tpot-2b-ms", type=float, default=None,
                        help="the 2B model's TPOT at 2 threads on this machine "
                        "(bench_engine.py); prints the mask's share of it")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        engine = build(Path(tmp))
        result: dict[str, Any] = {"vocab": engine.tokenizer.backend.get_vocab_size(),
                                  "mask": mask_cost_us(engine, args.runs),
                                  "tpot_free_ms": tpot(engine, args.runs, None),
                                  "tpot_schema_ms": tpot(engine, args.runs, SCHEMA),
                                  "choices": choices_vs_generate(engine, args.runs)}
    if args.tpot_2b_ms:
        result["mask_share_of_2b_tpot"] = result["mask"]["p50_us"] / 1e3 / args.tpot_2b_ms
    if args.json:
        print(json.dumps(result, indent=2))
        return
    m, c = result["mask"], result["choices"]
    print(f"vocabulary {result['vocab']}; mask per token p50 {m['p50_us']:.0f} us, p95 "
          f"{m['p95_us']:.0f} us ({m['tokens']:.0f} tokens)")
    print(f"tiny model TPOT: free {result['tpot_free_ms']:.3f} ms, with the schema "
          f"{result['tpot_schema_ms']:.3f} ms")
    if "mask_share_of_2b_tpot" in result:
        print(f"mask share of a 2B decode step ({args.tpot_2b_ms} ms): "
              f"{result['mask_share_of_2b_tpot']:.2%} (target <= 10 %)")
    print(f"choices: {c['choices']:.0f} scored in {c['score_all_ms']:.2f} ms vs generating the "
          f"longest ({c['longest_tokens']:.0f} tokens) {c['generate_longest_ms']:.2f} ms")


if __name__ == "__main__":
    main()
