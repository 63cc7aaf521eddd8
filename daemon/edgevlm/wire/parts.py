"""Content parts of a message, and the media bytes they carry.

A message's content is a string or a list of parts (``text``, ``image``, ``image_url``,
``video_frames``, ``vision_tokens``, ``image_ref``; audio parts parse only to be refused).
Media are *not* decoded when a request is parsed: parts carry their base64 text
(:func:`media_base64_span`, :func:`media_base64`), and the request side decides when (and
whether) to decode them (:func:`media_bytes`). The envelopes around them:
:mod:`edgevlm.wire.protocol`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    field_validator,
)

from . import strict_base64
from .errors import UnsupportedMedia

_DATA_URL = re.compile(
    r"\Adata:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(?:;[\w.+-]+=[^;,]*)*);base64,")


class StrictModel(BaseModel):
    """The wire's models: unknown keys are refused, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


# --------------------------------------------------------------------------- content parts


class InlineBytes(StrictModel):
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


class TextPart(StrictModel):
    type: Literal["text"]
    text: UnicodeText


class ImagePart(StrictModel):
    type: Literal["image"]
    image: MediaSource


class ImageUrl(StrictModel):
    url: str


class ImageUrlPart(StrictModel):
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


class VideoFramesPart(StrictModel):
    """A clip as a list of same-size frames sampled at ``fps``."""

    type: Literal["video_frames"]
    video_frames: list[MediaSource] = Field(min_length=1)
    fps: float = Field(default=2.0, gt=0, le=240)


class VisionTokensPayload(StrictModel):
    """Client-precomputed vision features (seed protocol v1 plus ``dtype``/``layout``)."""

    grid: tuple[int, int, int]
    tokens_b64: str
    ds_b64: list[str] | None = None
    dtype: Literal["f32", "f16"] = "f32"
    layout: Literal["separate", "packed"] = "separate"


class VisionTokensPart(StrictModel):
    type: Literal["vision_tokens"]
    vision_tokens: VisionTokensPayload


class ImageRefPart(StrictModel):
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

