"""``edgevlm convert --type q4_k_m|q5_k_m|q6_k|q3_k_m|iq4_xs``: llama.cpp's tensor-type mixes,
quantised by the core's reference quantisers (``edgevlm_quantize_rows``).

A tiny Qwen3-VL whose text widths are multiples of 256 (hidden 256, MLP 512, 16 layers,
4 query heads per KV head, tied embeddings; weights N(0, 1/width) so the network stays in a
sane range) is converted with each mix, then:

* every tensor's type is the mix's, per name, from a table written out here from llama.cpp's
  ``src/llama-quant.cpp`` (``llama_tensor_get_type_impl``), not from the converter's code;
* gguf's numpy ``dequantize`` of each quantised matrix is close to the checkpoint's values
  (relative RMS error under a per-type bound, measured on these N(0, 1) rows);
* the core dequantises the written blocks bit for bit as gguf does (native/tests/tensor_probe.c);
* the model loads in the Engine, answers greedily, and its logits stay near the F32
  conversion's;
* rows of 320 values (not a multiple of 256) fall back as docs/convert.md says.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader
from gguf.quants import dequantize
from tokenizers import Tokenizer

from edgevlm.convert import convert_checkpoint
from edgevlm.convert.cli import main as convert_main
from edgevlm.convert.hf_config import load_model_config
from edgevlm.convert.tensor_plan import expected_text, expected_vision
from edgevlm.core.native import ffi, lib
from edgevlm.engine import Engine
from edgevlm.engine.model import NativeModel, find_model_files
from edgevlm.engine.session import NativeSession
from tests.native.test_kquant_files import Probe, probe  # noqa: F401  (the fixture)
from tests.qwen3vl_checkpoints import (
    legacy_config_dict,
    write_aux_files,
    write_safetensors,
    write_tokenizer_files,
)
from tests.qwen_tokenizers import train_tiny_tokenizer

Q = GGMLQuantizationType
N_LAYER = 16
MIXES = ("q4_k_m", "q5_k_m", "q6_k", "q3_k_m", "iq4_xs")
FILE_TYPE = {"q4_k_m": 15, "q5_k_m": 17, "q6_k": 18, "q3_k_m": 12, "iq4_xs": 30}
# llama.cpp's use_more_bits(i, 16): i < 2, i >= 14, (i - 2) % 3 == 2
MORE_BITS = {0, 1, 4, 7, 10, 13, 14, 15}
# relative RMS error of a quantised N(0, 1) matrix, measured here (the bound has ~30 % margin)
DECODE_BOUND = 0.05   # decode (Q8_K activations) vs F32 arithmetic: measured 0.019-0.026
# Q5_0 / Q5_1 (the fallbacks of Q4_K / Q5_K): measured 0.043 / 0.038
RMS_BOUND = {Q.Q3_K: 0.20, Q.Q4_K: 0.10, Q.Q5_K: 0.05, Q.Q6_K: 0.025, Q.IQ4_XS: 0.10,
             Q.IQ4_NL: 0.10, Q.Q8_0: 0.006, Q.Q5_0: 0.05, Q.Q5_1: 0.05}
# max |logit difference| / max |F32 logit| against the F32 conversion of the checkpoint:
# measured 0.082 (q6_k), 0.149 (q5_k_m), 0.283 (q4_k_m), 0.291 (iq4_xs), 0.445 (q3_k_m); a
# random 16-layer model amplifies the weights' rounding, so the bounds say little beyond
# "same model" (the tight check is against the F32 file of the dequantised weights)
LOGIT_BOUND = {"q6_k": 0.12, "q5_k_m": 0.22, "q4_k_m": 0.4, "iq4_xs": 0.4, "q3_k_m": 0.6}


def text_dims(intermediate: int) -> dict[str, Any]:
    return {"hidden_size": 256, "intermediate_size": intermediate,
            "num_hidden_layers": N_LAYER, "num_attention_heads": 4, "num_key_value_heads": 1,
            "head_dim": 64, "rope_scaling": {"mrope_interleaved": True,
                                             "mrope_section": [16, 8, 8],
                                             "rope_type": "default"}}


def write_scaled_checkpoint(out: Path, tok: Tokenizer, config: dict[str, Any]) -> None:
    """A float32 checkpoint: matrices N(0, 1/in_width), norms 1 + N(0, 0.01)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    cfg = load_model_config(out)
    rng = np.random.default_rng(3)
    tensors: dict[str, np.ndarray] = {}
    for _, src, shape in [*expected_text(cfg), *expected_vision(cfg)]:
        if len(shape) == 1 and "norm" in src:
            tensors[src] = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        else:
            scale = 1.0 / np.sqrt(shape[-1] if len(shape) == 2 else 64)
            tensors[src] = (scale * rng.standard_normal(shape)).astype(np.float32)
    write_safetensors(out / "model.safetensors", tensors)
    write_tokenizer_files(out, tok)
    write_aux_files(out, tok)


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return train_tiny_tokenizer()


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory, tok: Tokenizer) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("kq-ckpt")
    out = {}
    for name, inter, tied in (("wide", 512, True), ("untied", 512, False),
                              ("odd", 320, True)):
        cfg = legacy_config_dict(tok, tied=tied, text=text_dims(inter))
        write_scaled_checkpoint(root / name, tok, cfg)
        out[name] = root / name
    return out


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory,
              checkpoints: dict[str, Path]) -> Any:
    cache: dict[tuple[str, str], Path] = {}

    def run(variant: str, text_type: str) -> Path:
        if (variant, text_type) not in cache:
            out = tmp_path_factory.mktemp(f"kq-{variant}-{text_type}")
            convert_checkpoint(checkpoints[variant], out, text_type)
            cache[(variant, text_type)] = out
        return cache[(variant, text_type)]

    return run


def text_tensors(out: Path) -> dict[str, Any]:
    return {t.name: t for t in GGUFReader(out / "model.gguf").tensors}


def llama_mix(mix: str, name: str, tied: bool) -> Q:
    """llama-quant.cpp's choice for a 16-layer, GQA-4, dense, non-Falcon model without an
    importance matrix; every row here is 256 or 512 values wide."""
    default = {"q4_k_m": Q.Q4_K, "q5_k_m": Q.Q5_K, "q6_k": Q.Q6_K, "q3_k_m": Q.Q3_K,
               "iq4_xs": Q.IQ4_XS}[mix]
    if name.endswith("norm.weight"):
        return Q.F32
    if name == "output.weight" or (tied and name == "token_embd.weight"):
        return Q.Q6_K
    if name == "token_embd.weight":
        return default
    layer, kind = int(name.split(".")[1]), name.split(".")[2]
    if kind == "attn_v":
        return {"q4_k_m": Q.Q6_K if layer in MORE_BITS else Q.Q4_K,
                "q5_k_m": Q.Q6_K if layer in MORE_BITS else Q.Q5_K,
                "q6_k": Q.Q6_K, "q3_k_m": Q.Q5_K if layer < 2 else Q.Q4_K,
                "iq4_xs": Q.Q5_K}[mix]                       # n_gqa 4 >= 4
    if kind == "ffn_down":
        return {"q4_k_m": Q.Q6_K if layer in MORE_BITS else Q.Q4_K,
                "q5_k_m": Q.Q6_K if layer in MORE_BITS else Q.Q5_K,
                "q6_k": Q.Q6_K, "q3_k_m": Q.Q5_K if layer < 1 else Q.Q4_K,
                "iq4_xs": Q.Q5_K if layer < 2 else Q.IQ4_XS}[mix]
    if kind == "attn_output" and mix == "q3_k_m":
        return Q.Q4_K
    return default


def source(ckpt: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(ckpt / "model.safetensors"))


def gguf_to_hf(name: str) -> str:
    if name == "token_embd.weight":
        return "model.language_model.embed_tokens.weight"
    if name == "output.weight":
        return "lm_head.weight"
    hf = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
          "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
          "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    _, layer, kind, _ = name.split(".")
    return f"model.language_model.layers.{layer}.{hf[kind]}.weight"


@pytest.mark.parametrize("mix", MIXES)
def test_every_text_tensor_has_the_llama_cpp_mix_type(converted: Any, mix: str) -> None:
    out = converted("wide", mix)
    tensors = text_tensors(out)
    assert len(tensors) == 1 + 11 * N_LAYER + 1
    wrong = {n: (t.tensor_type.name, llama_mix(mix, n, True).name)
             for n, t in tensors.items() if t.tensor_type != llama_mix(mix, n, True)}
    assert not wrong, wrong
    reader = GGUFReader(out / "model.gguf")
    field = reader.fields["general.file_type"]
    assert int(field.parts[field.data[0]][0]) == FILE_TYPE[mix]
    mmproj = {t.name: t.tensor_type for t in GGUFReader(out / "mmproj.gguf").tensors}
    assert mmproj["v.blk.0.attn_qkv.weight"] == Q.F16     # the default vision type


@pytest.mark.parametrize("mix", ["q4_k_m", "q3_k_m", "iq4_xs"])
def test_untied_model_keeps_token_embd_at_the_default_and_output_at_q6_k(
        converted: Any, mix: str) -> None:
    tensors = text_tensors(converted("untied", mix))
    wrong = {n: (t.tensor_type.name, llama_mix(mix, n, False).name)
             for n, t in tensors.items() if t.tensor_type != llama_mix(mix, n, False)}
    assert not wrong, wrong
    assert tensors["output.weight"].tensor_type == Q.Q6_K


@pytest.mark.parametrize("mix", MIXES)
def test_dequantised_weights_are_close_to_the_checkpoint(
        converted: Any, checkpoints: dict[str, Path], mix: str) -> None:
    src = source(checkpoints["wide"])
    worst: dict[str, float] = {}
    for name, t in text_tensors(converted("wide", mix)).items():
        if t.tensor_type == Q.F32:
            continue
        want = src[gguf_to_hf(name)]
        got = dequantize(np.asarray(t.data), t.tensor_type).reshape(want.shape)
        err = float(np.sqrt(np.mean((got - want) ** 2)) / np.sqrt(np.mean(want ** 2)))
        worst[t.tensor_type.name] = max(worst.get(t.tensor_type.name, 0.0), err)
        assert err < RMS_BOUND[t.tensor_type], (name, t.tensor_type.name, err)
    print(mix, {k: round(v, 4) for k, v in worst.items()})


@pytest.mark.parametrize("mix", ["q4_k_m", "q3_k_m", "iq4_xs"])
def test_the_core_dequantises_the_written_blocks_as_gguf_does(
        converted: Any, probe: Probe, tmp_path: Path, mix: str) -> None:  # noqa: F811
    out = converted("wide", mix)
    seen: set[Q] = set()
    for name, t in text_tensors(out).items():
        if t.tensor_type == Q.F32 or t.tensor_type in seen:
            continue
        seen.add(t.tensor_type)
        dump = tmp_path / f"{name}.f32"
        proc = probe(out / "model.gguf", name, "rows", dump)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        want = dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32).reshape(-1)
        got = np.fromfile(dump, np.float32)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), name
    assert len(seen) >= 2


def prompt_tokens(out: Path) -> np.ndarray:
    engine = Engine.load(out, threads=2, context=256)
    ids = engine.tokenizer.backend.encode("the door is open and a cat sits on the mat").ids
    return np.asarray(ids, dtype=np.int32)


def text_logits(out: Path, tokens: np.ndarray) -> np.ndarray:
    """The prompt's logits [n, vocab] (prefill: float panels, or int16 activations on AVX-512), then
    one decoded token's [1, vocab] (decode: dot products against Q8_K / Q8_0 activations)."""
    session = NativeSession(NativeModel(find_model_files(out)), n_ctx=128, n_threads=2,
                            n_batch=64)
    prompt = session.append_text(tokens[:-1], 0)
    step = np.empty(session.n_vocab, dtype=np.float32)
    session.decode(int(tokens[-1]), len(tokens) - 1, step)
    return np.concatenate([prompt, step[None]])


def dequantised_checkpoint(ckpt: Path, converted_dir: Path, out: Path) -> Path:
    """A copy of ``ckpt`` whose text matrices hold the values the converted model.gguf stores
    (gguf's dequantize): run in F32, it gives the exact-arithmetic answer of the quantised
    model."""
    from safetensors.numpy import save_file

    shutil.copytree(ckpt, out)
    tensors = source(ckpt)
    for name, t in text_tensors(converted_dir).items():
        if t.tensor_type != Q.F32:
            hf = gguf_to_hf(name)
            tensors[hf] = dequantize(np.asarray(t.data), t.tensor_type).reshape(
                tensors[hf].shape).astype(np.float32)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


@pytest.mark.parametrize("mix", MIXES)
def test_the_converted_model_answers_and_its_logits_match_its_weights_in_f32(
        converted: Any, checkpoints: dict[str, Path], tmp_path: Path, mix: str) -> None:
    out = converted("wide", mix)
    engine = Engine.load(out, threads=2, context=256)
    result = engine.generate([{"role": "user", "content": "Is anyone at the door?"}],
                             max_tokens=8, temperature=0.0)
    assert len(result.tokens) >= 1 and result.finish_reason in ("stop", "length")
    tokens = prompt_tokens(out)
    got = text_logits(out, tokens)
    # the same weights, dequantised, in an F32 file: only the arithmetic differs
    exact = dequantised_checkpoint(checkpoints["wide"], out, tmp_path / "exact")
    convert_checkpoint(exact, tmp_path / "exact-f32", "f32")
    same = text_logits(tmp_path / "exact-f32", tokens)
    rel_same = float(np.abs(got[:-1] - same[:-1]).max() / np.abs(same[:-1]).max())
    rel_step = float(np.abs(got[-1] - same[-1]).max() / np.abs(same[-1]).max())
    # the checkpoint itself in F32: the quantisation error of the mix
    ref = text_logits(converted("wide", "f32"), tokens)
    rel = float(np.abs(got - ref).max() / np.abs(ref).max())
    print(mix, f"vs its own weights in F32: prefill {rel_same:.2e}, decode {rel_step:.2e}; "
          f"vs the F32 checkpoint {rel:.3f}")
    # prefill on AVX-512 rounds every matrix's activations to int16 blocks (gemm_q16x: Q8_0,
    # Q4_0, the K-quants but Q2_K/Q3_K, IQ4_XS), independent errors of ~2^-16 a block that
    # add up over the layers: 8e-5 (q6_k) to 1.1e-4 (q4_k_m) on this model; elsewhere 0
    assert rel_same < 2e-4, rel_same
    assert rel_step < DECODE_BOUND, rel_step
    assert rel < LOGIT_BOUND[mix], rel


@pytest.mark.parametrize(("text_type", "want"), [("q4_k_m", "fast"), ("iq4_xs", "fast"),
                                                 ("q8_0", "exact"), ("f32", "exact")])
def test_precision_auto_is_fast_for_k_quant_and_iq4_weights_only(
        converted: Any, text_type: str, want: str) -> None:
    out = converted("wide", text_type)
    # a prompt long enough for the many-token products, where the precisions differ
    messages = [{"role": "user", "content": "the door is open and a cat sits on the mat " * 4}]

    def logits(precision: str) -> np.ndarray:
        engine = Engine.load(out, threads=1, context=256, precision=precision)
        assert engine.precision == (want if precision == "auto" else precision)
        got = engine.generate(messages, max_tokens=2, temperature=0.0, want_logits=True).logits
        assert got is not None
        return got

    auto = logits("auto")
    np.testing.assert_array_equal(auto, logits(want))   # the same kernels, bit for bit
    other = "exact" if want == "fast" else "fast"
    if (text_type != "f32"
            and NativeSession.kernels_name("fast") != NativeSession.kernels_name("best")):
        # on a CPU with llama.cpp-rounding kernels (AVX-512 VNNI, ARM dot product) the other
        # precision gives other logits: the comparison above can tell them apart
        assert not np.array_equal(auto, logits(other))


FALLBACK = {  # ffn_down rows of 320 values: (wanted at layer 0, stored), (elsewhere, stored)
    "q4_k_m": {Q.Q6_K: Q.Q8_0, Q.Q4_K: Q.Q5_0},
    "q5_k_m": {Q.Q6_K: Q.Q8_0, Q.Q5_K: Q.Q5_1},
    "q6_k": {Q.Q6_K: Q.Q8_0},
    "q3_k_m": {Q.Q5_K: Q.Q5_1, Q.Q4_K: Q.Q5_0},
    "iq4_xs": {Q.Q5_K: Q.Q5_1, Q.IQ4_XS: Q.IQ4_NL},
}


@pytest.mark.parametrize("mix", MIXES)
def test_rows_not_a_multiple_of_256_fall_back_as_documented(
        converted: Any, checkpoints: dict[str, Path], tmp_path: Path, mix: str) -> None:
    result = convert_checkpoint(checkpoints["odd"], tmp_path, mix)
    tensors = text_tensors(tmp_path)
    src = source(checkpoints["odd"])
    fallbacks = dict(result.fallbacks)
    for name, t in tensors.items():
        wanted = llama_mix(mix, name, True)
        if ".ffn_down." in name:
            assert t.tensor_type == FALLBACK[mix][wanted], name
            assert fallbacks[name] == f"{wanted.name}->{t.tensor_type.name}"
            want = src[gguf_to_hf(name)]
            got = dequantize(np.asarray(t.data), t.tensor_type).reshape(want.shape)
            err = np.sqrt(np.mean((got - want) ** 2) / np.mean(want ** 2))
            assert err < RMS_BOUND[t.tensor_type], (name, err)
        else:
            assert t.tensor_type == wanted, name
    assert not [n for n in fallbacks if not n.startswith("v.")
                and ".ffn_down." not in n]
    engine = Engine.load(tmp_path, threads=2, context=256)
    assert engine.generate([{"role": "user", "content": "hi"}], max_tokens=2,
                           temperature=0.0).tokens


def test_the_quantize_entry_point_refuses_bad_input_without_writing() -> None:
    rows = np.ones((2, 256), np.float32)
    dst = np.zeros(2 * 144, np.uint8)
    src_p, dst_p = ffi.cast("const float *", rows.ctypes.data), ffi.cast("void *", dst.ctypes.data)
    assert lib.edgevlm_quantize_rows(int(Q.Q4_K), src_p, dst_p, 2, 256) == 2 * 144
    assert lib.edgevlm_quantize_rows(int(Q.Q8_1), src_p, dst_p, 2, 256) == \
        -lib.EDGEVLM_ERR_UNSUPPORTED
    assert lib.edgevlm_quantize_rows(int(Q.Q4_K), src_p, dst_p, 1, 224) == \
        -lib.EDGEVLM_ERR_ARGUMENT
    assert lib.edgevlm_quantize_rows(int(Q.Q4_K), ffi.NULL, dst_p, 1, 256) == \
        -lib.EDGEVLM_ERR_ARGUMENT
    dst[:] = 0
    rows[1, 7] = np.nan
    assert lib.edgevlm_quantize_rows(int(Q.IQ4_XS), src_p, dst_p, 2, 256) == \
        -lib.EDGEVLM_ERR_INVALID_INPUT
    assert not dst.any()


def test_a_nan_weight_is_a_clear_input_error_naming_the_tensor(
        checkpoints: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from safetensors.numpy import save_file

    bad = tmp_path / "nan"
    shutil.copytree(checkpoints["wide"], bad)
    tensors = source(bad)
    hf = "model.language_model.layers.3.mlp.up_proj.weight"
    tensors[hf][5, 17] = np.nan
    save_file(tensors, str(bad / "model.safetensors"), metadata={"format": "pt"})
    assert convert_main([str(bad), "-o", str(tmp_path / "out"), "--type", "q4_k_m", "-q"]) == 2
    err = capsys.readouterr().err
    assert hf in err and "NaN or infinite weight" in err and "Q4_K" in err
    assert not list((tmp_path / "out").glob("*.gguf*"))


def test_help_lists_every_type_and_an_unknown_type_is_a_usage_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert convert_main(["--help"]) == 0
    help_text = capsys.readouterr().out
    for name in ("f32", "f16", "bf16", "q8_0", "q4_0", *MIXES):
        assert any(line.split()[:1] == [name] for line in help_text.splitlines()), name
    assert convert_main(["ckpt", "-o", "out", "--type", "q4_k_s"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'q4_k_s'" in err and "q4_k_m" in err


@pytest.mark.parametrize(("text_type", "shown"), [("q4_k_m", "Q4_K_M"), ("q5_k_m", "Q5_K_M"),
                                                  ("q6_k", "Q6_K"), ("iq4_xs", "IQ4_XS"),
                                                  ("q8_0", "Q8_0")])
def test_the_model_card_names_the_mix_as_llama_cpp_and_ollama_do(
        converted: Any, text_type: str, shown: str) -> None:
    """The info payload's ``quantisation`` and Ollama's ``quantization_level`` come from
    ``general.file_type``: a Q4_K_M file is "Q4_K_M", not the type of its first matrix."""
    from edgevlm.engine.quantisation import quantisation_name

    engine = Engine.load(converted("wide", text_type), threads=2, context=256)
    assert quantisation_name(engine.model) == shown
