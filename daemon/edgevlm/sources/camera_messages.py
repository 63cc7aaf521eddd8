"""One camera frame to describe, and the messages its answer publishes.

A :class:`CameraFrame` carries the image (JPEG or PNG: :func:`image_kind`) and its prompt
(:func:`fill_prompt`). After the answer, :func:`result_messages` builds the retained
description and snapshot of the camera; :func:`record_messages` the record of a Frigate event
that gets no description (``skipped`` / ``failed``). :class:`edgevlm.sources.cameras.CameraSources`
calls them with its node's camera topics.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..frontdoors.mqtt.topics import Topics
from ..wire.errors import WireError
from .camera_options import camera_event

log = logging.getLogger(__name__)

Message = tuple[str, bytes, bool]  # (topic, payload, retain)

JPEG_MAGIC = b"\xff\xd8\xff"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True)
class CameraFrame:
    """One frame to describe: the image bytes and the prompt already filled in."""

    camera: str
    label: str | None
    event_id: str | None   # the Frigate event id; None for a frame on a camera topic
    image: bytes
    prompt: str
    max_tokens: int


class _Placeholders(dict[str, str]):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"  # unknown placeholders stay as written


def fill_prompt(template: str, camera: str, label: str | None, sub_label: str | None) -> str:
    """``template`` with ``{camera}``, ``{label}`` and ``{sub_label}`` filled in."""
    values = _Placeholders(camera=camera, label=label or "object", sub_label=sub_label or "")
    try:
        return " ".join(template.format_map(values).split())
    except (ValueError, IndexError, AttributeError):
        log.warning("camera %s: prompt %r has a broken placeholder; sent as written",
                    camera, template)
        return template


def image_kind(payload: bytes) -> str | None:
    """"jpeg" or "png" from the magic bytes, else None."""
    if payload.startswith(JPEG_MAGIC):
        return "jpeg"
    if payload.startswith(PNG_MAGIC):
        return "png"
    return None


def result_messages(topics: Topics, frame: CameraFrame, text: str | None,
                    error: WireError | None, model: str, metrics: Mapping[str, float],
                    value: Any = None) -> list[Message]:
    """Retained description (+ Frigate's ``type/id/description`` keys for an event) and
    the retained snapshot of the analysed frame (always JPEG, as its Home Assistant image
    entity says). An error on a plain frame publishes nothing (logged): the last good
    description stays; on a Frigate event, its ``failed`` record."""
    if error is not None or text is None:
        reason = f"{error.type}: {error.message}" if error else "no text"
        log.warning("camera %s: frame not described (%s)", frame.camera, reason)
        if frame.event_id is None:
            return []
        return record_messages(topics, frame.camera, frame.label, frame.event_id, "failed",
                               error.type if error else "no_text", reason)
    body: dict[str, Any] = {
        "camera": frame.camera, "label": frame.label, "event_id": frame.event_id,
        "text": text, "model": model,
        "metrics": {k: round(float(v), 2) for k, v in metrics.items()},
        "at": datetime.now(UTC).isoformat(timespec="milliseconds"),
    }
    if value is not None:  # the camera's json_schema: the answer as JSON
        body["value"] = value
    if frame.event_id is not None:
        body.update({"type": "description", "id": frame.event_id, "description": text})
    return [(topics.camera(frame.camera, "description"), json.dumps(body).encode(), True),
            (topics.camera(frame.camera, "snapshot"), as_jpeg(frame.image), True)]


def record_messages(topics: Topics, camera: str, label: str | None, event_id: str,
                    status: str, reason: str, detail: str) -> list[Message]:
    """The record of a Frigate event that gets no description: on the description topic,
    not retained (the retained description stays the last good one), with ``status``
    ``skipped`` (never run: ``no_snapshot``, ``stale_snapshot``, ``queue_full``,
    ``deadline``, ``stopping``, ``camera_off``, ``fetch_failed``,
    ``restarted``) or ``failed`` (the model's error type).
    The camera's Home Assistant ``event`` entity fires ``description_skipped`` /
    ``description_failed`` with the same label, event id and reason (not retained);
    the description sensor's templates keep its state for a record with ``status``."""
    body = {"camera": camera, "label": label, "event_id": event_id, "id": event_id,
            "status": status, "reason": reason, "detail": detail, "text": None,
            "at": datetime.now(UTC).isoformat(timespec="milliseconds")}
    event_topic, event = camera_event(topics.camera(camera, "event"),
                                      f"description_{status}", camera, label, event_id,
                                      None, reason)
    return [(topics.camera(camera, "description"), json.dumps(body).encode(), False),
            (event_topic, event, False)]


def as_jpeg(image: bytes, quality: int = 90) -> bytes:
    """``image`` as JPEG bytes (a PNG is re-encoded; a JPEG is passed through)."""
    if image_kind(image) != "png":
        return image
    import io

    from PIL import Image

    with Image.open(io.BytesIO(image)) as img:
        rgb = img.convert("RGB")
    out = io.BytesIO()
    rgb.save(out, "JPEG", quality=quality)
    return out.getvalue()
