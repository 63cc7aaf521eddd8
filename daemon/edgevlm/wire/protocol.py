"""The one wire schema: request and response envelopes, content parts, error objects.

Requests follow the OpenAI chat shape (``messages`` with string or part-list content) inside a
versioned envelope (``v: 1``). Parsing is strict: unknown keys and unknown part types are
``invalid_request`` with the path of the offending field. Media are *not* decoded here: parts
carry their base64 text, and the request side decides when (and whether) to decode them.
"""

from __future__ import annotations

import json
import re
from json.encoder import encode_basestring as _encode_json_string
from json.encoder import encode_basestring_ascii as _encode_json_string_ascii
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from . import strict_base64
from .errors import InvalidRequest, UnsupportedMedia

PROTOCOL_VERSION: Literal[1] = 1
MAX_ID_LENGTH = 128
MAX_STOP_STRINGS = 8

_DATA_URL = re.compile(
    r"\Adata:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(?:;[\w.+-]+=[^;,]*)*);base64,")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


# --------------------------------------------------------------------------- content parts


class InlineBytes(_Strict):
    """Media bytes as base64 with an optional MIME type. In the daemon the bytes may also be
    held raw (:meth:`of_bytes`: a camera frame), never base64-encoded just to be decoded."""

    b64: str
    mime: str | None = None
    _raw: bytes | None = PrivateAttr(default=None)

    @classmethod
    def of_bytes(cls, data: bytes, mime: str | None = None) -> InlineBytes:
        """Raw bytes already in hand (not from the wire; ``b64`` stays empty)."""
        inline = cls(b64="", mime=mime)
        inline._raw = data
        return inline

    @property
    def raw(self) -> bytes | None:
        return self._raw


MediaSource = Annotated[str | InlineBytes, Field(description="a data: URL or {b64, mime}")]


def _valid_unicode(text: str) -> str:
    """Refuse a lone surrogate (a ``\\ud800`` escape in the JSON): no tokenizer can encode it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"not valid Unicode: a lone surrogate {text[exc.start]!r} at "
                         f"character {exc.start}; send UTF-8 text") from None
    return text


UnicodeText = Annotated[str, AfterValidator(_valid_unicode)]


class TextPart(_Strict):
    type: Literal["text"]
    text: UnicodeText


class ImagePart(_Strict):
    type: Literal["image"]
    image: MediaSource


class ImageUrl(_Strict):
    url: str


class ImageUrlPart(_Strict):
    """OpenAI's ``image_url``; only ``data:`` URLs are accepted, nothing is ever fetched."""

    type: Literal["image_url"]
    image_url: str | ImageUrl

    @field_validator("image_url")
    @classmethod
    def _data_url_only(cls, value: str | ImageUrl) -> str | ImageUrl:
        url = value if isinstance(value, str) else value.url
        if not url.startswith("data:"):
            raise ValueError("only data: URLs are accepted (edgevlm never fetches http or file "
                             "URLs); send the bytes as 'data:image/jpeg;base64,...'")
        return value


class VideoFramesPart(_Strict):
    """A clip as a list of same-size frames sampled at ``fps``."""

    type: Literal["video_frames"]
    video_frames: list[MediaSource] = Field(min_length=1)
    fps: float = Field(default=2.0, gt=0, le=240)


class VisionTokensPayload(_Strict):
    """Client-precomputed vision features (seed protocol v1 plus ``dtype``/``layout``)."""

    grid: tuple[int, int, int]
    tokens_b64: str
    ds_b64: list[str] | None = None
    dtype: Literal["f32", "f16"] = "f32"
    layout: Literal["separate", "packed"] = "separate"


class VisionTokensPart(_Strict):
    type: Literal["vision_tokens"]
    vision_tokens: VisionTokensPayload


class ImageRefPart(_Strict):
    """A reference returned by an earlier answer (``cache[].key``): 64 hex digits, usable by
    the reply route it was sent to (:mod:`edgevlm.pipeline.image_refs`); a bare 32-digit cache key
    parses, and finds nothing in the daemon."""

    type: Literal["image_ref"]
    image_ref: str = Field(pattern=r"^[0-9a-f]{32}(?:[0-9a-f]{32})?$")


class AudioPart(BaseModel):
    """Audio in any of the OpenAI spellings; parsed only so it can be refused clearly."""

    model_config = ConfigDict(extra="allow", frozen=True)
    type: Literal["audio", "input_audio", "audio_url"]


def _part_tag(value: Any) -> str | None:
    if isinstance(value, dict):
        tag = value.get("type")
        return tag if isinstance(tag, str) else None
    return getattr(value, "type", None)


ContentPart = Annotated[
    Annotated[TextPart, Tag("text")]
    | Annotated[ImagePart, Tag("image")]
    | Annotated[ImageUrlPart, Tag("image_url")]
    | Annotated[VideoFramesPart, Tag("video_frames")]
    | Annotated[VisionTokensPart, Tag("vision_tokens")]
    | Annotated[ImageRefPart, Tag("image_ref")]
    | Annotated[AudioPart, Tag("audio")]
    | Annotated[AudioPart, Tag("input_audio")]
    | Annotated[AudioPart, Tag("audio_url")],
    Discriminator(_part_tag),
]

PART_TYPES = ("text", "image", "image_url", "video_frames", "vision_tokens", "image_ref",
              "audio", "input_audio", "audio_url")


class Message(_Strict):
    role: Literal["system", "user", "assistant"]
    content: UnicodeText | list[ContentPart]

    def parts(self) -> list[ContentPart]:
        """The content as a list of parts (a plain string is one text part)."""
        if isinstance(self.content, str):
            return [TextPart(type="text", text=self.content)]
        return list(self.content)


class MMProcessorKwargs(_Strict):
    """Per-request pixel bounds; clamped by the deployment's configuration."""

    min_pixels: int | None = Field(default=None, ge=1)
    max_pixels: int | None = Field(default=None, ge=1)


# --------------------------------------------------------------------------- request


class Request(_Strict):
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


class Usage(_Strict):
    prompt_tokens: int
    vision_tokens: int
    completion_tokens: int


class Metrics(_Strict):
    queue_ms: float = 0.0
    media_ms: float = 0.0
    encode_ms: float = 0.0
    prefill_ms: float = 0.0
    ttft_ms: float = 0.0
    tpot_ms: float = 0.0
    total_ms: float = 0.0


class CacheInfo(_Strict):
    hit: bool
    key: str


class AnswerData(_Strict):
    text: str
    finish_reason: Literal["stop", "length", "cancelled"]
    usage: Usage
    metrics: Metrics
    cache: list[CacheInfo] = Field(default_factory=list)
    model: str
    deepstack: bool = True


ErrorType = Literal["invalid_request", "mm_limit_exceeded", "unsupported_modality",
                    "invalid_vision_tokens", "payload_too_large", "unsupported_media",
                    "context_length_exceeded", "cache_miss", "id_reused", "busy",
                    "deadline_exceeded", "internal"]


class ErrorBody(_Strict):
    code: int
    type: ErrorType
    message: str


class Response(_Strict):
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


class StreamChunk(_Strict):
    """A partial answer published before the final one when ``stream`` is true."""

    v: Literal[1] = PROTOCOL_VERSION
    id: str | None = None
    transaction: str | None = None
    status: Literal["partial"] = "partial"
    seq: int = Field(ge=0)
    text: str


class Progress(_Strict):
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


# --------------------------------------------------------------------------- media bytes


def media_base64_span(source: str | InlineBytes | ImageUrl) -> tuple[str | None, str, int]:
    """(mime, text, start): the base64 is ``text[start:]``; nothing is copied."""
    if isinstance(source, InlineBytes):
        return source.mime, source.b64, 0
    url = source.url if isinstance(source, ImageUrl) else source
    match = _DATA_URL.match(url)
    if not match:
        raise UnsupportedMedia("media must be a 'data:<mime>;base64,<bytes>' URL or "
                               "{'b64': ..., 'mime': ...}")
    return match.group("mime"), url, match.end()


def media_base64(source: str | InlineBytes | ImageUrl) -> tuple[str | None, str]:
    """(mime, base64 text) of a media source, without decoding the bytes."""
    mime, text, start = media_base64_span(source)
    return mime, text[start:] if start else text


def media_bytes(source: str | InlineBytes | ImageUrl) -> bytes:
    """The raw bytes of a media source (strict base64)."""
    if isinstance(source, InlineBytes) and source.raw is not None:
        return source.raw
    _, text = media_base64(source)
    try:
        return strict_base64.decode(text)
    except strict_base64.Base64Error as exc:
        raise UnsupportedMedia(f"media base64 is invalid: {exc}") from None


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
