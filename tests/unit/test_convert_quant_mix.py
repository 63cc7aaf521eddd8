"""The rules of llama.cpp's mixes (``convert/quant_mix.py``) on shapes the tiny test model of
tests/native/test_convert_kquants.py does not have: Qwen3-VL-2B's 28 layers, GQA below 4,
an output row that does not divide into 256-value blocks, and the fallback chain."""

from __future__ import annotations

import logging

import pytest
from gguf import GGMLQuantizationType

from edgevlm.convert.quant_mix import MIXES, TextShape, fit_rows, mix_type, use_more_bits

Q = GGMLQuantizationType
QWEN3VL_2B = TextShape(n_layer=28, n_gqa=2, tied=True)   # 16 query heads, 8 KV heads


def test_use_more_bits_on_28_layers_is_llama_cpps_half() -> None:
    # n/8 = 3, 7n/8 = 24: layers 0-2, 24-27 and every third from 5
    assert {i for i in range(28) if use_more_bits(i, 28)} == {
        0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 24, 25, 26, 27}


def test_q4_k_m_on_qwen3vl_2b() -> None:
    mix = MIXES["q4_k_m"]
    assert mix_type(mix, "token_embd.weight", 2048, QWEN3VL_2B) == Q.Q6_K   # tied: output
    assert mix_type(mix, "blk.5.attn_v.weight", 2048, QWEN3VL_2B) == Q.Q6_K
    assert mix_type(mix, "blk.6.attn_v.weight", 2048, QWEN3VL_2B) == Q.Q4_K
    assert mix_type(mix, "blk.27.ffn_down.weight", 6144, QWEN3VL_2B) == Q.Q6_K
    assert mix_type(mix, "blk.13.ffn_down.weight", 6144, QWEN3VL_2B) == Q.Q4_K
    assert mix_type(mix, "blk.0.attn_output.weight", 2048, QWEN3VL_2B) == Q.Q4_K


def test_iq4_xs_attn_v_gets_q5_k_only_from_gqa_4() -> None:
    mix = MIXES["iq4_xs"]
    assert mix_type(mix, "blk.9.attn_v.weight", 2048, QWEN3VL_2B) == Q.IQ4_XS
    gqa4 = TextShape(n_layer=36, n_gqa=4, tied=False)                     # Qwen3-VL-8B
    assert mix_type(mix, "blk.9.attn_v.weight", 4096, gqa4) == Q.Q5_K
    assert mix_type(mix, "token_embd.weight", 4096, gqa4) == Q.IQ4_XS
    assert mix_type(mix, "output.weight", 4096, gqa4) == Q.Q6_K
    assert mix_type(mix, "blk.3.ffn_down.weight", 12288, gqa4) == Q.Q5_K   # 3 < 36/8
    assert mix_type(mix, "blk.4.ffn_down.weight", 12288, gqa4) == Q.IQ4_XS


def test_q3_k_m_first_layers_and_attn_output() -> None:
    mix, shape = MIXES["q3_k_m"], TextShape(n_layer=36, n_gqa=4, tied=True)
    assert [mix_type(mix, f"blk.{i}.attn_v.weight", 4096, shape) for i in (0, 1, 2)] == [
        Q.Q5_K, Q.Q5_K, Q.Q4_K]
    assert [mix_type(mix, f"blk.{i}.ffn_down.weight", 4096, shape) for i in (0, 1, 2)] == [
        Q.Q5_K, Q.Q5_K, Q.Q4_K]                                          # 36/16 = 2
    assert mix_type(mix, "blk.7.attn_output.weight", 4096, shape) == Q.Q4_K
    assert mix_type(mix, "blk.7.ffn_up.weight", 4096, shape) == Q.Q3_K


def test_an_output_row_off_the_256_grid_is_q8_0_like_llama_cpp() -> None:
    shape = TextShape(n_layer=4, n_gqa=2, tied=True)
    assert mix_type(MIXES["q4_k_m"], "token_embd.weight", 320, shape) == Q.Q8_0
    assert mix_type(MIXES["q6_k"], "token_embd.weight", 512, shape) == Q.Q6_K


@pytest.mark.parametrize(("wanted", "width", "stored"), [
    (Q.Q4_K, 512, Q.Q4_K), (Q.Q4_K, 320, Q.Q5_0), (Q.Q5_K, 320, Q.Q5_1),
    (Q.Q6_K, 320, Q.Q8_0), (Q.IQ4_XS, 320, Q.IQ4_NL), (Q.Q3_K, 320, Q.Q4_0),
    (Q.Q2_K, 320, Q.Q4_0), (Q.Q4_K, 80, Q.F16), (Q.IQ4_XS, 80, Q.F16), (Q.Q8_0, 80, Q.F16),
    (Q.Q4_0, 80, Q.F16), (Q.F16, 80, Q.F16)])
def test_fallback_chain(wanted: Q, width: int, stored: Q) -> None:
    assert fit_rows("blk.0.ffn_down.weight", wanted, width) == stored


def test_a_fallback_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="edgevlm.convert.quant_mix"):
        assert fit_rows("blk.0.ffn_down.weight", Q.Q4_K, 320) == Q.Q5_0
    assert "rows of 320 values are not a multiple of 256; Q4_K falls back to Q5_0" in caplog.text


# llama.cpp's own record of its choices: tests/snapshots/qwen3-0.6b.schema (commit
# a45da44f0c2b686c09e7ea44599bf8766ef19bb2), written by llama_quant_compute_types for Qwen3-0.6B
# (28 layers, 16 query / 8 KV heads, n_embd 1024, n_ff 3072, output.weight present): per mix,
# the tensors whose type differs from the mix's default, restated here as layer sets.
_MORE = {0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 24, 25, 26, 27}
_ALL = set(range(28))
QWEN3_0_6B_EXCEPTIONS: dict[str, list[tuple[str, Q, set[int]]]] = {
    "q4_k_m": [("attn_v", Q.Q6_K, _MORE), ("ffn_down", Q.Q6_K, _MORE)],
    "q5_k_m": [("attn_v", Q.Q6_K, _MORE), ("ffn_down", Q.Q6_K, _MORE)],
    "q6_k": [],
    "q3_k_m": [("attn_output", Q.Q4_K, _ALL), ("attn_v", Q.Q5_K, {0, 1}),
               ("attn_v", Q.Q4_K, _ALL - {0, 1}), ("ffn_down", Q.Q5_K, {0}),
               ("ffn_down", Q.Q4_K, _ALL - {0})],
    "iq4_xs": [("ffn_down", Q.Q5_K, {0, 1, 2})],
}


@pytest.mark.parametrize("mix_name", list(MIXES))
def test_the_mix_matches_llama_cpps_snapshot_for_qwen3_0_6b(mix_name: str) -> None:
    mix, shape = MIXES[mix_name], TextShape(n_layer=28, n_gqa=2, tied=False)
    widths = {"attn_q": 1024, "attn_k": 1024, "attn_v": 1024, "attn_output": 2048,
              "ffn_gate": 1024, "ffn_up": 1024, "ffn_down": 3072}
    got = {(kind, layer): mix_type(mix, f"blk.{layer}.{kind}.weight", width, shape)
           for layer in range(28) for kind, width in widths.items()}
    want = {(kind, layer): mix.default for layer in range(28) for kind in widths}
    for kind, qtype, layers in QWEN3_0_6B_EXCEPTIONS[mix_name]:
        want.update({(kind, layer): qtype for layer in layers})
    assert got == want
    assert mix_type(mix, "output.weight", 1024, shape) == Q.Q6_K
    assert mix_type(mix, "token_embd.weight", 1024, shape) == mix.default
