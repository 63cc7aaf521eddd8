"""edgevlm convert --type q4_k_m (and the other mixes) writes what llama.cpp's own
``llama-quantize`` writes from the same weights.

``llama-quantize`` is built from the llama.cpp tree the llama-cpp-python sdist vendors
(``tools/llamacpp_tools.py``; cached under ~/.cache/edgevlm/, 10-20 minutes on 2 cores the first
time; needs cmake, ninja and g++). If it cannot be built the test fails: run
``python tools/llamacpp_tools.py --targets llama-quantize`` to see why.

Each mix is made twice from a tiny checkpoint: ``llama-quantize`` on our ``--type f32``
``model.gguf``, and ``edgevlm convert --type <mix>`` from the checkpoint. There are two
checkpoints (:data:`CHECKPOINTS`), both with a text model 256 wide and 16 layers, so that the
layer-dependent rules of the mixes (``use_more_bits``, the first layers of Q3_K_M, the GQA rule
of IQ4_XS: 8 query heads on 2 KV heads) pick more than one type:

- ``blocks``: an MLP of 512, so every matrix divides into 256-value blocks (the K-quants and
  IQ4_XS are used, no fallback);
- ``fallback``: an MLP of 544 = 17·32, so ``ffn_down``'s rows of 544 values do not divide into
  256-value blocks and take llama.cpp's fallback types (Q4_K → Q5_0, Q5_K → Q5_1, Q6_K → Q8_0,
  IQ4_XS → IQ4_NL); the other matrices keep rows of 256.

The first rows of five matrices are edge cases for the quantisers (:func:`_edge_rows`); the
rest is N(0, 0.5²). The vocabulary is the real Qwen one (llama.cpp refuses an unknown
pre-tokenizer), so the tied 151936 × 256 embedding is most of each file. Tokens and logits are
computed by edgevlm's engine from both files: the comparison is of the files.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from edgevlm.convert import convert_checkpoint
from edgevlm.convert.quant_mix import MIXES
from edgevlm.engine.model import ModelFiles
from tests.gguf_read import GGUFFile, Tensor, read_gguf
from tests.helpers import describe_image_greedily
from tests.qwen3vl_checkpoints import write_checkpoint, write_safetensors
from tests.qwen_tokenizers import QWEN_EMBEDDING_ROWS, qwen_reference_tokenizer
from tools import llamacpp_tools

# opt-in (pyproject.toml deselects llamacpp_build): pytest -m llamacpp_build
pytestmark = [pytest.mark.reference, pytest.mark.interop, pytest.mark.llamacpp_build]

TYPES = tuple(MIXES)   # q4_k_m q5_k_m q6_k q3_k_m iq4_xs: llama-quantize's names, lower case
Q = GGMLQuantizationType


@dataclass(frozen=True)
class Checkpoint:
    """One tiny checkpoint and the matrix types each mix gives its text model."""

    name: str
    intermediate_size: int
    # mix -> every type of a text matrix (ffn_down's types are fallbacks when it does not divide)
    matrix_types: dict[str, set[GGMLQuantizationType]]
    fallbacks: frozenset[str]   # the tensors edgevlm convert reports as fallbacks


# the matrix types of each mix on these models: the default type, Q6_K for the tied embedding
# (the output projection), attn_v / ffn_down raised in the layers the mix's rules pick
CHECKPOINTS = (
    Checkpoint("blocks", 512, {
        "q4_k_m": {Q.Q4_K, Q.Q6_K}, "q5_k_m": {Q.Q5_K, Q.Q6_K}, "q6_k": {Q.Q6_K},
        "q3_k_m": {Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K}, "iq4_xs": {Q.IQ4_XS, Q.Q5_K, Q.Q6_K}},
        frozenset()),
    # ffn_down: Q6_K -> Q8_0 and Q4_K -> Q5_0 (q4_k_m), Q6_K -> Q8_0 and Q5_K -> Q5_1
    # (q5_k_m), Q8_0 (q6_k), Q5_K -> Q5_1 in layer 0 and Q4_K -> Q5_0 (q3_k_m), Q5_K -> Q5_1 in
    # layers 0-1 and IQ4_XS -> IQ4_NL (iq4_xs); attn_v keeps the raised K-quants
    Checkpoint("fallback", 544, {
        "q4_k_m": {Q.Q4_K, Q.Q6_K, Q.Q5_0, Q.Q8_0}, "q5_k_m": {Q.Q5_K, Q.Q6_K, Q.Q5_1, Q.Q8_0},
        "q6_k": {Q.Q6_K, Q.Q8_0}, "q3_k_m": {Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.Q5_0, Q.Q5_1},
        "iq4_xs": {Q.IQ4_XS, Q.Q5_K, Q.Q6_K, Q.Q5_1, Q.IQ4_NL}},
        frozenset(f"blk.{i}.ffn_down.weight" for i in range(16))),
)


def _text_config(intermediate_size: int) -> dict[str, object]:
    return {"hidden_size": 256, "intermediate_size": intermediate_size,
            "num_hidden_layers": 16, "num_attention_heads": 8, "num_key_value_heads": 2,
            "head_dim": 32,
            "rope_parameters": {"rope_type": "default", "rope_theta": 5000000.0,
                                "mrope_section": [6, 5, 5], "mrope_interleaved": True}}


# one matrix of each role the mixes treat differently: the default type (ffn_gate), attn_v and
# ffn_down of layers the rules raise, ffn_down of a layer they do not (on the fallback
# checkpoint: Q5_0, Q5_1, Q8_0 and IQ4_NL rows), the tied embedding (Q6_K)
EDGE_ROWS_IN = ("model.language_model.embed_tokens.weight",
                "model.language_model.layers.0.mlp.gate_proj.weight",
                "model.language_model.layers.0.self_attn.v_proj.weight",
                "model.language_model.layers.1.mlp.down_proj.weight",
                "model.language_model.layers.2.mlp.down_proj.weight")


def _edge_rows(width: int, rng: np.random.Generator) -> np.ndarray:
    """Rows reaching the quantisers' special cases: all zero, below their epsilons, one
    outlier, constant, all negative, zero half-blocks, large, and values on 4-bit grids
    (exact and half-way: rounding ties)."""
    i, noise = np.arange(width), rng.standard_normal((4, width))
    grid = (i % 16 - 8) * 0.125
    return np.stack([np.zeros(width), 1e-20 * noise[0], np.where(i % 256 == 7, 1e3, noise[1]),
                     np.full(width, 0.3), -np.abs(noise[2]),
                     np.where(i % 32 < 16, 0.0, noise[3]), 1e4 * noise[0], grid,
                     grid + 0.0625]).astype(np.float32)


def _add_edge_rows(ckpt: Path) -> None:
    from safetensors.numpy import load_file

    path = ckpt / "model.safetensors"
    tensors = load_file(path)
    rng = np.random.default_rng(1)
    for name in EDGE_ROWS_IN:
        rows = _edge_rows(tensors[name].shape[1], rng)
        if name == EDGE_ROWS_IN[0]:   # the output projection too: large rows win every step
            rows = rows[np.abs(rows).max(axis=1) < 100]
        tensors[name] = np.concatenate([rows, tensors[name][len(rows):]])
    write_safetensors(path, tensors)


def _llama_quantize(tool: Path, source: Path, out: Path, mix: str) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([str(tool), str(source), str(out), mix.upper(), "2"],
                          capture_output=True, text=True, check=False)
    (out.parent / "llama-quantize.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        pytest.fail(f"llama-quantize {mix.upper()} exited {proc.returncode}:\n"
                    f"{(proc.stdout + proc.stderr)[-3000:]}")


@pytest.fixture(scope="module", params=CHECKPOINTS, ids=lambda c: c.name)
def checkpoint(request: pytest.FixtureRequest) -> Checkpoint:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory,
          checkpoint: Checkpoint) -> dict[tuple[str, str], ModelFiles]:
    """(quantiser, mix) -> (text, mmproj); both quantisers' text files share our mmproj."""
    root = tmp_path_factory.mktemp(f"quantize-interop-{checkpoint.name}")
    ckpt = write_checkpoint(root / "Qwen3-VL-tiny", qwen_reference_tokenizer(),
                            vocab_rows=QWEN_EMBEDDING_ROWS,
                            text=_text_config(checkpoint.intermediate_size))
    _add_edge_rows(ckpt)
    tool = llamacpp_tools.ensure_tools(["llama-quantize"], "native") / "llama-quantize"
    f32 = convert_checkpoint(ckpt, root / "edgevlm" / "f32", "f32")
    out: dict[tuple[str, str], ModelFiles] = {}
    for mix in TYPES:
        ours = convert_checkpoint(ckpt, root / "edgevlm" / mix, mix)
        assert {name for name, _ in ours.fallbacks} == checkpoint.fallbacks, ours.fallbacks
        theirs = root / "llama.cpp" / mix / "model.gguf"
        _llama_quantize(tool, Path(f32.text_path), theirs, mix)
        out["edgevlm", mix] = ModelFiles(Path(ours.text_path), Path(ours.mmproj_path))
        out["llama.cpp", mix] = ModelFiles(theirs, Path(ours.mmproj_path))
    return out


def _first_difference(ours: Tensor, theirs: Tensor) -> str:
    """``name TYPE row r block b: ours <hex> llama.cpp <hex>`` for the first differing block."""
    block, size = GGML_QUANT_SIZES[ours.tensor_type]
    mine, other = ours.data.reshape(-1, size), theirs.data.reshape(-1, size)
    first = int(np.argmax((mine != other).any(axis=1)))
    per_row = ours.shape[0] // block
    return (f"{ours.name} {ours.tensor_type.name} row {first // per_row} block "
            f"{first % per_row}: ours {mine[first].tobytes().hex()} "
            f"llama.cpp {other[first].tobytes().hex()}")


@pytest.fixture(scope="module")
def texts(files: dict[tuple[str, str], ModelFiles]) -> dict[tuple[str, str], GGUFFile]:
    return {key: read_gguf(f.text) for key, f in files.items()}


@pytest.mark.parametrize("mix", TYPES)
def test_llamacpp_mix_gives_every_tensor_the_type_edgevlm_gives(
        texts: dict[tuple[str, str], GGUFFile], checkpoint: Checkpoint, mix: str) -> None:
    ours, theirs = texts["edgevlm", mix].tensors, texts["llama.cpp", mix].tensors
    # same names; not the same order: llama-quantize writes its loader's weights_map order
    # (by layer, then by name), edgevlm convert the order of convert_hf_to_gguf.py
    assert sorted(ours) == sorted(theirs)
    for name, mine in ours.items():
        assert mine.shape == theirs[name].shape, name
        assert mine.tensor_type == theirs[name].tensor_type, name
    # the mix is really exercised: every type its rules give on this model, with the fallback
    # types where ffn_down's rows do not divide into 256-value blocks
    assert {t.tensor_type for t in ours.values() if len(t.shape) > 1} == \
        checkpoint.matrix_types[mix]


@pytest.mark.parametrize("mix", TYPES)
def test_llamacpp_and_edgevlm_quantise_to_the_same_bytes(
        texts: dict[tuple[str, str], GGUFFile], mix: str) -> None:
    ours, theirs = texts["edgevlm", mix].tensors, texts["llama.cpp", mix].tensors
    different = [_first_difference(mine, theirs[name]) for name, mine in ours.items()
                 if not np.array_equal(mine.data, theirs[name].data)]
    assert different == []


@pytest.mark.parametrize("mix", TYPES)
def test_every_key_llama_quantize_writes_has_our_value_and_type(
        texts: dict[tuple[str, str], GGUFFile], mix: str) -> None:
    ours, theirs = texts["edgevlm", mix].fields, texts["llama.cpp", mix].fields
    assert sorted(ours) == sorted(theirs)
    for key, (value, types) in theirs.items():
        assert ours[key][1] == types, key
        assert ours[key][0] == value, key
    assert theirs["general.file_type"][0] == MIXES[mix].file_type
    assert theirs["general.quantization_version"][0] == 2


@pytest.mark.parametrize("mix", TYPES)
def test_llama_quantize_file_gives_our_tokens_and_logits(
        files: dict[tuple[str, str], ModelFiles], mix: str) -> None:
    ours, theirs = (describe_image_greedily(files[quantiser, mix])
                    for quantiser in ("edgevlm", "llama.cpp"))
    assert ours.prompt_tokens == theirs.prompt_tokens
    assert ours.tokens == theirs.tokens
    assert ours.logits is not None and np.isfinite(ours.logits).all()
    assert theirs.logits is not None
    scale = float(np.max(np.abs(ours.logits)))
    np.testing.assert_allclose(theirs.logits, ours.logits, rtol=1e-5, atol=1e-5 * scale)
