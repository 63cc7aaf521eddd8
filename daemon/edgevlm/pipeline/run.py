"""An admitted request through the engine, on the worker thread.

Its chat was tokenized at admission (or, for a text too long to count there, here first,
with the context check, before any media is decoded); its media are prepared with the
admission's pixel bounds (:mod:`edgevlm.vision.prepare`: cache lookup, safe decode,
patchify); the engine encodes the cache misses, lays out the prompt and decodes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..vision.prepare import FeatureCache, ModelFacts, Preparation, PreparedMedia, RefOpener
from ..vision.prepare import prepare_media as prepare_request_media
from .admission import Admitted
from .preflight import PreflightContext, count_long_text

if TYPE_CHECKING:
    from ..engine import Engine, GenerationResult


def prepare_media(admitted: Admitted, model: ModelFacts, ctx: PreflightContext,
                  cache: FeatureCache | None, refs: RefOpener | None = None
                  ) -> list[PreparedMedia]:
    """``admitted.media``: its media prepared with the admission's pixel bounds."""
    assert admitted.budget.bounds is not None, "a budget from preflight() has its bounds"
    admitted.media = prepare_request_media(admitted.request, Preparation(
        model, ctx.family, admitted.budget.bounds, ctx.media, cache), refs)
    return admitted.media


def run_admitted(engine: Engine, admitted: Admitted, ctx: PreflightContext,
                 refs: RefOpener | None = None,
                 on_text: Callable[[str], None] | None = None) -> GenerationResult:
    """Answer ``admitted`` with ``engine``; ``ctx`` is the admission's (its decode policy
    and family), ``refs`` opens ``image_ref`` parts for the requester."""
    request, budget = admitted.request, admitted.budget
    chat = budget.chat  # None and exact: admission's tokenizer has no ids; the engine's tokenizes
    if not budget.text_exact:
        chat, max_tokens = count_long_text(request, budget, engine.tokenizer, ctx.chat_template)
        if max_tokens != request.max_tokens:  # fitted to the context (Ollama's num_predict)
            request = request.model_copy(update={"max_tokens": max_tokens})
    t0 = time.perf_counter()
    prepare_media(admitted, engine.facts, ctx, engine.cache, refs)
    media_ms = (time.perf_counter() - t0) * 1e3
    return engine.generate_prepared(request, admitted.media, media_ms=media_ms,
                                    on_text=on_text, chat=chat, checked=True,
                                    grammar=admitted.grammar)
