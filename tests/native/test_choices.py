"""Choices scored by the model (issue 25): each choice's log-probability after one prefill
with the KV cache rolled back between choices equals the log-probability of a fresh prefill
of the prompt and that choice; the answer is the most probable one."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edgevlm.engine import Engine
from edgevlm.engine.prompt import PromptInputs
from edgevlm.models import demo_model_dir
from edgevlm.pipeline.preflight import bounds_for, preflight_context
from edgevlm.tokenizer import IM_END, tokenize_chat
from edgevlm.vision.prepare import Preparation, prepare_media
from edgevlm.wire.protocol import parse_request
from tests.helpers import image, image_bytes, text, user_request

CHOICES = ["yes", "no", "a red circle", "nobody"]


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine.load(demo_model_dir(), threads=1, context=1024)


def _fresh_logprob(engine: Engine, prompt: PromptInputs, sequence: list[int]) -> float:
    n, k = len(prompt.tokens), len(sequence)
    first = n + prompt.rope_delta
    extended = PromptInputs(
        np.concatenate([prompt.tokens, np.asarray(sequence, dtype=np.int32)]),
        np.concatenate([prompt.positions, np.tile(np.arange(first, first + k,
                                                            dtype=np.int32), (3, 1))], axis=1),
        np.concatenate([prompt.vision_index, np.full(k, -1, dtype=np.int32)]),
        prompt.vision_rows, prompt.deepstack_rows, prompt.rope_delta, prompt.n_vision)
    engine.session.reset()
    rows = engine.session.prefill(extended, n_logits=k + 1).astype(np.float64)
    total = 0.0
    for j, token in enumerate(sequence):
        row = rows[j]
        top = row.max()
        total += row[token] - top - math.log(np.exp(row - top).sum())
    return total


def test_rolled_back_scores_equal_fresh_prefills(engine: Engine) -> None:
    payload = user_request(image(image_bytes(96, 64, seed=2)), text("Is there a person?"),
                           choices=CHOICES)
    result = engine.generate(payload["messages"], choices=CHOICES)
    assert result.choices is not None and [c.text for c in result.choices] != []
    assert result.text == result.choices[0].text
    assert sum(c.probability for c in result.choices) == pytest.approx(1.0)
    assert all(a.logprob >= b.logprob for a, b in zip(result.choices, result.choices[1:],
                                                      strict=False))
    request = parse_request({"messages": payload["messages"]})
    ctx = preflight_context(engine)
    prepared = prepare_media(request, Preparation(engine.facts, ctx.family,
                                                  bounds_for(ctx, request), ctx.media))
    media, _ = engine.encode_prepared(prepared)
    segments = engine.architecture.chat_template(request.messages, True)
    prompt = engine.prompt_for(tokenize_chat(segments, engine.tokenizer), media)
    end = engine.tokenizer.control_id(IM_END)
    for choice in result.choices:
        fresh = _fresh_logprob(engine, prompt, [*choice.tokens, end])
        assert choice.logprob == pytest.approx(fresh, abs=2e-3), choice.text


def test_a_rollback_past_the_cache_is_refused(engine: Engine) -> None:
    from edgevlm.wire.errors import InternalError

    engine.session.reset()
    with pytest.raises(InternalError, match="rollback to 5"):
        engine.session.rollback(5)
