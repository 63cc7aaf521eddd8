"""Admission of one request payload: everything checked before any media is decoded.

Order (cheapest first): payload size, JSON + schema, modality, item counts, frames, part sizes,
then the token budget from image headers. Each refusal is an
:class:`~edgevlm.wire.errors.EdgevlmError`
whose wire form comes from :func:`edgevlm.wire.errors.wire_error`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..structured import Grammar, compile_grammar
from ..vision.prepare import PreparedMedia
from ..wire.errors import CacheMiss, EdgevlmError, PayloadTooLarge
from ..wire.protocol import Request, parse_request
from .image_refs import ImageRefs
from .limits import RequestLimits, check_request_limits, count_items
from .preflight import Budget, PreflightContext, preflight


@dataclass(frozen=True)
class RequestSide:
    """The deployment's request-side settings and the model facts they need."""

    limits: RequestLimits
    preflight: PreflightContext


def side_for(side: RequestSide, refs: ImageRefs, requester: str) -> RequestSide:
    """The request side of one requester (every front door's): its ``image_ref`` parts are
    opened with its capabilities (:mod:`.image_refs`) and cost what the cache holds."""
    cached_tokens = side.preflight.ref_tokens

    def ref_tokens(ref: str) -> int | None:
        key = refs.open(ref, requester)
        if key is None:
            raise CacheMiss(f"image_ref {ref} was not given to this requester: a reference "
                            "works only for the requester its answer went to, until the "
                            "daemon restarts; send the image bytes again")
        return cached_tokens(key) if cached_tokens is not None else None

    return RequestSide(side.limits, dataclasses.replace(side.preflight, ref_tokens=ref_tokens))


@dataclass
class Admitted:
    """One admitted request: the job the pipeline carries from admission to the engine.

    ``budget`` holds what admission decided (token counts, the pixel bounds, the tokenized
    chat); the worker fills ``media`` (:func:`edgevlm.pipeline.run.run_admitted`). Nothing
    downstream computes them again."""

    request: Request
    counts: dict[str, int]
    budget: Budget
    grammar: Grammar | None = None  # the answer's schema or regex, compiled
    media: list[PreparedMedia] = field(default_factory=list)  # prepared on the worker


def admit(payload: bytes, side: RequestSide) -> Admitted:
    """Parse and check a request payload; raises the error to answer with."""
    if len(payload) > side.limits.max_payload_bytes:
        raise PayloadTooLarge(f"request is {len(payload)} bytes, the limit is "
                              f"{side.limits.max_payload_bytes} (limits.max_payload_bytes); "
                              "send smaller images or fewer of them")
    return admit_request(parse_request(payload), len(payload), side)


def admit_request(request: Request, payload_bytes: int, side: RequestSide, *,
                  fit_max_tokens: bool = False) -> Admitted:
    """The checks after parsing, for a request built in the daemon (a camera frame, its
    ``payload_bytes`` the image's and the prompt's) as for one from the wire.
    ``fit_max_tokens``: ``max_tokens`` is a cap the answer is fitted to (Ollama's
    ``num_predict``; :func:`~edgevlm.pipeline.preflight.preflight`)."""
    try:
        check_request_limits(request, payload_bytes, side.limits)
        grammar = compile_grammar(request.schema_, request.regex)
        budget = preflight(request, side.preflight, fit_max_tokens=fit_max_tokens)
    except EdgevlmError as exc:
        exc.request_id = request.id
        raise
    if budget.max_tokens != request.max_tokens:  # fitted to the context
        request = request.model_copy(update={"max_tokens": budget.max_tokens})
    return Admitted(request, count_items(request), budget, grammar)
