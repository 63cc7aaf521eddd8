"""What a verb is: a value with its admission and its answer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..engine import GenerationResult
    from ..pipeline.admission import Admitted, RequestSide
    from ..wire.protocol import AnswerData

# (result, model name, queue ms, image_ref issuer or None) -> the ``data`` of an ok answer
AnswerBuilder = Callable[["GenerationResult", str, float, "Callable[[str], str] | None"],
                         "AnswerData"]


@dataclass(frozen=True)
class Verb:
    """One verb: ``name`` is its topic level (``<base>/<node>/request/<name>``); ``admit``
    turns a payload into an admitted request or raises the error to answer with; ``answer``
    builds the ``data`` of its ok answer from the engine's result."""

    name: str
    admit: Callable[[bytes, RequestSide], Admitted]
    answer: AnswerBuilder
