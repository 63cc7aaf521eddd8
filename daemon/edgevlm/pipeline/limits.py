"""Per-modality item limits (``limit_mm_per_prompt``) and request size limits.

Modelled on vLLM's ``--limit-mm-per-prompt``: a mapping (or a JSON string) from modality to
either a count (``"image": 4``) or an object (``"video": {"count": 1, "num_frames": 16}``).
A modality that is absent, or an object without ``count``, is unlimited. The modalities are a
closed set (image, video, audio). Extra options are kept (and shown in ``bridge/info``); unlike
vLLM, which only uses them to size its profiling run, edgevlm *enforces* the two it
understands:

- ``num_frames`` (video): a ``video_frames`` part with more frames is refused;
- ``max_pixels`` (image, video): caps the pixels an image (or a video frame) is resized to,
  on top of ``model.max_pixels``; a request's ``mm_processor_kwargs`` cannot raise it.

Counting happens before any media is decoded or looked up: ``image``, ``image_url``,
``image_ref`` and ``vision_tokens`` count as ``image``; one ``video_frames`` part is one
``video``; an audio part is refused as ``unsupported_modality``.

The messages' text is limited by its length (``max_text_bytes``, UTF-8 bytes over all text
parts) before anything tokenizes it: tokenizing runs at 0.4–2.4 MB/s and, in a request of
megabytes, would hold the network thread for seconds (issue 20, finding 2).

The token budget preflight lives in :mod:`edgevlm.pipeline.preflight`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ..wire import strict_base64
from ..wire.errors import MMLimitExceeded, PayloadTooLarge, UnsupportedModality
from ..wire.protocol import (
    AudioPart,
    ImagePart,
    ImageRefPart,
    ImageUrlPart,
    InlineBytes,
    Request,
    TextPart,
    VideoFramesPart,
    VisionTokensPart,
    media_base64,
)

MODALITIES = ("image", "video", "audio")
ENFORCED_OPTIONS = {"image": ("max_pixels",), "video": ("num_frames", "max_pixels"), "audio": ()}


@dataclass(frozen=True)
class ModalityLimit:
    """The limit of one modality: an item count (None = unlimited) and its options."""

    count: int | None
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def num_frames(self) -> int | None:
        value = self.options.get("num_frames")
        return value if isinstance(value, int) else None

    @property
    def max_pixels(self) -> int | None:
        value = self.options.get("max_pixels")
        return value if isinstance(value, int) else None

    def to_json(self) -> int | dict[str, Any] | None:
        if not self.options:
            return self.count
        return {"count": self.count, **self.options} if self.count is not None else dict(
            self.options)


def _positive_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{where} must be a non-negative integer, got {value!r}")
    return value


def _parse_one(modality: str, spec: Any) -> ModalityLimit:
    if isinstance(spec, bool):
        raise ValueError(f"{modality}: expected a count or an object, got {spec!r}")
    if isinstance(spec, int):
        return ModalityLimit(_positive_int(spec, modality))
    if isinstance(spec, Mapping):
        options = {str(k): v for k, v in spec.items() if k != "count"}
        count = spec.get("count")
        for key in ENFORCED_OPTIONS[modality]:
            if key in options:
                minimum = 1
                value = _positive_int(options[key], f"{modality}.{key}")
                if value < minimum:
                    raise ValueError(f"{modality}.{key} must be at least {minimum}, got {value}")
        return ModalityLimit(None if count is None else _positive_int(count, f"{modality}.count"),
                             MappingProxyType(options))
    raise ValueError(f"{modality}: expected a count (e.g. 4) or an object "
                     f"(e.g. {{\"count\": 1, \"num_frames\": 16}}), got {spec!r}")


@dataclass(frozen=True)
class MMLimits:
    """``limit_mm_per_prompt``: modality -> :class:`ModalityLimit`; absent = unlimited."""

    per_modality: Mapping[str, ModalityLimit] = field(
        default_factory=lambda: MappingProxyType({}))

    @classmethod
    def parse(cls, value: Any) -> MMLimits:
        """Parse a mapping or a JSON string; ValueError names the valid modalities."""
        if isinstance(value, MMLimits):
            return value
        if value is None:
            return cls()
        if isinstance(value, str):
            try:
                value = json.loads(value) if value.strip() else {}
            except json.JSONDecodeError as exc:
                raise ValueError(f"not valid JSON ({exc}); write e.g. "
                                 "'{\"image\": 4, \"video\": {\"count\": 1}}'") from None
        if not isinstance(value, Mapping):
            raise ValueError(f"expected a mapping of modality to limit, got {value!r}")
        limits: dict[str, ModalityLimit] = {}
        for key, spec in value.items():
            if key not in MODALITIES:
                raise ValueError(f"unknown modality {key!r}; valid modalities are "
                                 f"{', '.join(MODALITIES)}")
            limits[key] = _parse_one(key, spec)
        return cls(MappingProxyType(limits))

    def limit(self, modality: str) -> ModalityLimit | None:
        return self.per_modality.get(modality)

    def count_limit(self, modality: str) -> int | None:
        limit = self.per_modality.get(modality)
        return None if limit is None else limit.count

    def to_json(self) -> dict[str, Any]:
        return {k: v.to_json() for k, v in self.per_modality.items()}


@dataclass(frozen=True)
class RequestLimits:
    """Everything admission checks before any media is decoded."""

    mm: MMLimits = field(default_factory=MMLimits)
    max_payload_bytes: int = 16 * 2**20
    max_part_bytes: int = 8 * 2**20
    max_video_frames: int = 32
    max_text_bytes: int = 64 * 2**10


def utf8_length(text: str) -> int:
    """UTF-8 bytes of ``text`` (ASCII: without encoding it)."""
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def message_text_bytes(request: Request) -> int:
    """UTF-8 bytes of the text parts of every message (what ``max_text_bytes`` limits)."""
    total = 0
    for message in request.messages:
        if isinstance(message.content, str):  # not .parts(): no TextPart validated again
            total += utf8_length(message.content)
        else:
            total += sum(utf8_length(p.text) for p in message.content if isinstance(p, TextPart))
    return total


def modality_of(part: object) -> str | None:
    """The modality a content part counts as, or None for text."""
    if isinstance(part, ImagePart | ImageUrlPart | ImageRefPart | VisionTokensPart):
        return "image"
    if isinstance(part, VideoFramesPart):
        return "video"
    if isinstance(part, AudioPart):
        return "audio"
    return None


def count_items(request: Request) -> dict[str, int]:
    """Items per modality, in the closed set of modalities."""
    counts = dict.fromkeys(MODALITIES, 0)
    for part in request.parts():
        modality = modality_of(part)
        if modality is not None:
            counts[modality] += 1
    return counts


def _part_paths(request: Request) -> list[tuple[str, object]]:
    paths: list[tuple[str, object]] = []
    for i, message in enumerate(request.messages):
        for j, part in enumerate(message.parts()):
            paths.append((f"messages.{i}.content.{j}", part))
    return paths


def check_request_limits(request: Request, payload_bytes: int, limits: RequestLimits) -> None:
    """Admission checks: modality, item counts, frames, part, text and request sizes.

    Cheap: nothing is decoded or tokenized, sizes come from base64 and text lengths.
    """
    if payload_bytes > limits.max_payload_bytes:
        raise PayloadTooLarge(f"request is {payload_bytes} bytes, the limit is "
                              f"{limits.max_payload_bytes} (limits.max_payload_bytes); send "
                              "smaller images or fewer of them")
    text_bytes = message_text_bytes(request)
    if text_bytes > limits.max_text_bytes:
        raise PayloadTooLarge(f"the messages' text is {text_bytes} bytes, the limit is "
                              f"{limits.max_text_bytes} (limits.max_text_bytes); send less "
                              "text")
    parts = _part_paths(request)
    for path, part in parts:
        if isinstance(part, AudioPart):
            raise UnsupportedModality(f"{path}: audio is not supported by this model; "
                                      "remove the audio part")
    counts = count_items(request)
    for modality, count in counts.items():
        limit = limits.mm.count_limit(modality)
        if limit is not None and count > limit:
            raise MMLimitExceeded(f"{count} {modality} items in the request, the limit is "
                                  f"{limit} (limits.limit_mm_per_prompt.{modality}); send at "
                                  f"most {limit}")
    video_limit = limits.mm.limit("video")
    option_frames = video_limit.num_frames if video_limit else None
    for path, part in parts:
        if isinstance(part, VideoFramesPart):
            frames = len(part.video_frames)
            if option_frames is not None and frames > option_frames:
                raise MMLimitExceeded(f"{path}: {frames} video frames, the limit is "
                                      f"{option_frames} (limits.limit_mm_per_prompt.video."
                                      "num_frames); sample fewer frames")
            if frames > limits.max_video_frames:
                raise PayloadTooLarge(f"{path}: {frames} video frames, the limit is "
                                      f"{limits.max_video_frames} (limits.max_video_frames); "
                                      "sample fewer frames")
            for k, frame in enumerate(part.video_frames):
                _check_part_bytes(f"{path}.video_frames.{k}", frame, limits.max_part_bytes)
        elif isinstance(part, ImagePart):
            _check_part_bytes(path, part.image, limits.max_part_bytes)
        elif isinstance(part, ImageUrlPart):
            _check_part_bytes(path, part.image_url, limits.max_part_bytes)


def _check_part_bytes(path: str, source: Any, max_part_bytes: int) -> None:
    raw = source.raw if isinstance(source, InlineBytes) else None
    if raw is not None:
        size = len(raw)
    else:
        try:
            _, text = media_base64(source)
        except Exception:  # malformed URLs are reported when the part is decoded
            return
        size = strict_base64.decoded_length(text)
    if size > max_part_bytes:
        raise PayloadTooLarge(f"{path}: media is {size} bytes, the limit is {max_part_bytes} "
                              "(limits.max_part_bytes); send a smaller or more compressed image")

