"""Writes tests/legacy_fixtures.h: Q4_1 / Q5_0 / Q5_1 bytes and values from the ``gguf`` package.

gguf-py's quantisers and dequantisers of these types are written to be bit-exact with
llama.cpp's quantize_row_q4_1_ref / q5_0_ref / q5_1_ref and dequantize_row_*, so
test_legacy_quants.c checks, for each type:
  - edgevlm's quantiser on 64 input blocks (random scales over 10 decades plus hand-made
    edge cases) stores gguf-py's bytes, and
  - edgevlm's dequantisation of those blocks, and of random blocks (random bytes, finite
    float16 d and m over the whole half range, codes at their extremes), gives gguf-py's
    float32 values, compared through a 64-bit FNV-1a hash of each block's values.
Run from the repository root:

    .venv/bin/python native/tests/gen_legacy_fixtures.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize, quantize

OUT = Path(__file__).resolve().parent / "legacy_fixtures.h"
Q = GGMLQuantizationType
TYPES = [Q.Q4_1, Q.Q5_0, Q.Q5_1]
SCALES: dict[Q, tuple[int, ...]] = {Q.Q4_1: (0, 2), Q.Q5_0: (0,), Q.Q5_1: (0, 2)}   # d, m
N_INPUT_BLOCKS = 64
N_RANDOM_BLOCKS = 48
EDGE_HALVES = [0x7BFF, 0xFBFF, 0x0001, 0x8001, 0x0400, 0x0000, 0x8000, 0x3C00]  # +-max, +-tiny


def make_input() -> np.ndarray:
    """64 blocks of 32 float32 values: random scales and offsets plus edge cases."""
    rng = np.random.default_rng(20261202)
    blocks = []
    for i in range(40):
        scale = np.float32(10.0 ** rng.uniform(-6, 4))
        offset = np.float32(scale * rng.uniform(-3, 3)) if i % 2 else np.float32(0)
        blocks.append(rng.standard_normal(32).astype(np.float32) * scale + offset)
    blocks.append(np.zeros(32, np.float32))                                  # all zero
    blocks.append(np.full(32, 0.75, np.float32))                             # constant: d = 0
    blocks.append(np.full(32, -3.0, np.float32))                             # constant < 0
    blocks.append(np.arange(-16, 16, dtype=np.float32) + np.float32(0.5))   # .5 ties
    blocks.append(np.arange(32, dtype=np.float32))                           # q5 grid, d = 1
    blocks.append(np.arange(16, dtype=np.float32).repeat(2))                 # q4 grid, d = 1
    same = np.full(32, 3.0, np.float32)
    same[5] = -3.0                                                           # |max| tie: first wins
    blocks.append(same)
    neg = rng.standard_normal(32).astype(np.float32)
    neg[7] = -9.0                                                            # max is negative
    blocks.append(neg)
    blocks.append(np.abs(rng.standard_normal(32)).astype(np.float32) + 100)  # all positive
    blocks.append(-np.abs(rng.standard_normal(32)).astype(np.float32) - 100)  # all negative
    blocks.append(np.full(32, 1e-30, np.float32))                            # d underflows fp16
    blocks.append((rng.standard_normal(32) * 1e-6).astype(np.float32))       # subnormal fp16 d
    blocks.append((rng.standard_normal(32) * 60000).astype(np.float32))      # d near fp16 max
    blocks.append(np.linspace(-6e4, 1e6, 32, dtype=np.float32))  # Q4_1's d overflows to inf
    one_hot = np.zeros(32, np.float32)
    one_hot[31] = -0.25
    blocks.append(one_hot)
    blocks.append(np.linspace(-1, 1, 32, dtype=np.float32))
    while len(blocks) < N_INPUT_BLOCKS:
        blocks.append(rng.uniform(-1, 1, 32).astype(np.float32))
    return np.concatenate(blocks).astype(np.float32)


def random_half(rng: np.random.Generator) -> int:
    """A finite float16 bit pattern: magnitude 10^[-8, 4.8], either sign."""
    mag = np.float16(min(10.0 ** rng.uniform(-8, 4.8), 65504.0))
    bits = int(np.array([mag], np.float16).view(np.uint16)[0])
    return bits | (0x8000 if rng.random() < 0.5 else 0)


def random_blocks(qtype: Q, rng: np.random.Generator) -> np.ndarray:
    """[n][type_size] uint8: random bytes, codes at their extremes in the first blocks, every
    float16 scale finite."""
    _, size = GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, (N_RANDOM_BLOCKS, size), dtype=np.uint8)
    blocks[0] = 0                                  # all zero
    blocks[1] = 0xFF                               # every code at its maximum
    blocks[2] = 0x00                               # every code at its minimum
    blocks[3] = np.tile(np.array([0x0F, 0xF0], np.uint8), size // 2 + 1)[:size]
    for i in range(1, N_RANDOM_BLOCKS):
        for k, at in enumerate(SCALES[qtype]):
            if 1 <= i <= 3:
                bits = EDGE_HALVES[(i - 1) * 2 + k]
            elif i - 4 < len(EDGE_HALVES):
                bits = EDGE_HALVES[(i - 4 + 3 * k) % len(EDGE_HALVES)]
            else:
                bits = random_half(rng)
            blocks[i, at], blocks[i, at + 1] = bits & 0xFF, bits >> 8
    return blocks


def fnv1a64(words: np.ndarray) -> int:
    """FNV-1a over the little-endian bytes of a float32 array's bit patterns."""
    h = 0xCBF29CE484222325
    for byte in words.astype("<f4").tobytes():
        h ^= byte
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def block_hashes(blocks: np.ndarray, qtype: Q) -> list[str]:
    """(blocks with a non-finite scale, which the loader refuses, dequantise to NaN and inf;
    test_legacy_quants.c skips their hashes)"""
    with np.errstate(invalid="ignore"):
        values = dequantize(blocks, qtype).reshape(len(blocks), 32).astype(np.float32)
    return [f"0x{fnv1a64(v):016x}ull" for v in values]


def c_array(name: str, ctype: str, values: list[str], per_line: int) -> str:
    lines = [", ".join(values[i : i + per_line]) for i in range(0, len(values), per_line)]
    body = ",\n    ".join(lines)
    return f"static const {ctype} {name}[{len(values)}] = {{\n    {body}\n}};\n"


def main() -> None:
    x = make_input()
    parts = [
        "/* Generated by gen_legacy_fixtures.py: Q4_1 / Q5_0 / Q5_1 blocks as the Python gguf\n"
        " * package quantises lqf_input, and the FNV-1a hash of each block's float32 values as\n"
        " * it dequantises them (bit-exact with llama.cpp's reference functions). Do not\n"
        " * edit. */\n",
        f"#define LQF_N {x.size}\n#define LQF_RANDOM_BLOCKS {N_RANDOM_BLOCKS}\n",
        c_array("lqf_input_bits", "uint32_t",
                [f"0x{v:08x}u" for v in x.view(np.uint32).tolist()], 6),
    ]
    for qtype in TYPES:
        name = qtype.name.lower()
        _, size = GGML_QUANT_SIZES[qtype]
        with np.errstate(over="ignore", invalid="ignore"):   # the block whose d is inf
            q = quantize(x.reshape(1, -1), qtype).reshape(-1, size)
        assert q.shape[0] == N_INPUT_BLOCKS
        parts.append(c_array(f"lqf_{name}", "uint8_t", [str(v) for v in q.ravel()], 20))
        parts.append(c_array(f"lqf_{name}_hash", "uint64_t", block_hashes(q, qtype), 3))
        rnd = random_blocks(qtype, np.random.default_rng(int(qtype) * 1000 + 7))
        assert np.all(np.isfinite(dequantize(rnd, qtype))), qtype.name
        parts.append(c_array(f"lqf_{name}_random", "uint8_t", [str(v) for v in rnd.ravel()], 20))
        parts.append(c_array(f"lqf_{name}_random_hash", "uint64_t", block_hashes(rnd, qtype), 3))
    OUT.write_text("".join(parts), encoding="utf-8")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
