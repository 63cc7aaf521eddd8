"""Per-camera options changed at runtime (Home Assistant's switch, text and number entities),
kept across restarts.

Options: ``enabled`` (``ON``/``OFF`` on ``camera/<cam>/set``), ``prompt`` (text on
``camera/<cam>/prompt/set``, 1-255 characters) and ``max_tokens`` (an integer on
``camera/<cam>/max_tokens/set``, 1-4096). Each is reported retained on ``camera/<cam>/state``,
``camera/<cam>/prompt`` and ``camera/<cam>/max_tokens``.

The rule that keeps them, Zigbee2MQTT-like (its ``state.json`` beside retained commands):

1. With ``cache.dir`` set, every option changed at runtime is saved to
   ``<cache.dir>/camera_options.json`` (written atomically at each change, read before the
   daemon connects). A saved value wins over the config file and over any retained command.
2. The discovery asks Home Assistant to publish its commands retained (``retain: true``), so
   the broker replays the last one when the daemon subscribes. A replayed (retained) command
   is applied only when the file holds nothing for that option (no ``cache.dir``, or the
   first start with it), else it is ignored: the file has the newest value.
3. A live command (not a replay) is always applied and saved.

So a camera switched OFF stays OFF across a restart with ``cache.dir``, and without it as
long as the OFF was published retained (Home Assistant does, other clients should).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

OPTIONS_FILE = "camera_options.json"
OPTIONS = ("enabled", "prompt", "max_tokens")
PROMPT_MAX = 255          # Home Assistant's text entity holds at most 255 characters
MAX_TOKENS_RANGE = (1, 4096)  # config.CameraConfig.max_tokens


def parse_option(option: str, payload: bytes) -> Any | None:
    """The value a command carries, or None when it is not a valid one."""
    text = payload.decode("utf-8", "replace").strip()
    if option == "enabled":
        return {"ON": True, "OFF": False}.get(text.upper())
    if option == "prompt":
        return text if 0 < len(text) <= PROMPT_MAX else None
    if option == "max_tokens":
        try:
            number = float(text)
        except ValueError:
            return None
        low, high = MAX_TOKENS_RANGE
        if not number.is_integer() or not low <= number <= high:
            return None
        return int(number)
    return None


def valid_value(option: str, value: Any) -> bool:
    if option == "enabled":
        return isinstance(value, bool)
    if option == "prompt":
        return isinstance(value, str) and 0 < len(value) <= PROMPT_MAX
    if option == "max_tokens":
        return (isinstance(value, int) and not isinstance(value, bool)
                and MAX_TOKENS_RANGE[0] <= value <= MAX_TOKENS_RANGE[1])
    return False


def encode_option(option: str, value: Any) -> bytes:
    if option == "enabled":
        return b"ON" if value else b"OFF"
    return str(value).encode()


class OptionStore:
    """The saved options (``None`` directory: in memory only)."""

    def __init__(self, directory: str | Path | None) -> None:
        self.path = Path(directory).expanduser() / OPTIONS_FILE if directory else None
        self._lock = threading.Lock()
        self._cameras: dict[str, dict[str, Any]] = {}
        self._discovered: list[str] = []
        self._load()

    def _load(self) -> None:
        if self.path is None:
            return
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.warning("camera options in %s not read (%s); using the config", self.path, exc)
            return
        if not isinstance(raw, dict):
            return
        cameras = raw.get("cameras")
        if isinstance(cameras, dict):
            for cam, options in cameras.items():
                if isinstance(options, dict):
                    self._cameras[str(cam)] = {k: v for k, v in options.items()
                                               if k in OPTIONS and valid_value(k, v)}
        discovered = raw.get("discovered_cameras")
        if isinstance(discovered, list):
            self._discovered = [str(c) for c in discovered]

    def get(self, camera: str, option: str) -> Any | None:
        with self._lock:
            return self._cameras.get(camera, {}).get(option)

    def has(self, camera: str, option: str) -> bool:
        """Whether the file holds this option (always False without a directory)."""
        with self._lock:
            return self.path is not None and option in self._cameras.get(camera, {})

    def set(self, camera: str, option: str, value: Any) -> None:
        with self._lock:
            self._cameras.setdefault(camera, {})[option] = value
            self._save()

    @property
    def discovered_cameras(self) -> list[str]:
        """The cameras of the last discovery published (for removing a camera's entities)."""
        with self._lock:
            return list(self._discovered)

    def set_discovered_cameras(self, cameras: Sequence[str]) -> None:
        with self._lock:
            if list(cameras) != self._discovered:
                self._discovered = list(cameras)
                self._save()

    def _save(self) -> None:
        if self.path is None:
            return
        data = {"cameras": self._cameras, "discovered_cameras": self._discovered}
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with tmp.open("w", encoding="utf-8") as fh:
                json.dump(data, fh, indent=1, sort_keys=True)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except OSError as exc:
            log.error("camera options not saved to %s (%s): a restart will not keep them",
                      self.path, exc)


class OverriddenCamera:
    """A camera's settings (``config.CameraConfig``, or anything with its attributes) with the
    runtime ``prompt`` and ``max_tokens`` (None: the configured one); every other setting is
    the base's. A label's prompt (``label_prompts``) still wins over the prompt."""

    def __init__(self, base: Any, prompt: str | None, max_tokens: int | None) -> None:
        self.base = base
        self._prompt = prompt
        self._max_tokens = max_tokens

    def __getattr__(self, name: str) -> Any:  # enabled, topic, frigate, labels, ...
        return getattr(self.base, name)

    @property
    def prompt(self) -> str:
        return self._prompt if self._prompt is not None else str(self.base.prompt)

    @property
    def max_tokens(self) -> int:
        return self._max_tokens if self._max_tokens is not None else int(self.base.max_tokens)


def camera_event(topic: str, event_type: str, camera: str, label: str | None,
                 event_id: str | None, text: str | None = None, reason: str | None = None
                 ) -> tuple[str, bytes]:
    """(topic, payload) of one record on ``camera/<cam>/event`` (publish NOT retained): Home
    Assistant's MQTT ``event`` entity reads ``event_type``; the other keys become the
    event's attributes. ``event_type``: ``description_ready``, ``description_skipped`` or
    ``description_failed`` (docs/homeassistant.md, "Camera events")."""
    from datetime import UTC, datetime

    body = {"event_type": event_type, "camera": camera, "label": label,
            "event_id": event_id, "text": text, "reason": reason,
            "at": datetime.now(UTC).isoformat(timespec="milliseconds")}
    return topic, json.dumps(body).encode()
