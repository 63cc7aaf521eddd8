"""The decode loop: prefill a laid-out prompt, then sample and decode until a stop rule.

Its input is the prompt (:class:`~.prompt.PromptInputs`) and the sampling values of one
request; the media were encoded and the context checked before it runs (:mod:`.engine`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ..core.native import EngineCancelled
from .prompt import PromptInputs
from .session import NativeSession
from .stopping import StopChecker


@dataclass(frozen=True)
class GenerationResult:
    text: str
    tokens: list[int]
    finish_reason: str                # stop | length | cancelled
    prompt_tokens: int
    vision_tokens: int
    metrics: dict[str, float]
    deepstack: bool
    cache: list[tuple[bool, str]] = field(default_factory=list)  # (hit, key) per image/video
    logits: npt.NDArray[np.float32] | None = None   # [steps, vocab] when requested
    parsed: Any = None                # a schema answer's JSON value
    choices: list[Any] | None = None  # with choices: engine.choices.ChoiceScore, best first


class Constraint(Protocol):
    """A grammar the answer follows (:class:`edgevlm.structured.TokenConstraint`)."""

    def mask(self, logits: npt.NDArray[np.float32]) -> None: ...

    def accept(self, token: int) -> None: ...

    def forced(self) -> list[int]: ...

    @property
    def done(self) -> bool: ...


@dataclass(frozen=True)
class Sampling:
    """The sampling values of one request (the request's, else the model file's defaults)."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    seed: int | None = None           # None: from the clock


@dataclass(frozen=True)
class Decoded:
    """What the loop produced: the stop checker's text and tokens, and its timings."""

    stopper: StopChecker
    finish_reason: str
    prefill_ms: float
    first_token_at: float             # time.perf_counter() of the first sampled token
    decode_end_at: float
    n_sampled: int
    logits: npt.NDArray[np.float32] | None


def decode(session: NativeSession, prompt: PromptInputs, sampling: Sampling, max_tokens: int,
           stopper: StopChecker, on_text: Callable[[str], None] | None = None,
           want_logits: bool = False, cancelled: Callable[[], bool] | None = None,
           constraint: Constraint | None = None) -> Decoded:
    """Prefill ``prompt`` on a reset ``session`` and decode up to ``max_tokens`` tokens;
    ``cancelled`` is asked before every decode step (True: stop, ``cancelled``);
    ``constraint`` masks the logits before each sampling step, decides the tokens its
    grammar forces (in the tokenizer's own tokenization) and ends the answer when its
    grammar is complete."""
    session.reset()
    session.set_seed(sampling.seed if sampling.seed is not None else time.time_ns())
    t_prefill = time.perf_counter()
    logits = session.prefill(prompt)[0]
    prefill_ms = (time.perf_counter() - t_prefill) * 1e3
    history = np.empty(max_tokens, dtype=np.int32)
    steps: list[np.ndarray] = []
    finish = "length"
    n_prompt = len(prompt.tokens)
    t_first = time.perf_counter()
    n_sampled = 0
    for i in range(max_tokens):
        if want_logits:
            steps.append(logits.copy())
        forced = constraint.forced() if constraint is not None else []
        if forced:
            token = forced[0]
        else:
            if constraint is not None:
                constraint.mask(logits)
            token = session.sample(logits, sampling.temperature, sampling.top_k,
                                   sampling.top_p, sampling.repetition_penalty, history[:i])
        if i == 0:
            t_first = time.perf_counter()
        history[i] = token
        n_sampled = i + 1
        chunk = stopper.feed(token)
        if chunk and on_text is not None:
            on_text(chunk)
        if stopper.finished:
            finish = "stop"
            break
        if constraint is not None:
            constraint.accept(token)
            if constraint.done:
                finish = "stop"
                break
        if i + 1 == max_tokens:
            break
        if cancelled is not None and cancelled():
            finish = "cancelled"
            break
        try:
            session.decode(token, n_prompt + i + prompt.rope_delta, logits)
        except EngineCancelled:
            finish = "cancelled"
            break
    return Decoded(stopper, finish, prefill_ms, t_first, time.perf_counter(), n_sampled,
                   np.stack(steps) if want_logits and steps else None)
