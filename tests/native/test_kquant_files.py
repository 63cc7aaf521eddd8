"""K-quant, IQ4, Q4_1, Q5_0 and Q5_1 matrices in GGUF files written by the reference writer,
the `gguf` package, through edgevlm's loader and kernels.

native/tests/tensor_probe.c (compiled here with the system C compiler against the core's
loader, type table and kernels) loads one matrix with ev_load_tensor, as the model loader
does, and prints it dequantised row by row (ev_row_to_f32) or multiplies it (ev_matmul).
The gguf package has no quantisers for the K-quants and IQ4, so the blocks are random bytes
with finite float16 scales; gguf's numpy ``dequantize`` is the reference, bit for bit. It has
quantisers for Q4_1/Q5_0/Q5_1 (bit-exact with llama.cpp's): edgevlm's store the same bytes.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize, quantize

from tests.gguf_read import read_gguf

NATIVE = Path(__file__).resolve().parents[2] / "native"
Q = GGMLQuantizationType
Probe = Callable[..., subprocess.CompletedProcess[str]]

# byte offsets of each type's float16 scales (d, then dmin or m) in its block
# (native/src/types.h)
SCALES: dict[Q, tuple[int, ...]] = {
    Q.Q2_K: (80, 82), Q.Q3_K: (108,), Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,),
    Q.IQ4_NL: (0,), Q.IQ4_XS: (0,), Q.Q4_1: (0, 2), Q.Q5_0: (0,), Q.Q5_1: (0, 2),
}
NEW_TYPES = list(SCALES)
LEGACY_TYPES = [Q.Q4_1, Q.Q5_0, Q.Q5_1]   # 32-element blocks gguf-py can also quantise
SECOND_SCALE = {Q.Q4_1: "m", Q.Q5_1: "m"}  # the rest call their second scale dmin
# what the dots take: the rest Q8_K (ggml's vec_dot_type); Q4_1/Q5_1 Q8_0 where ggml has Q8_1
# (the same rounding of x: Q8_1 adds only the block sums)
ACTIVATIONS = {Q.IQ4_NL: Q.Q8_0, Q.Q4_1: Q.Q8_0, Q.Q5_0: Q.Q8_0, Q.Q5_1: Q.Q8_0}
SOURCES = ["src/gguf.c", "src/gguf_get.c", "src/loader.c", "src/types.c", "src/quants_fit.c",
           "src/quants_legacy.c", "src/quants_k.c", "src/quants_iq4.c", "src/kernels.c",
           "src/kernels_dispatch.c", "src/kernels_scalar.c", "src/kernels_scalar_k.c",
           "src/threadpool.c"]


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> Probe:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.fail("no C compiler (cc/gcc/clang) on PATH: the tensor probe cannot be built")
    exe = tmp_path_factory.mktemp("tensor_probe") / "tensor_probe"
    arch = sorted(str(p) for p in (NATIVE / "src" / "arch").glob("*.c"))
    subprocess.run(
        [cc, "-std=c11", "-O1", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Werror",
         "-pthread", "-D_GNU_SOURCE", "-ffp-contract=off", "-march=native",
         f"-I{NATIVE / 'include'}", f"-I{NATIVE / 'src'}", "-o", str(exe),
         str(NATIVE / "tests" / "tensor_probe.c"), *(str(NATIVE / s) for s in SOURCES), *arch,
         "-lm"],
        check=True, capture_output=True, text=True,
    )

    def run(*args: object) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True,
                              timeout=120)

    return run


def half_bits(value: float) -> int:
    return int(np.array([value], np.float16).view(np.uint16)[0])


def random_blocks(qtype: Q, n_blocks: int, rng: np.random.Generator,
                  scale_range: tuple[float, float] = (-8.0, 4.8)) -> np.ndarray:
    """[n_blocks][type_size] random bytes, every float16 scale finite: magnitude
    10^uniform(scale_range), either sign; every 7th block's scales at +-65504."""
    _, size = GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, (n_blocks, size), dtype=np.uint8)
    for i in range(n_blocks):
        for at in SCALES[qtype]:
            if i % 7 == 3 and scale_range[1] > 4:
                bits = half_bits(65504.0) | (0x8000 if rng.random() < 0.5 else 0)
            else:
                mag = min(10.0 ** rng.uniform(*scale_range), 65504.0)
                bits = half_bits(mag) | (0x8000 if rng.random() < 0.5 else 0)
            blocks[i, at], blocks[i, at + 1] = bits & 0xFF, bits >> 8
    return blocks


def write_matrices(path: Path, matrices: dict[str, tuple[Q, np.ndarray]]) -> Path:
    """A GGUF file of raw-byte matrices ([rows][row bytes] each)."""
    w = gguf.GGUFWriter(path, arch="qwen3vl")
    for name, (qtype, raw) in matrices.items():
        w.add_tensor(name, raw, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def matrix(qtype: Q, rows: int, n_in: int, rng: np.random.Generator,
           scale_range: tuple[float, float] = (-8.0, 4.8)) -> np.ndarray:
    block, size = GGML_QUANT_SIZES[qtype]
    blocks = random_blocks(qtype, rows * n_in // block, rng, scale_range)
    return blocks.reshape(rows, n_in // block * size)


def test_every_new_type_loads_and_dequantises_as_gguf_py_bit_for_bit(
        probe: Probe, tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    mats = {f"blk.0.{t.name.lower()}.weight": (t, matrix(t, 5, 768, rng)) for t in NEW_TYPES}
    path = write_matrices(tmp_path / "kquants.gguf", mats)
    for name, (qtype, raw) in mats.items():
        out = tmp_path / f"{name}.f32"
        proc = probe(path, name, "rows", out)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        got = np.fromfile(out, np.float32).reshape(5, 768)
        want = dequantize(raw, qtype).astype(np.float32)
        assert np.isfinite(want).all()
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), name


# (type, which scale is broken): NaN d, infinite d, and NaN dmin (m) where the type has one
BAD_SCALES = [(t, which) for t in [*NEW_TYPES, Q.Q8_0, Q.Q4_0]
              for which in ("d", "inf", SECOND_SCALE.get(t, "dmin"))
              if which in ("d", "inf") or len(SCALES.get(t, ())) > 1]


@pytest.mark.parametrize(("qtype", "which"), BAD_SCALES,
                         ids=[f"{t.name}-{w}" for t, w in BAD_SCALES])
def test_nan_or_inf_scale_is_a_load_error_naming_the_tensor(
        probe: Probe, tmp_path: Path, qtype: Q, which: str) -> None:
    offsets = SCALES.get(qtype, (0,))      # Q8_0 / Q4_0: d first
    rng = np.random.default_rng(11)
    _, size = GGML_QUANT_SIZES[qtype]
    raw = (matrix(qtype, 4, 512, rng, (-3.0, 0.0)) if qtype in SCALES
           else quantize(rng.standard_normal((4, 512)).astype(np.float32), qtype))
    at = offsets[1] if which in ("dmin", "m") else offsets[0]
    bad_block, bad_row = 1, 2
    pos = bad_block * size + at
    bits = 0x7C00 if which == "inf" else 0x7E00
    raw[bad_row, pos], raw[bad_row, pos + 1] = bits & 0xFF, bits >> 8
    path = write_matrices(tmp_path / "bad.gguf", {"blk.0.ffn_up.weight": (qtype, raw)})
    proc = probe(path, "blk.0.ffn_up.weight", "rows", tmp_path / "out.f32")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    message = proc.stdout
    assert "tensor 'blk.0.ffn_up.weight'" in message and qtype.name in message
    assert "NaN or infinite scale" in message
    assert f"block {bad_block} of row {bad_row}" in message
    # the same matrix with every scale finite loads
    raw[bad_row, pos], raw[bad_row, pos + 1] = 0, 0x3C
    path = write_matrices(tmp_path / "good.gguf", {"blk.0.ffn_up.weight": (qtype, raw)})
    assert probe(path, "blk.0.ffn_up.weight", "rows", tmp_path / "out.f32").returncode == 0


def q8_k_round(x: np.ndarray) -> np.ndarray:
    """Rows of 256-value blocks through llama.cpp's quantize_row_q8_K_ref and back, in
    float32 as it computes: iscale = -127/max (max: the value of largest magnitude), q =
    nearest even of iscale*x capped at 127, value = (1/iscale) * q."""
    blocks = x.astype(np.float32).reshape(-1, 256)
    out = np.zeros_like(blocks)
    for i, b in enumerate(blocks):
        j = int(np.argmax(np.abs(b)))
        if b[j] == 0:
            continue
        iscale = np.float32(-127.0) / b[j]
        q = np.minimum(np.rint(iscale * b), 127).astype(np.float32)
        out[i] = (np.float32(1.0) / iscale) * q
    return out.reshape(x.shape)


def q8_0_round(x: np.ndarray) -> np.ndarray:
    q = quantize(x.astype(np.float32), Q.Q8_0)
    return dequantize(q, Q.Q8_0).reshape(x.shape).astype(np.float32)


@pytest.mark.parametrize("qtype", NEW_TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("n_tok", [1, 20])
@pytest.mark.parametrize("kernels", ["scalar", "best"])
def test_matmul_matches_numpy(probe: Probe, tmp_path: Path, qtype: Q, n_tok: int,
                              kernels: str) -> None:
    """ev_matmul against float64 numpy on the gguf-dequantised weights: 1 token multiplies
    the activations rounded to the type's vec_dot_type (Q8_K or Q8_0, as llama.cpp), 20
    tokens (>= EV_MATMUL_FLOAT_MIN_TOK) the float32 activations. Tolerance 1e-4 of
    sum |w x| per output."""
    rng = np.random.default_rng(int(qtype) * 100 + n_tok)
    n_out, n_in = 37, 1152 if qtype in LEGACY_TYPES else 1024   # 1152: a ViT's width
    raw = matrix(qtype, n_out, n_in, rng, (-3.0, -1.0))
    path = write_matrices(tmp_path / "w.gguf", {"blk.0.attn_q.weight": (qtype, raw)})
    x = rng.standard_normal((n_tok, n_in)).astype(np.float32)
    x.tofile(tmp_path / "x.f32")
    proc = probe(path, "blk.0.attn_q.weight", "matmul", tmp_path / "x.f32", n_tok, kernels,
                 tmp_path / "y.f32")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    y = np.fromfile(tmp_path / "y.f32", np.float32).reshape(n_tok, n_out)
    w = dequantize(raw, qtype).astype(np.float64)
    rounded = q8_0_round if ACTIVATIONS.get(qtype) == Q.Q8_0 else q8_k_round
    xa = rounded(x) if n_tok == 1 else x
    want = xa.astype(np.float64) @ w.T
    mag = np.abs(xa.astype(np.float64)) @ np.abs(w.T)
    assert np.all(np.abs(y - want) <= 1e-4 * mag), np.max(np.abs(y - want) / mag)


def test_reference_quantiser_output_loads_and_matches_its_own_dequantisation(
        probe: Probe, tmp_path: Path) -> None:
    """The probe's quantize mode (the type table's from_float) writes blocks gguf-py reads
    back to the values edgevlm dequantises them to: the layouts agree both ways."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 512)).astype(np.float32)
    x.tofile(tmp_path / "x.f32")
    for qtype in NEW_TYPES:
        out = tmp_path / f"{qtype.name}.q"
        proc = probe("quantize", int(qtype), tmp_path / "x.f32", 512, out)
        assert proc.returncode == 0, proc.stderr
        raw = np.fromfile(out, np.uint8).reshape(3, -1)
        values = dequantize(raw, qtype).astype(np.float32)
        rms = float(np.sqrt(np.mean((values - x) ** 2)))
        assert rms < 0.4, (qtype.name, rms)   # Q2_K's ~0.3 is the worst
        path = write_matrices(tmp_path / f"{qtype.name}.gguf", {"m.weight": (qtype, raw)})
        proc = probe(path, "m.weight", "rows", tmp_path / "rows.f32")
        assert proc.returncode == 0, proc.stdout
        got = np.fromfile(tmp_path / "rows.f32", np.float32).reshape(3, 512)
        assert np.array_equal(got.view(np.uint32), values.view(np.uint32)), qtype.name


@pytest.mark.parametrize("qtype", LEGACY_TYPES, ids=lambda t: t.name)
def test_legacy_quantisers_store_gguf_py_bytes(probe: Probe, tmp_path: Path, qtype: Q) -> None:
    """The probe's quantize mode (the type table's from_float: llama.cpp's
    quantize_row_*_ref) against gguf-py's quantiser, bit for bit, on rows of 1152 values at
    several scales and offsets, with all-zero and constant blocks."""
    rng = np.random.default_rng(int(qtype))
    rows = [rng.standard_normal(1152) * 10.0 ** rng.uniform(-4, 3) + rng.uniform(-2, 2)
            for _ in range(6)]
    rows[1][:64] = 0.0
    rows[2][32:96] = 0.5
    x = np.stack(rows).astype(np.float32)
    x.tofile(tmp_path / "x.f32")
    proc = probe("quantize", int(qtype), tmp_path / "x.f32", 1152, tmp_path / "q")
    assert proc.returncode == 0, proc.stderr
    got = np.fromfile(tmp_path / "q", np.uint8).reshape(6, -1)
    want = quantize(x, qtype)
    assert got.shape == want.shape
    assert np.array_equal(got, want), np.argwhere(got != want)[:5]


def test_nan_scale_in_a_whole_model_is_a_load_error_naming_the_tensor(
        converted: Callable[[str, str], Path], tmp_path: Path) -> None:
    """edgevlm_model_load (through the engine's NativeModel) on a converted Q8_0 model whose
    blk.0.attn_q.weight has a NaN scale in one block."""
    from edgevlm.core.native import ModelLoadError
    from edgevlm.engine.model import NativeModel, find_model_files

    src = converted("qwen3vl-tiny-a", "q8_0")
    dst = tmp_path / "model"
    shutil.copytree(src, dst)
    text = dst / "model.gguf"
    data = bytearray(text.read_bytes())
    tensor = read_gguf(text).tensors["blk.0.attn_q.weight"]
    assert tensor.tensor_type == Q.Q8_0
    offset = data.find(tensor.data.tobytes())
    assert offset > 0
    data[offset + 34 * 1: offset + 34 * 1 + 2] = (0x7E00).to_bytes(2, "little")  # block 1's d
    text.write_bytes(bytes(data))
    with pytest.raises(ModelLoadError) as err:
        NativeModel(find_model_files(dst))
    assert "tensor 'blk.0.attn_q.weight' (Q8_0) has a NaN or infinite scale" in str(err.value)
    assert "block 1 of row 0" in str(err.value)
