"""Sampling in the core: greedy, temperature, top-k, top-p and the repetition penalty follow
transformers' processors (checked against them when installed), seeded draws repeat, and the
stop rules cut text at EOS ids and stop strings."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from edgevlm.engine.model import NativeModel, find_model_files
from edgevlm.engine.session import NativeSession
from edgevlm.engine.stopping import StopChecker
from edgevlm.tokenizer import HFTokenizer


@pytest.fixture(scope="module")
def session(converted: Callable[[str, str], Path]) -> NativeSession:
    return NativeSession(NativeModel(find_model_files(converted("qwen3vl-tiny-a", "f32"))),
                         n_ctx=64, n_threads=1)


def logits_for(session: NativeSession, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(session.n_vocab) * 2).astype(np.float32)


def draw(session: NativeSession, logits: np.ndarray, n: int, **kw: float) -> np.ndarray:
    params = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "repetition_penalty": 1.0, **kw}
    history = np.zeros(0, np.int32)
    return np.array([session.sample(logits.copy(), float(params["temperature"]),
                                    int(params["top_k"]), float(params["top_p"]),
                                    float(params["repetition_penalty"]), history)
                     for _ in range(n)])


def test_greedy_is_the_first_maximum(session: NativeSession) -> None:
    logits = logits_for(session)
    logits[[5, 9]] = logits.max() + 1
    assert draw(session, logits, 3, temperature=0.0).tolist() == [5, 5, 5]


def test_seeded_draws_repeat_and_different_seeds_differ(session: NativeSession) -> None:
    logits = logits_for(session)
    session.set_seed(42)
    a = draw(session, logits, 50)
    session.set_seed(42)
    b = draw(session, logits, 50)
    session.set_seed(43)
    c = draw(session, logits, 50)
    assert a.tolist() == b.tolist() and a.tolist() != c.tolist()


def reference_probs(logits: np.ndarray, temperature: float, top_k: int, top_p: float
                    ) -> np.ndarray:
    """transformers' warpers in their order (temperature, top-k, top-p), then softmax."""
    x = logits.astype(np.float64) / temperature
    if top_k > 0:
        kth = np.sort(x)[-top_k]
        x = np.where(x < kth, -np.inf, x)
    if top_p < 1.0:
        order = np.argsort(x)  # ascending, as TopPLogitsWarper
        probs = np.exp(x[order] - x.max())
        probs /= probs.sum()
        remove = np.cumsum(probs) <= 1 - top_p
        remove[-1] = False
        x[order[remove]] = -np.inf
    p = np.exp(x - x.max())
    return p / p.sum()


@pytest.mark.parametrize(("temperature", "top_k", "top_p"), [
    (1.0, 0, 1.0), (0.7, 20, 1.0), (1.0, 0, 0.8), (0.7, 20, 0.8), (2.0, 5, 0.5)])
def test_draws_follow_the_warped_distribution(session: NativeSession, temperature: float,
                                              top_k: int, top_p: float) -> None:
    logits = logits_for(session, seed=1)
    expected = reference_probs(logits, temperature, top_k, top_p)
    session.set_seed(7)
    n = 6000
    counts = np.bincount(draw(session, logits, n, temperature=temperature, top_k=top_k,
                              top_p=top_p), minlength=len(logits))
    assert set(np.flatnonzero(counts)) <= set(np.flatnonzero(expected > 0))
    top = np.argsort(expected)[-5:]
    for token in top:  # 5-sigma binomial bounds on the most likely tokens
        p = expected[token]
        assert abs(counts[token] / n - p) <= 5 * np.sqrt(p * (1 - p) / n) + 1e-3


def test_repetition_penalty_is_transformers_semantics(session: NativeSession) -> None:
    logits = np.zeros(session.n_vocab, dtype=np.float32)
    logits[[3, 4, 5]] = [2.0, -1.0, 1.9]
    # token 3 (positive) is divided by 1.5 -> 1.33 < 1.9: token 5 wins; 4 is multiplied
    history = np.asarray([3, 3, 4], dtype=np.int32)
    assert session.sample(logits.copy(), 0.0, 0, 1.0, 1.5, history) == 5
    assert session.sample(logits.copy(), 0.0, 0, 1.0, 1.0, history) == 3


@pytest.mark.reference
def test_repetition_penalty_and_warpers_match_transformers_processors(
        session: NativeSession) -> None:
    import torch
    from transformers.generation.logits_process import (
        RepetitionPenaltyLogitsProcessor,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    logits = logits_for(session, seed=3)
    history = np.asarray([1, 2, 2, 7, 100], dtype=np.int32)
    scores = torch.from_numpy(logits.copy())[None]
    ids = torch.from_numpy(history.astype(np.int64))[None]
    for proc in (RepetitionPenaltyLogitsProcessor(1.3), TemperatureLogitsWarper(0.8),
                 TopKLogitsWarper(30), TopPLogitsWarper(0.9)):
        scores = proc(ids, scores)
    expected = torch.softmax(scores, dim=-1)[0].numpy()
    session.set_seed(11)
    n = 6000
    counts = np.bincount([session.sample(logits.copy(), 0.8, 30, 0.9, 1.3, history)
                          for _ in range(n)], minlength=len(logits))
    assert set(np.flatnonzero(counts)) <= set(np.flatnonzero(expected > 0))
    for token in np.argsort(expected)[-5:]:
        p = float(expected[token])
        assert abs(counts[token] / n - p) <= 5 * np.sqrt(p * (1 - p) / n) + 1e-3


def small_tokenizer() -> HFTokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(["a red car, a blue car. END of story", "héllo wörld 😀"] * 50,
                            trainers.BpeTrainer(
                                vocab_size=300, special_tokens=["<|im_end|>"],
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return HFTokenizer(tok)


def test_stop_strings_cut_the_text_and_are_never_streamed() -> None:
    tok = small_tokenizer()
    ids = tok.encode("a red car END of story")
    stop = StopChecker(tok, frozenset({tok.token_id("<|im_end|>") or 0}), ["END"])
    streamed = ""
    for t in ids:
        streamed += stop.feed(t)
        if stop.finished:
            break
    assert stop.finished and stop.text == "a red car " and streamed == "a red car "


def test_eos_finishes_and_partial_utf8_is_held_back() -> None:
    tok = small_tokenizer()
    eos = tok.token_id("<|im_end|>")
    assert eos is not None
    stop = StopChecker(tok, frozenset({eos}), [])
    pieces = [stop.feed(t) for t in tok.encode("héllo wörld 😀")]
    assert "".join(pieces) == "héllo wörld 😀"
    assert all("\ufffd" not in p for p in pieces)
    assert stop.feed(eos) == "" and stop.finished
