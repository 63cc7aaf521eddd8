"""Decode tokens/s of a Qwen3-VL-2B-shaped text model on an RK3588 (4 Cortex-A76 threads),
projected from the measured instructions per 256 weights (bench/neon_counts.py).

tokens/s = min(bandwidth bound, compute bound):
- bandwidth bound = usable DRAM bandwidth / bytes read per token (every weight matrix once,
  the tied embedding as the output matrix once, the f16 KV cache of ``ctx`` positions);
- compute bound = cores * clock * IPC / instructions per token (the dot products' measured
  instructions per 256 weights times the weights of each type, plus each output row's fixed
  call cost). Everything else (norms, RoPE, attention, activation quantisation, threading)
  is left out, so this bound is optimistic.

The mixes follow llama.cpp's llama-quantize: with tied embeddings the token embedding is the
output matrix, stored Q6_K by every ftype here but Q8_0 (Q8_0) and Q6_K (Q6_K); Q4_K_M
puts attn_v and ffn_down of ``use_more_bits`` layers (14 of 28) in Q6_K, the rest Q4_K.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol


class PerBlock(Protocol):
    """A dot product's measured cost (neon_counts.Count)."""

    @property
    def per_256(self) -> float: ...
    @property
    def fixed(self) -> float: ...


@dataclass(frozen=True)
class Assumptions:
    bandwidth_gbs: float = 17.0   # LPDDR4x, usable
    cores: int = 4                # the A76 cluster, one thread each
    ghz: float = 2.4
    ipc: float = 2.0              # instructions a cycle an A76 core sustains in these loops
    ctx: int = 256                # positions in the KV cache (f16) a decode step reads
    # Qwen3-VL-2B text model
    layers: int = 28
    hidden: int = 2048
    intermediate: int = 6144
    heads: int = 16
    kv_heads: int = 8
    head_dim: int = 128
    vocab: int = 151936


# GGUF block bytes / elements
BYTES_PER_WEIGHT = {"q8_0": 34 / 32, "q4_0": 18 / 32, "q5_0": 22 / 32, "iq4_nl": 18 / 32,
                    "q2_K": 84 / 256, "q3_K": 110 / 256, "q4_K": 144 / 256, "q5_K": 176 / 256,
                    "q6_K": 210 / 256, "iq4_xs": 136 / 256}


def use_more_bits(i: int, n: int) -> bool:
    """llama.cpp's llama-quant.cpp: the layers whose attn_v / ffn_down Q4_K_M stores Q6_K."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def matrices(a: Assumptions, mix: str) -> list[tuple[str, int, int]]:
    """(type, rows, columns) of every matrix a decode step multiplies."""
    base = {"Q8_0": "q8_0", "Q4_0": "q4_0", "Q4_K_M": "q4_K", "Q6_K": "q6_K",
            "IQ4_XS": "iq4_xs"}[mix]
    q_out, kv_out = a.heads * a.head_dim, a.kv_heads * a.head_dim
    out: list[tuple[str, int, int]] = []
    for i in range(a.layers):
        bump = "q6_K" if mix == "Q4_K_M" and use_more_bits(i, a.layers) else base
        out += [(base, q_out, a.hidden), (base, kv_out, a.hidden), (bump, kv_out, a.hidden),
                (base, a.hidden, q_out),
                (base, a.intermediate, a.hidden), (base, a.intermediate, a.hidden),
                (bump, a.hidden, a.intermediate)]
    out.append(("q8_0" if mix == "Q8_0" else "q6_K", a.vocab, a.hidden))
    return out


MIXES = ("Q8_0", "Q4_0", "Q4_K_M", "Q6_K", "IQ4_XS")


def project(per_256: Mapping[str, tuple[PerBlock, PerBlock]],
            a: Assumptions) -> list[dict[str, Any]]:
    """One row per mix whose types were all measured: bytes, instructions, both bounds."""
    rows = []
    kv_bytes = a.ctx * a.layers * 2 * a.kv_heads * a.head_dim * 2
    for mix in MIXES:
        mats = matrices(a, mix)
        if any(t not in per_256 for t, _, _ in mats):
            continue
        weight_bytes = sum(BYTES_PER_WEIGHT[t] * r * c for t, r, c in mats)
        row: dict[str, Any] = {"mix": mix, "weights": sum(r * c for _, r, c in mats),
                               "bytes_per_token": weight_bytes + kv_bytes,
                               "bw_tok_s": a.bandwidth_gbs * 1e9 / (weight_bytes + kv_bytes)}
        for who, side in (("ours", 0), ("ggml", 1)):
            instr = sum(per_256[t][side].per_256 * r * c / 256 + per_256[t][side].fixed * r
                        for t, r, c in mats)
            compute = a.cores * a.ghz * 1e9 * a.ipc / instr
            row[f"{who}_instr_per_token"] = instr
            row[f"{who}_compute_tok_s"] = compute
            row[f"{who}_tok_s"] = min(compute, row["bw_tok_s"])
        rows.append(row)
    return rows


def projection_markdown(rows: list[dict[str, Any]], a: Assumptions) -> str:
    lines = [
        "| mix | bytes read / token | bandwidth bound | ours: instr / token | ours: compute "
        "bound | ours: tok/s | ggml: instr / token | ggml: compute bound | ggml: tok/s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['mix']} | {r['bytes_per_token'] / 1e6:.0f} MB | {r['bw_tok_s']:.1f} tok/s | "
            f"{r['ours_instr_per_token'] / 1e9:.2f} G | {r['ours_compute_tok_s']:.1f} tok/s | "
            f"**{r['ours_tok_s']:.1f}** | {r['ggml_instr_per_token'] / 1e9:.2f} G | "
            f"{r['ggml_compute_tok_s']:.1f} tok/s | **{r['ggml_tok_s']:.1f}** |")
    kv = a.ctx * a.layers * 2 * a.kv_heads * a.head_dim * 2
    lines += [
        "",
        "Assumptions:",
        f"- model: Qwen3-VL-2B text decoder, {a.layers} layers, hidden {a.hidden}, "
        f"intermediate {a.intermediate}, {a.heads} heads / {a.kv_heads} KV heads of "
        f"{a.head_dim}, vocabulary {a.vocab} with the embedding tied to the output matrix "
        "(read whole once a token as the LM head; the embedding lookup of one row is ignored);",
        "- mixes as llama-quantize makes them: the tied output matrix in Q6_K (Q8_0 in the "
        "Q8_0 mix); Q4_K_M: Q4_K, with attn_v and ffn_down in Q6_K in the 14 of 28 layers "
        "llama.cpp's use_more_bits picks; the other mixes one type for every layer matrix; "
        "bytes per weight from the GGUF block sizes; norms (f32) ignored;",
        f"- bandwidth bound: {a.bandwidth_gbs:g} GB/s usable LPDDR4x, every weight byte read "
        f"once per token (no reuse from the 3 MB L3) plus the f16 KV cache of {a.ctx} "
        f"positions ({kv / 1e6:.1f} MB);",
        f"- compute bound: {a.cores} Cortex-A76 cores x {a.ghz:g} GHz x IPC {a.ipc:g} "
        "(an assumption: 2 instructions a cycle sustained; the A76 decodes 4 a cycle and has "
        "two 128-bit ASIMD pipes, and about half of these loops' instructions are ASIMD data "
        "processing, the rest loads, integer and branches - see the counts' table), divided "
        "by the measured instructions per 256 weights of each matrix's type times its "
        "weights, plus the fixed cost of a dot product call (the callee's; the caller's loop "
        "not counted) times its rows; perfect scaling over 4 threads;",
        "- left out: attention over the KV cache, norms, RoPE, SiLU, the activations' Q8_0/Q8_K "
        "quantisation, thread synchronisation, the Cortex-A55 cores; and cycles: the qemu "
        "count says how many instructions run, not how long they take (latencies, which pipe "
        "each instruction issues to, and the per-instruction throughputs, which differ "
        "between e.g. SDOT, TBL, lane inserts and integer multiplies, are not modelled).",
    ]
    return "\n".join(lines)
