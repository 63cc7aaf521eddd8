"""The generation loop: encode -> assemble -> prefill -> sample/decode until a stop rule.

A text too long for admission to tokenize on the network thread (over
``ADMISSION_TOKENIZE_BYTES``, admitted on its upper bound) is counted here first, before the
vision encoder runs: a prompt that cannot fit is refused without encoding its images.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..pipeline.preflight import ADMISSION_TOKENIZE_BYTES, check_text_fits, text_size
from ..pipeline.prepare import PreparedMedia
from ..wire.errors import ContextLengthExceeded
from ..wire.protocol import Request
from .native import EngineCancelled

if TYPE_CHECKING:
    from .engine import Engine, GenerationResult


def run_generation(engine: Engine, request: Request, prepared: Sequence[PreparedMedia],
                   media_ms: float, on_text: Callable[[str], None] | None,
                   want_logits: bool) -> GenerationResult:
    from .engine import GenerationResult

    t_start = time.perf_counter()
    session = engine.session
    if text_size(request).high_bytes > ADMISSION_TOKENIZE_BYTES:
        merge = engine.family.merge_size ** 2
        sized = [(p.path, 2 + (p.features.n_tokens if p.features is not None else
                               int(np.prod(p.pixels.grid_thw)) // merge if p.pixels is not None
                               else 0)) for p in prepared]  # pads + 2 markers (videos: more)
        check_text_fits(request, engine.tokenizer, session.n_ctx, sum(n for _, n in sized),
                        ", ".join(f"{path} {n}" for path, n in sized) or "none")
    media, encode_ms = engine.encode_prepared(prepared)
    prompt = engine.prompt_for(request, media)
    n_prompt = len(prompt.tokens)
    if n_prompt + request.max_tokens > session.n_ctx:
        raise ContextLengthExceeded(
            f"prompt is {n_prompt} tokens (vision {prompt.n_vision}) + max_tokens "
            f"{request.max_tokens} = {n_prompt + request.max_tokens}, the context is "
            f"{session.n_ctx} (model.context); send smaller images, fewer items, or a lower "
            "max_tokens")
    d = engine.sampling
    temperature = request.temperature if request.temperature is not None else d.temperature
    top_k = request.top_k if request.top_k is not None else d.top_k
    top_p = request.top_p if request.top_p is not None else d.top_p
    penalty = (request.repetition_penalty if request.repetition_penalty is not None
               else d.repetition_penalty)
    session.reset()
    session.set_seed(request.seed if request.seed is not None else time.time_ns())
    stopper = engine.stop_checker(request.stop)

    t_prefill = time.perf_counter()
    logits = session.prefill(prompt)[0]
    prefill_ms = (time.perf_counter() - t_prefill) * 1e3
    history = np.empty(request.max_tokens, dtype=np.int32)
    steps: list[np.ndarray] = []
    finish = "length"
    ttft_ms = 0.0
    t_first = time.perf_counter()
    n_sampled = 0
    for i in range(request.max_tokens):
        if want_logits:
            steps.append(logits.copy())
        token = session.sample(logits, temperature, top_k, top_p, penalty, history[:i])
        if i == 0:
            t_first = time.perf_counter()
            ttft_ms = (t_first - t_start) * 1e3 + media_ms
        history[i] = token
        n_sampled = i + 1
        chunk = stopper.feed(token)
        if chunk and on_text is not None:
            on_text(chunk)
        if stopper.finished:
            finish = "stop"
            break
        if i + 1 == request.max_tokens:
            break
        try:
            session.decode(token, n_prompt + i + prompt.rope_delta, logits)
        except EngineCancelled:
            finish = "cancelled"
            break
    n_out = n_sampled
    t_end = time.perf_counter()
    total_ms = (t_end - t_start) * 1e3 + media_ms
    tpot_ms = (t_end - t_first) * 1e3 / max(n_out - 1, 1) if n_out > 1 else 0.0
    return GenerationResult(
        text=stopper.text, tokens=list(stopper.tokens), finish_reason=finish,
        prompt_tokens=n_prompt, vision_tokens=prompt.n_vision,
        metrics={"media_ms": media_ms, "encode_ms": encode_ms, "prefill_ms": prefill_ms,
                 "ttft_ms": ttft_ms, "tpot_ms": tpot_ms, "total_ms": total_ms,
                 "completion_tokens": float(n_out)},
        deepstack=all(m.features.has_deepstack for m in media) if media else True,
        cache=[(p.cache_hit, p.cache_key) for p in prepared if p.cache_key],
        logits=np.stack(steps) if want_logits and steps else None)

