"""Wire errors as HTTP answers: the status of each error type, and the body each dialect
expects (OpenAI: ``{"error": {"message", "type", "param", "code"}}``; Ollama:
``{"error": "<message>"}``)."""

from __future__ import annotations

from typing import Any

from ...wire.errors import WireError, wire_error

# Error type -> HTTP status where it is not the wire error's own code.
STATUS = {"busy": 429, "deadline_exceeded": 504, "internal": 500, "id_reused": 409}
RETRY_AFTER_S = 1  # busy: try again this soon (or another board)


class HttpError(Exception):
    """An error answered before the request reaches admission (auth, JSON, a parameter)."""

    def __init__(self, status: int, type_: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.type = type_
        self.message = message
        self.param = param


def from_exception(exc: BaseException) -> HttpError:
    """Any exception as an :class:`HttpError` (an unexpected one: ``internal``)."""
    if isinstance(exc, HttpError):
        return exc
    err: WireError = wire_error(exc)
    return HttpError(STATUS.get(err.type, err.code), err.type, err.message)


def from_answer(error: dict[str, Any]) -> HttpError:
    """The ``error`` object of a failed answer (``{"code", "type", "message"}``)."""
    kind = str(error.get("type", "internal"))
    return HttpError(STATUS.get(kind, int(error.get("code", 500))), kind,
                     str(error.get("message", "")))


def headers_of(err: HttpError) -> dict[str, str]:
    return {"Retry-After": str(RETRY_AFTER_S)} if err.type == "busy" else {}


def openai_body(err: HttpError) -> dict[str, Any]:
    return {"error": {"message": err.message, "type": err.type, "param": err.param,
                      "code": err.type}}


def ollama_body(err: HttpError) -> dict[str, Any]:
    return {"error": err.message}
