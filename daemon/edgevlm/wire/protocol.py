"""The one wire schema: request and response envelopes, error objects.

Requests follow the OpenAI chat shape (``messages`` with string or part-list content) inside a
versioned envelope (``v: 1``). Parsing is strict: unknown keys and unknown part types are
``invalid_request`` with the path of the offending field. The content parts and their media
bytes: :mod:`edgevlm.wire.parts` (re-exported here).
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring as _encode_json_string
from json.encoder import encode_basestring_ascii as _encode_json_string_ascii
from typing import Any, Literal

from pydantic import AliasChoices, Field, ValidationError, field_validator, model_validator

from .errors import InvalidRequest
from .parts import (
    PART_TYPES,
    AudioPart,
    ContentPart,
    ImagePart,
    ImageRefPart,
    ImageUrl,
    ImageUrlPart,
    InlineBytes,
    MediaSource,
    StrictModel,
    TextPart,
    UnicodeText,
    VideoFramesPart,
    VisionTokensPart,
    VisionTokensPayload,
    media_base64,
    media_base64_span,
    media_bytes,
)

__all__ = [
    "MAX_ID_LENGTH", "MAX_STOP_STRINGS", "PART_TYPES", "PROTOCOL_VERSION", "AnswerData",
    "AudioPart", "CacheInfo", "ContentPart", "ErrorBody", "ErrorType", "ImagePart",
    "ImageRefPart", "ImageUrl", "ImageUrlPart", "InlineBytes", "MMProcessorKwargs",
    "MediaSource", "Message", "Metrics", "Progress", "Request", "Response", "StreamChunk",
    "TextPart", "UnicodeText", "Usage", "VideoFramesPart", "VisionTokensPart",
    "VisionTokensPayload", "error_answer_json", "media_base64", "media_base64_span",
    "media_bytes", "parse_request", "request_id_of", "request_schema",
]

PROTOCOL_VERSION: Literal[1] = 1
MAX_ID_LENGTH = 128
MAX_STOP_STRINGS = 8
MAX_CHOICES = 32
MAX_CHOICE_CHARS = 256


# --------------------------------------------------------------------------- messages


class Message(StrictModel):
    role: Literal["system", "user", "assistant"]
    content: UnicodeText | list[ContentPart]

    def parts(self) -> list[ContentPart]:
        """The content as a list of parts (a plain string is one text part)."""
        if isinstance(self.content, str):
            return [TextPart(type="text", text=self.content)]
        return list(self.content)


class MMProcessorKwargs(StrictModel):
    """Per-request pixel bounds; clamped by the deployment's configuration."""

    min_pixels: int | None = Field(default=None, ge=1)
    max_pixels: int | None = Field(default=None, ge=1)


# --------------------------------------------------------------------------- request


class Request(StrictModel):
    v: Literal[1] = PROTOCOL_VERSION
    id: str | None = Field(default=None, max_length=MAX_ID_LENGTH,
                           validation_alias=AliasChoices("id", "transaction"))
    model: str | None = Field(default=None,
                              description="accepted for OpenAI compatibility; ignored")
    messages: list[Message] = Field(min_length=1)
    max_tokens: int = Field(default=128, ge=1, le=32768)
    temperature: float | None = Field(default=None, ge=0, le=5,
                                      description="absent: the model file's default")
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=0)
    repetition_penalty: float | None = Field(default=None, gt=0, le=10)
    seed: int | None = Field(default=None, ge=0, lt=2**64)
    stop: list[UnicodeText] = Field(default_factory=list, max_length=MAX_STOP_STRINGS)
    stream: bool = False
    deadline_ms: int | None = Field(default=None, ge=1)
    progress_s: float | None = Field(
        default=None, ge=1, le=60, description="the board that takes the request publishes "
        "a `working` message to its reply route at once and every progress_s seconds until "
        "the answer: a client that hears nothing for a while may send the same request "
        "again (the pool's retry rule, docs/mqtt.md)")
    mm_processor_kwargs: MMProcessorKwargs | None = None
    schema_: dict[str, Any] | bool | None = Field(
        default=None, alias="schema", description="a JSON schema the answer follows (true: "
        "any JSON object); decoding is constrained to it, the answer's `parsed` is the value")
    regex: str | None = Field(default=None, max_length=4096,
                              description="a regular expression the whole answer matches")
    choices: list[UnicodeText] | None = Field(
        default=None, min_length=2, max_length=MAX_CHOICES, description="the answer is the "
        "choice the model finds most probable after the prompt (each scored whole, no "
        "sampling); the answer's `choices` gives every one's probability")

    @field_validator("choices")
    @classmethod
    def _choices_short(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            if any(not c or len(c) > MAX_CHOICE_CHARS for c in value):
                raise ValueError(f"each choice must be 1-{MAX_CHOICE_CHARS} characters")
            if len(set(value)) != len(value):
                raise ValueError("choices must be different from each other")
        return value

    @model_validator(mode="after")
    def _one_shape(self) -> Request:
        shapes = [n for n, v in (("schema", self.schema_), ("regex", self.regex),
                                 ("choices", self.choices)) if v is not None]
        if len(shapes) > 1:
            raise ValueError(f"send one of schema, regex and choices, not {' and '.join(shapes)}")
        if self.choices is not None and self.stream:
            raise ValueError("choices answer at once: leave stream out")
        return self

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_as_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("stop")
    @classmethod
    def _no_empty_stop(cls, value: list[str]) -> list[str]:
        if any(s == "" for s in value):
            raise ValueError("stop strings must not be empty")
        return value

    @model_validator(mode="after")
    def _last_message_not_system(self) -> Request:
        if all(m.role == "system" for m in self.messages):
            raise ValueError("messages need at least one user or assistant message")
        return self

    def parts(self) -> list[ContentPart]:
        """Every content part of every message, in prompt order."""
        return [part for message in self.messages for part in message.parts()]


# --------------------------------------------------------------------------- response


class Usage(StrictModel):
    prompt_tokens: int
    vision_tokens: int
    completion_tokens: int


class Metrics(StrictModel):
    queue_ms: float = 0.0
    media_ms: float = 0.0
    encode_ms: float = 0.0
    prefill_ms: float = 0.0
    ttft_ms: float = 0.0
    tpot_ms: float = 0.0
    total_ms: float = 0.0


class CacheInfo(StrictModel):
    hit: bool
    key: str


class ChoiceInfo(StrictModel):
    text: str
    probability: float
    logprob: float


class AnswerData(StrictModel):
    text: str
    finish_reason: Literal["stop", "length", "cancelled"]
    usage: Usage
    metrics: Metrics
    cache: list[CacheInfo] = Field(default_factory=list)
    model: str
    deepstack: bool = True
    parsed: Any = Field(default=None, description="with schema: the answer as a JSON value "
                        "(absent when max_tokens cut it short)")
    choices: list[ChoiceInfo] | None = Field(default=None, description="with choices: every "
                                             "choice and its probability, best first")


ErrorType = Literal["invalid_request", "mm_limit_exceeded", "unsupported_modality",
                    "invalid_vision_tokens", "payload_too_large", "unsupported_media",
                    "context_length_exceeded", "cache_miss", "id_reused", "busy",
                    "deadline_exceeded", "internal"]


class ErrorBody(StrictModel):
    code: int
    type: ErrorType
    message: str


class Response(StrictModel):
    v: Literal[1] = PROTOCOL_VERSION
    id: str | None = None
    transaction: str | None = Field(default=None, description="the same value as id, for "
                                    "Zigbee2MQTT-style clients that match on 'transaction'")
    status: Literal["ok", "error"]
    data: AnswerData | None = None
    error: ErrorBody | None = None

    @classmethod
    def ok(cls, request_id: str | None, data: AnswerData) -> Response:
        return cls(id=request_id, transaction=request_id, status="ok", data=data)

    @classmethod
    def fail(cls, request_id: str | None, code: int, type_: ErrorType, message: str) -> Response:
        return cls(id=request_id, transaction=request_id, status="error",
                   error=ErrorBody(code=code, type=type_, message=message))

    def to_json(self) -> bytes:
        return self.model_dump_json(exclude_none=True).encode()


def _json_string(text: str) -> bytes:
    """A JSON string as pydantic writes it (UTF-8, the same escapes); text that is not valid
    Unicode (a lone surrogate from a ``\\ud800`` escape in a request) gets JSON escapes."""
    try:
        return _encode_json_string(text).encode()
    except UnicodeEncodeError:
        return _encode_json_string_ascii(text).encode()


def error_answer_json(request_id: str | None, code: int, type_: ErrorType, message: str
                      ) -> bytes:
    """``Response.fail(request_id, code, type_, message).to_json()``, byte for byte, without
    building models: the network thread answers floods of refused requests with it
    (``tests/unit/test_protocol.py`` compares the two). Unlike pydantic it also serialises an
    id that is not valid Unicode (echoed with JSON escapes) instead of raising."""
    ids = b""
    if request_id is not None:
        rid = _json_string(request_id)
        ids = b'"id":' + rid + b',"transaction":' + rid + b","
    return (b'{"v":1,' + ids + b'"status":"error","error":{"code":' + str(int(code)).encode()
            + b',"type":' + _json_string(type_) + b',"message":' + _json_string(message)
            + b"}}")


class StreamChunk(StrictModel):
    """A partial answer published before the final one when ``stream`` is true."""

    v: Literal[1] = PROTOCOL_VERSION
    id: str | None = None
    transaction: str | None = None
    status: Literal["partial"] = "partial"
    seq: int = Field(ge=0)
    text: str


class Progress(StrictModel):
    """A request is queued or running on ``node`` (sent while the request asked for
    ``progress_s``); never the answer: the final message has ``status`` ok or error."""

    v: Literal[1] = PROTOCOL_VERSION
    id: str | None = None
    transaction: str | None = None
    status: Literal["working"] = "working"
    node: str
    stage: Literal["queued", "running"]


# --------------------------------------------------------------------------- parsing


def _clean_loc(loc: tuple[int | str, ...]) -> str:
    """A dotted field path without pydantic's union-member and tag segments."""
    out: list[str] = []
    for i, part in enumerate(loc):
        if isinstance(part, str):
            is_tag = (part in PART_TYPES and i > 0 and isinstance(loc[i - 1], int)
                      and i + 1 < len(loc))
            is_member = part in ("str", "int", "float") or part[:1].isupper() or "[" in part
            if is_tag or is_member:
                continue
        out.append(str(part))
    return ".".join(out) or "request"


def _format_validation_error(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False)
    # content is "a string or a list of parts": when the list branch has a deeper error, the
    # "should be a valid string" error of the other branch is noise.
    deep = {_clean_loc(e["loc"]) for e in errors}
    problems: list[str] = []
    for err in errors:
        loc = _clean_loc(err["loc"])
        if err["type"] in ("string_type", "model_type", "dict_type") and any(
                d != loc and d.startswith(loc + ".") for d in deep):
            continue
        msg = err["msg"]
        if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
            msg = f"unknown content part type; use one of {', '.join(PART_TYPES)}"
        elif err["type"] == "extra_forbidden":
            msg = "unknown field; remove it (see `edgevlm schema` for the request schema)"
        elif err["type"] == "missing":
            msg = "field required"
        problem = f"{loc}: {msg}"
        if problem not in problems:
            problems.append(problem)
    shown = problems[:5]
    more = len(problems) - len(shown)
    return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


def parse_request(payload: bytes | str | dict[str, Any]) -> Request:
    """Parse a request payload, raising :class:`InvalidRequest` with the offending fields."""
    if isinstance(payload, bytes | str):
        try:
            obj = json.loads(payload)
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an int of > 4300 digits
            raise InvalidRequest(f"payload is not JSON ({exc}); send a UTF-8 JSON object") from None
        except RecursionError:
            raise InvalidRequest("payload is nested too deeply to parse; send a JSON object "
                                 "with 'messages'") from None
    else:
        obj = payload
    if not isinstance(obj, dict):
        raise InvalidRequest(f"payload is a JSON {type(obj).__name__}; send a JSON object with "
                             "'messages'")
    try:
        return Request.model_validate(obj)
    except ValidationError as exc:
        problems = _format_validation_error(exc)
    # raised from a helper: an exception held in a local of the frame it is raised from makes
    # a reference cycle (exception -> traceback -> frame -> exception), garbage for the cyclic
    # GC on every refused request
    raise _invalid_request(problems, _id_of(obj))


def _invalid_request(problems: str, request_id: str | None) -> InvalidRequest:
    error = InvalidRequest(problems)
    error.request_id = request_id
    return error


def request_id_of(payload: bytes | str) -> str | None:
    """Best-effort id (or transaction) of a payload that failed to parse, for the error answer."""
    try:
        obj = json.loads(payload)
    except (ValueError, RecursionError):
        return None
    return _id_of(obj)


def _id_of(obj: Any) -> str | None:
    if isinstance(obj, dict):
        for key in ("id", "transaction"):
            value = obj.get(key)
            if isinstance(value, str) and len(value) <= MAX_ID_LENGTH:
                return value
    return None


def request_schema() -> dict[str, Any]:
    """JSON Schema of requests, responses and stream chunks (``edgevlm schema``)."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "edgevlm wire protocol v1",
        "request": Request.model_json_schema(by_alias=True),
        "response": Response.model_json_schema(),
        "stream_chunk": StreamChunk.model_json_schema(),
        "progress": Progress.model_json_schema(),
    }
