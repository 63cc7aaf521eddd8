"""``describe``: a question about images, video frames or vision features, answered in text.

Its request is the wire protocol's :class:`~edgevlm.wire.protocol.Request`; its admission the
pipeline's (:func:`edgevlm.pipeline.admission.admit`); its answer
:class:`~edgevlm.wire.protocol.AnswerData`. Camera frames are describe requests too
(:func:`frame_request`), admitted like any other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..pipeline.admission import Admitted, RequestSide
from ..pipeline.admission import admit as admit_payload
from ..wire.protocol import (
    AnswerData,
    CacheInfo,
    ChoiceInfo,
    ImagePart,
    InlineBytes,
    Message,
    MMProcessorKwargs,
    Request,
    TextPart,
    Usage,
)
from ..wire.protocol import Metrics as AnswerMetrics
from .base import Verb

if TYPE_CHECKING:
    from ..engine import GenerationResult

NAME = "describe"


def admit(payload: bytes, side: RequestSide) -> Admitted:
    return admit_payload(payload, side)


def frame_request(image: bytes, prompt: str, max_tokens: int,
                  schema: dict[str, Any] | None = None,
                  choices: list[str] | None = None, max_pixels: int | None = None) -> Request:
    """A camera frame as a describe request: the image bytes as they came (no base64), then
    the prompt; ``schema``/``choices``/``max_pixels``: the camera's ``json_schema``,
    ``choices`` and ``max_pixels`` (a request's pixel bound, clamped by the deployment's as
    any request's is)."""
    return Request(messages=[Message(role="user", content=[
        ImagePart(type="image", image=InlineBytes.of_bytes(image)),
        TextPart(type="text", text=prompt)])], max_tokens=max_tokens, schema_=schema,
                   choices=choices,
                   mm_processor_kwargs=MMProcessorKwargs(max_pixels=max_pixels)
                   if max_pixels is not None else None)


def answer(result: GenerationResult, model: str, queue_ms: float,
           ref: Callable[[str], str] | None = None) -> AnswerData:
    """The ``data`` of an ok answer; ``ref`` turns each cache key into the ``image_ref``
    the requester gets back (None: the keys as they are)."""
    m = result.metrics
    return AnswerData(
        text=result.text, finish_reason=result.finish_reason,
        usage=Usage(prompt_tokens=result.prompt_tokens, vision_tokens=result.vision_tokens,
                    completion_tokens=len(result.tokens)),
        metrics=AnswerMetrics(queue_ms=round(queue_ms, 3),
                              **{k: round(float(m.get(k, 0.0)), 3) for k in (
                                  "media_ms", "encode_ms", "prefill_ms", "ttft_ms", "tpot_ms",
                                  "total_ms")}),
        cache=[CacheInfo(hit=hit, key=ref(key) if ref is not None else key)
               for hit, key in result.cache],
        model=model, deepstack=result.deepstack, parsed=result.parsed,
        choices=[ChoiceInfo(text=c.text, probability=round(c.probability, 6),
                            logprob=round(c.logprob, 4)) for c in result.choices]
        if result.choices is not None else None)


VERB = Verb(NAME, admit, answer)
