"""The exception tree of edgevlm, and the one place that maps exceptions to wire errors.

Every error a client can see is an :class:`EdgevlmError` subclass with an HTTP-like ``code``
and a stable ``type`` string (the ``error.type`` of the response envelope). Messages say what
to change. Anything else that escapes into a request is mapped to ``internal`` by
:func:`wire_error`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


class EdgevlmError(Exception):
    """Base of every error that is answered to a client."""

    code: ClassVar[int] = 500
    type: ClassVar[str] = "internal"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        # the id of the refused request, set where the payload was already parsed, so the
        # error answer can echo it without parsing the payload again
        self.request_id: str | None = None


class InvalidRequest(EdgevlmError):
    """The payload is not JSON, or does not follow the request schema."""

    code = 400
    type = "invalid_request"


class MMLimitExceeded(EdgevlmError):
    """More items of one modality than ``limit_mm_per_prompt`` allows."""

    code = 400
    type = "mm_limit_exceeded"


class UnsupportedModality(EdgevlmError):
    """A modality edgevlm does not run (audio)."""

    code = 400
    type = "unsupported_modality"


class InvalidVisionTokens(EdgevlmError):
    """A ``vision_tokens`` part whose grid, base64 or byte counts do not fit the model."""

    code = 400
    type = "invalid_vision_tokens"


class PayloadTooLarge(EdgevlmError):
    """A part, a request or a video is bigger than the configured limits."""

    code = 413
    type = "payload_too_large"


class UnsupportedMedia(EdgevlmError):
    """Media that cannot be decoded safely: unknown or disallowed format, corrupt, a bomb."""

    code = 400
    type = "unsupported_media"

    def __init__(self, message: str, *, code: int = 400) -> None:
        super().__init__(message)
        self.status_code = code


class ContextLengthExceeded(EdgevlmError):
    """Prompt tokens plus ``max_tokens`` do not fit the model's context."""

    code = 400
    type = "context_length_exceeded"


class CacheMiss(EdgevlmError):
    """An ``image_ref`` whose cache entry is gone: the client re-sends the bytes."""

    code = 404
    type = "cache_miss"


class IdReused(EdgevlmError):
    """A request id that names another request (other bytes) answered or running within
    ``limits.dedupe_window_s``: never answered with the other request's answer."""

    code = 400
    type = "id_reused"


class Busy(EdgevlmError):
    """The board's queue is full."""

    code = 503
    type = "busy"


class DeadlineExceeded(EdgevlmError):
    """The request's deadline passed before its work could start or finish."""

    code = 504
    type = "deadline_exceeded"


class InternalError(EdgevlmError):
    """A bug or an engine failure; the message is logged, the client sees a short form."""

    code = 500
    type = "internal"


ERROR_TYPES: tuple[type[EdgevlmError], ...] = (
    InvalidRequest,
    MMLimitExceeded,
    UnsupportedModality,
    InvalidVisionTokens,
    PayloadTooLarge,
    UnsupportedMedia,
    ContextLengthExceeded,
    CacheMiss,
    IdReused,
    Busy,
    DeadlineExceeded,
    InternalError,
)


@dataclass(frozen=True)
class WireError:
    """The ``error`` object of a response envelope."""

    code: int
    type: str
    message: str


def wire_error(exc: BaseException) -> WireError:
    """Map any exception to the wire error a client sees (the only such mapping)."""
    if isinstance(exc, UnsupportedMedia):
        return WireError(exc.status_code, exc.type, exc.message)
    if isinstance(exc, EdgevlmError):
        return WireError(exc.code, exc.type, exc.message)
    return WireError(InternalError.code, InternalError.type,
                     f"internal error ({type(exc).__name__}); see the daemon log")
