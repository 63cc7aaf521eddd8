"""A prompt longer than the golden fixtures: the decoder's many-token paths against transformers.

The golden prompts are short (< 100 tokens), so prefill never splits its row operations across
the thread pool nor runs attention over several query blocks. Here 300 text tokens go through
the tiny checkpoint in transformers (float32, eager) and through the native core in one chunk
and in chunks of 128 (queries attending to cached keys); the logits of every position must
agree within 1e-4 of max|logit|, and the thread count must not change a single bit.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from edgevlm.engine.model import NativeModel, find_model_files
from edgevlm.engine.prompt import PromptInputs
from edgevlm.engine.session import NativeSession

pytestmark = pytest.mark.reference

ROOT = Path(__file__).resolve().parents[2]
MODEL = "qwen3vl-tiny-b"  # untied lm_head, GQA 6:1, head_dim 32
N_TOKENS = 300
F32_TOL = 1e-4


def text_prompt(n_vocab: int, n_embd: int) -> PromptInputs:
    ids = np.random.default_rng(7).integers(0, n_vocab, N_TOKENS).astype(np.int32)
    pos = np.ascontiguousarray(np.broadcast_to(np.arange(N_TOKENS, dtype=np.int32), (3, N_TOKENS)))
    return PromptInputs(ids, pos, np.full(N_TOKENS, -1, dtype=np.int32),
                        np.zeros((0, n_embd), dtype=np.float32), None, 0, 0)


def native_logits(path: Path, threads: int, batch: int, scalar: bool = False) -> np.ndarray:
    s = NativeSession(NativeModel(find_model_files(path)), n_ctx=512, n_threads=threads,
                      n_batch=batch, max_patches=64)
    s.use_scalar_kernels(scalar)
    return s.prefill(text_prompt(s.n_vocab, s.n_embd), n_logits=N_TOKENS).copy()


def transformers_logits(tokens: np.ndarray) -> np.ndarray:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = transformers.Qwen3VLForConditionalGeneration.from_pretrained(
        ROOT / "tests" / "fixtures" / "models" / MODEL, dtype=torch.float32,
        attn_implementation="eager").eval()
    with torch.no_grad():
        out = model(input_ids=torch.as_tensor(tokens[None].astype(np.int64)), use_cache=False)
    return out.logits[0].numpy()


def rel(ours: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(ours - ref).max() / max(float(np.abs(ref).max()), 1e-30))


def test_300_tokens_match_transformers_in_one_chunk_and_in_chunks(
        converted: Callable[[str, str], Path]) -> None:
    path = converted(MODEL, "f32")
    one_chunk = native_logits(path, threads=3, batch=512)
    chunked = native_logits(path, threads=3, batch=128)
    s = NativeSession(NativeModel(find_model_files(path)), n_ctx=512, n_threads=1, n_batch=8,
                      max_patches=64)
    ref = transformers_logits(text_prompt(s.n_vocab, s.n_embd).tokens)
    assert rel(one_chunk, ref) < F32_TOL
    assert rel(chunked, ref) < F32_TOL
    assert list(one_chunk.argmax(axis=1)) == list(ref.argmax(axis=1))


@pytest.mark.parametrize("wtype", ["f32", "q8_0"])
def test_the_thread_count_does_not_change_a_bit(wtype: str,
                                                 converted: Callable[[str, str], Path]) -> None:
    path = converted(MODEL, wtype)
    one = native_logits(path, threads=1, batch=512)
    three = native_logits(path, threads=3, batch=512)
    assert np.array_equal(one, three)


def test_scalar_kernels_agree_on_a_long_prompt(converted: Callable[[str, str], Path]) -> None:
    path = converted(MODEL, "f32")
    assert rel(native_logits(path, threads=3, batch=512),
               native_logits(path, threads=2, batch=512, scalar=True)) < F32_TOL
