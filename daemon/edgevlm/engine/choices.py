"""Choices scored by the model: the prompt is prefilled once, then each choice's tokens (and
the end-of-answer token, so ``"no"`` is not mistaken for the start of ``"nobody"``) are run
after it and their log-probabilities summed; the KV cache is rolled back to the prompt before
the next choice. No sampling, no parsing: the answer is the most probable choice."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .prompt import PromptInputs
from .session import NativeSession


@dataclass(frozen=True)
class ChoiceScore:
    text: str
    logprob: float       # of its tokens and the end token, after the prompt
    probability: float   # among the choices (their probabilities normalised to 1)
    tokens: tuple[int, ...]


def _log_softmax(logits: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
    x = logits.astype(np.float64)
    top = x.max(axis=-1, keepdims=True)
    out: npt.NDArray[np.float64] = x - top - np.log(np.exp(x - top).sum(axis=-1, keepdims=True))
    return out


def score(session: NativeSession, prompt: PromptInputs, first_logits: npt.NDArray[np.float32],
          choices: Sequence[tuple[str, Sequence[int]]], end_token: int) -> list[ChoiceScore]:
    """Each choice's log-probability after ``prompt`` (already prefilled, its last logits
    ``first_logits``), best first. ``choices``: (text, its token ids)."""
    start = session.n_past
    position = len(prompt.tokens) + prompt.rope_delta
    first = _log_softmax(first_logits)
    totals = []
    for _, ids in choices:
        sequence = [*ids, end_token]
        total = float(first[sequence[0]])
        if len(sequence) > 1:
            logits = session.append_text(np.asarray(sequence[:-1], dtype=np.int32), position)
            steps = _log_softmax(logits)
            total += float(sum(steps[i, sequence[i + 1]] for i in range(len(sequence) - 1)))
            session.rollback(start)
        totals.append(total)
    values = np.asarray(totals)
    shares = np.exp(values - values.max())
    shares /= shares.sum()
    scored = [ChoiceScore(text, total, float(share), tuple(ids))
              for (text, ids), total, share in zip(choices, totals, shares, strict=True)]
    return sorted(scored, key=lambda c: -c.logprob)
