"""Decode tokens/s of a Qwen3-VL-2B-shaped text model on an RK3588 (4 Cortex-A76 threads),
projected from the measured instructions per 256 weights (bench/neon_counts.py), and its
prefill tokens/s and the vision tower's encode time, projected from the many-token products'
measured instructions per weight x token (project_prefill, project_encode).

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
An F16 model (convert_hf_to_gguf's default) keeps every matrix, the tied output too, in F16.

Prefill and encode: every matrix is multiplied once for the whole batch (the prompt, the
image's patches), so the weights are read once per batch (the bandwidth bound is far away) and
the count is instructions(M, K, T) = per_weight_token*M*K*T + per_weight*M*K +
per_token_column*K*T*packs + per_call*threads (neon_counts.Fit), with packs how often the
activations are packed (ours: once per thread when the batch is at most EV_GEMM_ONE_BLOCK
tokens, else once per thread and block of EV_GEMM_NC rows; ggml quantises them once per
product).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol


class PerBlock(Protocol):
    """A dot product's measured cost (neon_counts.Count)."""

    @property
    def per_256(self) -> float: ...
    @property
    def fixed(self) -> float: ...


class PerWeightToken(Protocol):
    """A many-token product's measured cost (neon_counts.Fit)."""

    @property
    def per_weight_token(self) -> float: ...
    @property
    def per_weight(self) -> float: ...
    @property
    def per_token_column(self) -> float: ...
    @property
    def per_call(self) -> float: ...


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
    prompt_tokens: int = 512      # prefill: one batch of this many tokens
    gemm_nc: int = 1024           # EV_GEMM_NC: ours packs the activations once per NC rows
    gemm_one_block: int = 1200    # EV_GEMM_ONE_BLOCK: up to this many tokens, once per thread


@dataclass(frozen=True)
class Vision:
    """The Qwen3-VL-2B vision tower (tools/make_2b_model.py's vision_config) and one image."""

    image: int = 448              # side of a square image, pixels
    patch: int = 16
    channels: int = 3
    merge: int = 2                # spatial merge: 2x2 patches into one token
    depth: int = 24
    hidden: int = 1024
    intermediate: int = 4096
    out_hidden: int = 2048
    deepstack: int = 3            # DeepStack mergers besides the final one

    @property
    def patches(self) -> int:
        return (self.image // self.patch) ** 2


# GGUF block bytes / elements
BYTES_PER_WEIGHT = {"q8_0": 34 / 32, "q4_0": 18 / 32, "q5_0": 22 / 32, "iq4_nl": 18 / 32,
                    "q2_K": 84 / 256, "q3_K": 110 / 256, "q4_K": 144 / 256, "q5_K": 176 / 256,
                    "q6_K": 210 / 256, "iq4_xs": 136 / 256, "f16": 2.0}


def use_more_bits(i: int, n: int) -> bool:
    """llama.cpp's llama-quant.cpp: the layers whose attn_v / ffn_down Q4_K_M stores Q6_K."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def matrices(a: Assumptions, mix: str) -> list[tuple[str, int, int]]:
    """(type, rows, columns) of every matrix a decode step multiplies."""
    base = {"Q8_0": "q8_0", "Q4_0": "q4_0", "Q4_K_M": "q4_K", "Q6_K": "q6_K",
            "IQ4_XS": "iq4_xs", "F16": "f16"}[mix]
    q_out, kv_out = a.heads * a.head_dim, a.kv_heads * a.head_dim
    out: list[tuple[str, int, int]] = []
    for i in range(a.layers):
        bump = "q6_K" if mix == "Q4_K_M" and use_more_bits(i, a.layers) else base
        out += [(base, q_out, a.hidden), (base, kv_out, a.hidden), (bump, kv_out, a.hidden),
                (base, a.hidden, q_out),
                (base, a.intermediate, a.hidden), (base, a.intermediate, a.hidden),
                (bump, a.hidden, a.intermediate)]
    out.append((base if mix in ("Q8_0", "F16") else "q6_K", a.vocab, a.hidden))
    return out


MIXES = ("Q8_0", "Q4_0", "Q4_K_M", "Q6_K", "IQ4_XS", "F16")


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
        "not counted) times its rows; perfect scaling over 4 threads; F16 (ours: ev_matmul's "
        "4-row float tiles; ggml: ggml_vec_dot_f16 on F16-rounded activations) from the "
        "prefill harness's one-token products of 2048-wide rows, each row's costs in the "
        "count;",
        "- left out: attention over the KV cache, norms, RoPE, SiLU, the activations' Q8_0/Q8_K "
        "quantisation, thread synchronisation, the Cortex-A55 cores; and cycles: the qemu "
        "count says how many instructions run, not how long they take (latencies, which pipe "
        "each instruction issues to, and the per-instruction throughputs, which differ "
        "between e.g. SDOT, TBL, lane inserts and integer multiplies, are not modelled).",
    ]
    return "\n".join(lines)


# ---- prefill and encode ------------------------------------------------------------------

PREFILL_MIXES = {"Q8_0": "q8_0", "Q4_0": "q4_0", "F16": "f16",
                 "F16, ggml +fp16": "f16+fp16", "Q8_0, ours fast": "q8_0-fast",
                 "Q4_0, ours fast": "q4_0-fast"}
# ours' SDOT products of Q4_0/Q8_0 (arm_neon_qgemm.c): the activations are split once per
# thread, token block and y block (Y_BLOCK_BYTES / (4 x TB) = 512 rows at the TB = 128-token
# blocks), the weights packed once per token block of TB tokens; gemm_dq (F16): once per
# thread up to EV_GEMM_ONE_BLOCK tokens (else per EV_GEMM_NC rows), the weights once per call
OURS_SDOT_TYPES = ("q4_0", "q8_0", "q4_0-fast", "q8_0-fast")
SDOT_TOKEN_BLOCK, SDOT_Y_BLOCK_ROWS = 128, 512


def base_type(wtype: str) -> str:
    """The weight type of a measured product's name ("q8_0-fast", "f16+fp16" -> the type)."""
    return wtype.split("+")[0].removesuffix("-fast")


def layer_matrices(a: Assumptions) -> list[tuple[int, int]]:
    """(rows, columns) of one decoder layer's matrices: q, k, v, o, gate, up, down."""
    q_out, kv_out = a.heads * a.head_dim, a.kv_heads * a.head_dim
    return [(q_out, a.hidden), (kv_out, a.hidden), (kv_out, a.hidden), (a.hidden, q_out),
            (a.intermediate, a.hidden), (a.intermediate, a.hidden), (a.hidden, a.intermediate)]


def ours_packs(rows: int, threads: int, nc: int) -> int:
    """How often ours packs a product's activations: ev_matmul gives each thread a contiguous
    share of the rows, and each packs them once per nc of its rows (gemm_dq past
    EV_GEMM_ONE_BLOCK tokens: EV_GEMM_NC; the SDOT products: their y block)."""
    share = math.ceil(rows / threads)
    return threads * math.ceil(share / nc)


def product_instructions(f: PerWeightToken, rows: int, cols: int, tokens: int, packs: int,
                         calls: int, weight_packs: int = 1) -> float:
    """One many-token product's instructions from its fitted costs."""
    return (f.per_weight_token * rows * cols * tokens + f.per_weight * rows * cols * weight_packs
            + f.per_token_column * cols * tokens * packs + f.per_call * calls)


def batch_instructions(f: PerWeightToken, shapes: list[tuple[int, int, int]], a: Assumptions,
                       ours: bool, wtype: str = "") -> float:
    """The products (rows, columns, tokens) of one batch, on a.cores threads."""
    sdot = ours and wtype in OURS_SDOT_TYPES
    nc = SDOT_Y_BLOCK_ROWS if sdot else a.gemm_nc

    def packs(r: int, t: int) -> int:
        if not ours:
            return 1
        if not sdot and t <= a.gemm_one_block:
            return a.cores   # gemm_dq: every token packed once per thread and K chunk
        return ours_packs(r, a.cores, nc)

    return sum(product_instructions(f, r, c, t, packs(r, t), a.cores,
                                    math.ceil(t / SDOT_TOKEN_BLOCK) if sdot else 1)
               for r, c, t in shapes)


def bounds_row(fits: Mapping[str, tuple[PerWeightToken, PerWeightToken]], wtype: str,
               shapes: list[tuple[int, int, int]], a: Assumptions) -> dict[str, Any]:
    """Bytes, both implementations' instructions and seconds of one batch: compute-bound
    (cores x clock x IPC) or bandwidth-bound (every weight byte read once), the slower."""
    weights = sum(r * c for r, c, _ in shapes)
    row: dict[str, Any] = {"weights": weights,
                           "bytes": BYTES_PER_WEIGHT[base_type(wtype)] * weights}
    row["bw_s"] = row["bytes"] / (a.bandwidth_gbs * 1e9)
    for who, side in (("ours", 0), ("ggml", 1)):
        instr = batch_instructions(fits[wtype][side], shapes, a, ours=side == 0, wtype=wtype)
        row[f"{who}_instr"] = instr
        row[f"{who}_compute_s"] = instr / (a.cores * a.ghz * 1e9 * a.ipc)
        row[f"{who}_s"] = max(row[f"{who}_compute_s"], row["bw_s"])
    return row


def project_prefill(fits: Mapping[str, tuple[PerWeightToken, PerWeightToken]],
                    a: Assumptions) -> list[dict[str, Any]]:
    """One row per measured type: a prompt of a.prompt_tokens through the 28 layers' matrices
    in one batch (the LM head, run for the last token alone, left out)."""
    rows = []
    shapes = [(r, c, a.prompt_tokens) for r, c in layer_matrices(a)] * a.layers
    for mix, wtype in PREFILL_MIXES.items():
        if wtype not in fits:
            continue
        row = {"mix": mix, **bounds_row(fits, wtype, shapes, a)}
        for who in ("ours", "ggml"):
            row[f"{who}_tok_s"] = a.prompt_tokens / row[f"{who}_s"]
        row["bw_tok_s"] = a.prompt_tokens / row["bw_s"]
        rows.append(row)
    return rows


def vit_matrices(v: Vision) -> list[tuple[int, int, int]]:
    """(rows, columns, tokens) of every matrix product of one image's encode: the patch
    embedding (two temporal slices, as vit.c's patch_embed), the blocks' qkv, proj, fc1, fc2
    over every patch, the final and the DeepStack mergers' fc1, fc2 over the merged tokens."""
    n, pp = v.patches, v.channels * v.patch * v.patch
    merged, wide = n // (v.merge * v.merge), v.hidden * v.merge * v.merge
    out = [(v.hidden, pp, n)] * 2
    out += [(3 * v.hidden, v.hidden, n), (v.hidden, v.hidden, n),
            (v.intermediate, v.hidden, n), (v.hidden, v.intermediate, n)] * v.depth
    out += [(wide, wide, merged), (v.out_hidden, wide, merged)] * (1 + v.deepstack)
    return out


def attention_macs(v: Vision) -> int:
    """Multiply-adds of the ViT's full attention (QK^T and PV, every layer), not projected."""
    return v.depth * 2 * v.patches * v.patches * v.hidden


ENCODE_TYPES = {"F16": "f16", "F16, ggml +fp16": "f16+fp16", "Q8_0": "q8_0",
                "Q8_0, ours fast": "q8_0-fast"}


def project_encode(fits: Mapping[str, tuple[PerWeightToken, PerWeightToken]], a: Assumptions,
                   v: Vision) -> list[dict[str, Any]]:
    """One row per measured vision weight type: one image's matrix products."""
    shapes = vit_matrices(v)
    return [{"weights_type": name, **bounds_row(fits, wtype, shapes, a)}
            for name, wtype in ENCODE_TYPES.items() if wtype in fits]


def prefill_markdown(rows: list[dict[str, Any]], a: Assumptions) -> str:
    lines = [
        f"Prefill of a {a.prompt_tokens}-token prompt (one batch), RK3588, 4 A76 threads:",
        "",
        "| weights | weight bytes (read once) | bandwidth bound | ours: instr | ours: compute "
        "bound | ours: prompt | ggml: instr | ggml: compute bound | ggml: prompt |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['mix']} | {r['bytes'] / 1e6:.0f} MB | {r['bw_tok_s']:.0f} tok/s | "
            f"{r['ours_instr'] / 1e9:.0f} G | {r['ours_tok_s']:.1f} tok/s | "
            f"**{r['ours_s']:.1f} s** | {r['ggml_instr'] / 1e9:.0f} G | "
            f"{r['ggml_tok_s']:.1f} tok/s | **{r['ggml_s']:.1f} s** |")
    weights = sum(r * c for r, c in layer_matrices(a)) * a.layers
    lines += [
        "",
        f"- the {a.layers} layers' 7 matrices ({weights / 1e9:.2f} G weights) times "
        f"{a.prompt_tokens} tokens, all of one type; the LM head (the last "
        "token's logits only), attention over the prompt, norms, RoPE, SiLU left out;",
        "- instructions = per weight x token x weights x tokens + per weight x weights + per "
        "token x column x columns x tokens x packings + per call x threads, from the fitted "
        "counts above (ours: F16's gemm_dq packs the activations once per thread and 1024 "
        "rows, the Q4_0/Q8_0 SDOT products split them once per thread, 128-token block and "
        "512 rows and pack the weights once per 128-token block; ggml quantises them once per "
        "product, F16 none; \"ours fast\": the neon-dotprod-fast set's gemm_q8x, ggml as "
        "above);",
        f"- compute bound: {a.cores} cores x {a.ghz:g} GHz x IPC {a.ipc:g}, perfect scaling; "
        f"bandwidth bound: the weights read once per batch at {a.bandwidth_gbs:g} GB/s.",
    ]
    return "\n".join(lines)


def encode_markdown(rows: list[dict[str, Any]], a: Assumptions, v: Vision) -> str:
    shapes = vit_matrices(v)
    macs = sum(r * c * t for r, c, t in shapes)
    lines = [
        f"Encode of one {v.image}x{v.image} image ({v.patches} patches of {v.patch}x{v.patch}, "
        f"{v.patches // (v.merge * v.merge)} tokens after the {v.merge}x{v.merge} merge), "
        "the vision tower's matrix products, RK3588, 4 A76 threads:",
        "",
        "| vision weights | weight bytes | bandwidth bound | ours: instr | ours: compute bound "
        "| ggml: instr | ggml: compute bound |",
        "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['weights_type']} | {r['bytes'] / 1e6:.0f} MB | {r['bw_s']:.2f} s | "
            f"{r['ours_instr'] / 1e9:.0f} G | **{r['ours_s']:.1f} s** | "
            f"{r['ggml_instr'] / 1e9:.0f} G | **{r['ggml_s']:.1f} s** |")
    lines += [
        "",
        f"- {v.depth} blocks of hidden {v.hidden}, intermediate {v.intermediate} (qkv, proj, "
        f"fc1, fc2) over {v.patches} patches, the patch embedding (2 x {v.hidden} x "
        f"{v.channels * v.patch * v.patch}), the final and {v.deepstack} DeepStack mergers "
        f"({v.hidden * v.merge * v.merge} -> {v.hidden * v.merge * v.merge} -> {v.out_hidden}) "
        f"over the merged tokens: {sum(r * c for r, c, _ in shapes) / 1e6:.0f} M weights, "
        f"{macs / 1e9:.0f} G multiply-adds;",
        f"- left out: the attention ({attention_macs(v) / 1e9:.0f} G multiply-adds more, "
        f"+{100 * attention_macs(v) / macs:.0f} %, ours through sgemm_f32), LayerNorms, GELU, "
        "the position embeddings and the 2D RoPE;",
        "- the same per weight x token counts as the text prefill (Q8_0: ours the SDOT "
        "gemm_q16x, fast gemm_q8x, ggml "
        "the q8_0_4x4 repack, if the projector's weights are loaded into the repacking buffer).",
    ]
    return "\n".join(lines)
