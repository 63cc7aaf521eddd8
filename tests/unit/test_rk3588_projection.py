"""The RK3588 projection's arithmetic (bench/neon_counts/rk3588_projection.py), without qemu.

bench/neon_counts.py needs a cross compiler and qemu-aarch64, which CI does not have; what it
prints from the counts is plain arithmetic, checked here on made-up counts whose results can
be worked out by hand: the matrix shapes of the 2B text decoder and vision tower, how often
ours packs the activations, and the bounds of decode, prefill and encode.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "neon_counts"))

import rk3588_projection as rp


@dataclass(frozen=True)
class Dot:
    per_256: float
    fixed: float = 0.0


@dataclass(frozen=True)
class Gemm:
    per_weight_token: float
    per_weight: float = 0.0
    per_token_column: float = 0.0
    per_call: float = 0.0


A = rp.Assumptions()
PEAK = A.cores * A.ghz * 1e9 * A.ipc      # instructions a second, all cores


def test_layer_matrices_are_the_2b_decoder_layer() -> None:
    assert rp.layer_matrices(A) == [(2048, 2048), (1024, 2048), (1024, 2048), (2048, 2048),
                                    (6144, 2048), (6144, 2048), (2048, 6144)]
    per_layer = sum(r * c for r, c in rp.layer_matrices(A))
    assert per_layer == 2 * 2048 * 2048 + 2 * 1024 * 2048 + 3 * 6144 * 2048


@pytest.mark.parametrize(("rows", "packs"), [(1024, 4), (2048, 4), (4096, 4), (6144, 8),
                                             (5000, 8), (16, 4)])
def test_ours_packs_once_per_thread_and_1024_rows(rows: int, packs: int) -> None:
    assert rp.ours_packs(rows, 4, 1024) == packs


def test_product_instructions_adds_the_four_terms() -> None:
    f = Gemm(per_weight_token=0.5, per_weight=2.0, per_token_column=3.0, per_call=100.0)
    got = rp.product_instructions(f, rows=64, cols=256, tokens=10, packs=4, calls=4)
    assert got == 0.5 * 64 * 256 * 10 + 2.0 * 64 * 256 + 3.0 * 256 * 10 * 4 + 100.0 * 4


def test_prefill_one_instruction_per_weight_token() -> None:
    """At one instruction per weight x token and nothing else, the compute bound is the peak
    over the weights, the bandwidth bound the prompt over the weight bytes' read time."""
    fits = {"q8_0": (Gemm(1.0), Gemm(0.5))}
    (row,) = rp.project_prefill(fits, A)
    weights = sum(r * c for r, c in rp.layer_matrices(A)) * A.layers
    assert row["mix"] == "Q8_0" and row["weights"] == weights
    assert row["ours_instr"] == pytest.approx(weights * A.prompt_tokens)
    assert row["ours_tok_s"] == pytest.approx(PEAK / weights)
    assert row["ggml_tok_s"] == pytest.approx(2 * PEAK / weights)
    assert row["bytes"] == pytest.approx(weights * 34 / 32)
    assert row["bw_tok_s"] == pytest.approx(A.prompt_tokens * A.bandwidth_gbs * 1e9
                                            / row["bytes"])


@pytest.mark.parametrize(("wtype", "packs_of"), [
    ("f16", lambda rows: A.cores),    # gemm_dq, a 512-token prompt: once per thread
    ("q4_0", lambda rows: rp.ours_packs(rows, A.cores, rp.SDOT_Y_BLOCK_ROWS))])
def test_prefill_packing_counts_per_side(wtype: str, packs_of: Callable[[int], int]) -> None:
    """Ours packs the activations per thread (gemm_dq up to EV_GEMM_ONE_BLOCK tokens: once,
    F16) or per thread and block of rows (the SDOT products: their 512-row y blocks, Q4_0);
    ggml quantises them once per product."""
    assert A.prompt_tokens <= A.gemm_one_block
    fits = {wtype: (Gemm(0.0, per_token_column=1.0), Gemm(0.0, per_token_column=1.0))}
    (row,) = rp.project_prefill(fits, A)
    t = A.prompt_tokens
    ours = sum(c * t * packs_of(r) for r, c in rp.layer_matrices(A))
    ggml = sum(c * t for _, c in rp.layer_matrices(A))
    assert row["ours_instr"] == pytest.approx(ours * A.layers)
    assert row["ggml_instr"] == pytest.approx(ggml * A.layers)


def test_gemm_dq_packs_per_row_block_past_one_block() -> None:
    """Past EV_GEMM_ONE_BLOCK tokens gemm_dq repacks the token blocks per EV_GEMM_NC rows."""
    fits = {"f16": (Gemm(0.0, per_token_column=1.0), Gemm(0.0, per_token_column=1.0))}
    big = replace(A, prompt_tokens=A.gemm_one_block + 6)
    (row,) = rp.project_prefill(fits, big)
    t = big.prompt_tokens
    ours = sum(c * t * rp.ours_packs(r, A.cores, A.gemm_nc) for r, c in rp.layer_matrices(A))
    assert row["ours_instr"] == pytest.approx(ours * A.layers)


def test_prefill_and_encode_skip_unmeasured_types() -> None:
    fits = {"f16": (Gemm(1.0), Gemm(1.0)), "f16+fp16": (Gemm(1.0), Gemm(0.25))}
    assert [r["mix"] for r in rp.project_prefill(fits, A)] == ["F16", "F16, ggml +fp16"]
    rows = rp.project_encode(fits, A, rp.Vision())
    assert [r["weights_type"] for r in rows] == ["F16", "F16, ggml +fp16"]
    assert rows[1]["bytes"] == rows[0]["bytes"]           # "+fp16" is a build, not a type


def test_vit_shapes_of_a_448_image() -> None:
    v = rp.Vision()
    assert v.patches == 784
    shapes = rp.vit_matrices(v)
    assert len(shapes) == 2 + 4 * 24 + 2 * 4
    assert shapes[0] == (1024, 3 * 16 * 16, 784)
    assert shapes[-1] == (2048, 4096, 196)
    weights = sum(r * c for r, c, _ in shapes)
    assert weights == 2 * 1024 * 768 + 24 * (3 * 1024 * 1024 + 1024 * 1024
                                             + 2 * 4096 * 1024) + 4 * (4096 * 4096 + 2048 * 4096)
    assert rp.attention_macs(v) == 24 * 2 * 784 * 784 * 1024


def test_encode_seconds_at_one_instruction_per_weight_token() -> None:
    fits = {"q8_0": (Gemm(1.0), Gemm(1.0))}
    (row,) = rp.project_encode(fits, A, rp.Vision())
    macs = sum(r * c * t for r, c, t in rp.vit_matrices(rp.Vision()))
    assert row["ours_s"] == pytest.approx(macs / PEAK)
    assert row["bw_s"] == pytest.approx(row["bytes"] / (A.bandwidth_gbs * 1e9))


def test_decode_f16_row_reads_an_f16_output_matrix() -> None:
    per_256 = {"f16": (Dot(256.0), Dot(128.0))}
    (row,) = rp.project(per_256, A)
    mats = rp.matrices(A, "F16")
    assert row["mix"] == "F16" and mats[-1] == ("f16", A.vocab, A.hidden)
    weights = sum(r * c for _, r, c in mats)
    kv = A.ctx * A.layers * 2 * A.kv_heads * A.head_dim * 2
    assert row["bytes_per_token"] == pytest.approx(2 * weights + kv)
    assert row["ours_instr_per_token"] == pytest.approx(weights)
    assert row["ggml_compute_tok_s"] == pytest.approx(2 * PEAK / weights)
    assert math.isclose(row["ours_tok_s"], min(PEAK / weights, row["bw_tok_s"]))


def test_markdown_renders() -> None:
    fits = {t: (Gemm(0.6, 7.0, 4.0, 1000.0), Gemm(0.12, 0.5, 4.3, 90.0))
            for t in ("q8_0", "q4_0", "f16")}
    pre = rp.prefill_markdown(rp.project_prefill(fits, A), A)
    enc = rp.encode_markdown(rp.project_encode(fits, A, rp.Vision()), A, rp.Vision())
    assert pre.count("\n| ") == 4 and "512-token prompt" in pre
    assert enc.count("\n| ") == 3 and "448x448" in enc and "784 patches" in enc
