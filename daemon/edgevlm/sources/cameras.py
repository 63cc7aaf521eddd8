"""Camera sources: raw frames on a camera topic, and Frigate snapshots joined with its events.

Two ways a frame reaches the model, both per configured camera (``cameras:`` in the config):

- generic: raw JPEG/PNG bytes on ``<base>/<node>/camera/<cam>/image`` (or the camera's
  ``topic``); anything else is refused with a log line, never described.
- Frigate: ``<prefix>/<cam>/<label>/snapshot`` (raw JPEG, retained by Frigate) joined with
  ``<prefix>/events`` (``type`` new/update/end, ``after`` = the tracked object). An event of a
  configured type is described from the snapshot that arrived with its best frame, never an
  older one (the rule: :mod:`edgevlm.sources.frigate`); without one it is *skipped*. Every event
  gets
  exactly one record on the description topic: its description, or ``status: skipped`` /
  ``failed`` with a ``reason`` (:meth:`CameraSources.record_messages`), whatever number of
  messages Frigate sends for it. The frame and the messages its answer publishes:
  :mod:`edgevlm.sources.camera_messages`.

Prompts take ``{camera}``, ``{label}`` and ``{sub_label}`` placeholders; a per-label prompt
overrides the camera's prompt. Cameras are switched with ``ON``/``OFF`` on ``.../set`` and
report it retained on ``.../state``; the prompt and ``max_tokens`` are set on
``.../prompt/set`` and ``.../max_tokens/set`` (:mod:`edgevlm.sources.camera_options`: validation and
the rule that keeps them across restarts). The service turns each :class:`CameraFrame` into a
describe request and publishes :meth:`CameraSources.result_messages` after the answer.
This module keeps state (enabled flags, the events already decided) behind a lock:
``handle`` runs on the network thread, ``result_messages`` on the worker.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from pydantic import ValidationError

from ..frontdoors.mqtt.topics import Topics, has_wildcards
from ..wire.errors import WireError
from . import camera_messages
from .camera_messages import CameraFrame as CameraFrame  # re-exported: imported from here
from .camera_messages import Message as Message
from .camera_messages import fill_prompt as fill_prompt
from .camera_messages import image_kind as image_kind
from .camera_options import OptionStore, OverriddenCamera, encode_option, parse_option
from .event_journal import EventJournal, JournaledEvent
from .frigate import FrigateEvent, FrigateJoin, FrigateObject, FrigateThumbnail, Skip

log = logging.getLogger(__name__)

MAX_REMEMBERED_EVENTS = 1024


class CameraSettings(Protocol):
    """What this module reads of a camera's configuration (``config.CameraConfig``)."""

    @property
    def enabled(self) -> bool: ...
    @property
    def topic(self) -> str | None: ...
    @property
    def frigate(self) -> bool: ...
    @property
    def frigate_prefix(self) -> str: ...
    @property
    def frigate_events(self) -> Sequence[str]: ...
    @property
    def labels(self) -> Sequence[str] | None: ...
    @property
    def prompt(self) -> str: ...
    @property
    def label_prompts(self) -> Mapping[str, str]: ...
    @property
    def max_tokens(self) -> int: ...


class CameraSources:
    """Routes camera messages to ``submit`` and builds the messages a description publishes."""

    def __init__(self, cameras: Mapping[str, CameraSettings], base_topic: str, node_id: str,
                 submit: Callable[[CameraFrame], None], *, snapshot_wait_s: float = 5.0,
                 publish: Callable[[list[Message]], None] | None = None,
                 clock: Callable[[], float] = time.time,
                 options: OptionStore | None = None,
                 fetch_image: Callable[[str], bytes] | None = None,
                 run_fetch: Callable[[Callable[[], None]], bool] | None = None,
                 journal: EventJournal | None = None) -> None:
        self.journal = journal if journal is not None else EventJournal(None)
        self._options = options if options is not None else OptionStore(None)
        self._base = dict(cameras)
        self._cameras: dict[str, CameraSettings] = {
            name: self._overridden(name) for name in self._base}
        self._topics = Topics(base_topic, node_id)
        self._submit = submit
        self._publish = publish or (lambda messages: None)
        self._lock = threading.Lock()
        self._enabled: dict[str, bool] = {name: self._saved(name, "enabled", cfg.enabled)
                         for name, cfg in self._cameras.items()}
        self._image_topics: dict[str, str] = {}
        self._set_topics: dict[str, tuple[str, str]] = {}  # command topic -> (camera, option)
        self._frigate_prefixes: dict[str, set[str]] = {}
        for name, cfg in self._cameras.items():
            self._image_topics[cfg.topic or self._topics.camera(name, "image")] = name
            self._set_topics[self._topics.camera(name, "set")] = (name, "enabled")
            for option in ("prompt", "max_tokens"):
                self._set_topics[self._topics.camera(name, f"{option}/set")] = (name, option)
            if cfg.frigate:
                self._frigate_prefixes.setdefault(cfg.frigate_prefix, set()).add(name)
        self._join = FrigateJoin(self._describe_event, self._skip_event,
                                 wait_s=snapshot_wait_s, wall=clock, fetch=fetch_image,
                                 run=run_fetch)
        self._described: OrderedDict[str, None] = OrderedDict()  # events with their record

    # ------------------------------------------------------------------ topics

    def description_topic(self, camera: str) -> str:
        return self._topics.camera(camera, "description")

    def snapshot_topic(self, camera: str) -> str:
        return self._topics.camera(camera, "snapshot")

    def state_topic(self, camera: str) -> str:
        return self._topics.camera(camera, "state")

    def subscriptions(self) -> list[str]:
        """Topic filters to subscribe to (image topics, set topics, Frigate topics)."""
        topics = [*self._set_topics, *self._image_topics]  # retained commands before frames
        for prefix, names in sorted(self._frigate_prefixes.items()):
            topics.append(f"{prefix}/events")
            topics += [f"{prefix}/{name}/+/snapshot" for name in sorted(names)]
        return topics

    def option_topic(self, camera: str, option: str) -> str:
        """Where an option's value is reported (retained): ``state`` for ``enabled``."""
        return self.state_topic(camera) if option == "enabled" else self._topics.camera(
            camera, option)

    def state_messages(self) -> list[Message]:
        """The retained ``.../state`` of every camera (publish on every connect)."""
        with self._lock:
            return [(self.state_topic(name), b"ON" if on else b"OFF", True)
                    for name, on in self._enabled.items()]

    def option_messages(self) -> list[Message]:
        """The retained ``.../prompt`` and ``.../max_tokens`` of every camera (publish on
        every connect, with :meth:`state_messages`)."""
        with self._lock:
            out: list[Message] = []
            for name, cfg in self._cameras.items():
                out += [(self.option_topic(name, "prompt"), cfg.prompt.encode(), True),
                        (self.option_topic(name, "max_tokens"), str(cfg.max_tokens).encode(),
                         True)]
            return out

    def _saved(self, camera: str, option: str, default: Any) -> Any:
        value = self._options.get(camera, option)
        return default if value is None else value

    def _overridden(self, camera: str) -> OverriddenCamera:
        return OverriddenCamera(self._base[camera], self._options.get(camera, "prompt"),
                                self._options.get(camera, "max_tokens"))

    def is_enabled(self, camera: str) -> bool:
        with self._lock:
            return self._enabled.get(camera, False)

    # ------------------------------------------------------------------ incoming

    def handle(self, topic: str, payload: bytes, retained: bool = False
               ) -> list[Message] | None:
        """None when ``topic`` is not a camera topic; else the messages to publish now.
        Frames to describe go to ``submit``. ``retained``: the broker replayed a retained
        message on subscribing (see :mod:`edgevlm.sources.camera_options`). Never raises."""
        try:
            return self._route(topic, payload, retained)
        except Exception:
            log.exception("camera message on %s could not be handled", topic)
            return []

    def _route(self, topic: str, payload: bytes, retained: bool = False
               ) -> list[Message] | None:
        command = self._set_topics.get(topic)
        if command is not None:
            return self._on_set(*command, payload, retained)
        camera = self._image_topics.get(topic) or self._wildcard_image_camera(topic)
        if camera is not None:
            self._on_image(camera, payload)
            return []
        for prefix, names in self._frigate_prefixes.items():
            if topic == f"{prefix}/events":
                self._on_frigate_event(names, payload)
                return []
            rest = topic.removeprefix(prefix + "/")
            parts = rest.split("/")
            if rest != topic and len(parts) == 3 and parts[2] == "snapshot":
                if parts[0] in names:
                    self._on_frigate_snapshot(parts[0], parts[1], payload, retained)
                return []
        return None

    def _wildcard_image_camera(self, topic: str) -> str | None:
        from paho.mqtt.client import topic_matches_sub

        for pattern, camera in self._image_topics.items():
            if has_wildcards(pattern) and topic_matches_sub(pattern, topic):
                return camera
        return None

    def _on_set(self, camera: str, option: str, payload: bytes, retained: bool = False
                ) -> list[Message]:
        value = parse_option(option, payload)
        if value is None:
            if payload:  # empty: a retained command being cleared
                log.warning("camera %s: ignored %r on its %s command topic (%s)", camera,
                            payload[:32], option, "send ON or OFF" if option == "enabled"
                            else "see docs/homeassistant.md for the valid values")
            return []
        if retained and self._options.has(camera, option):
            log.info("camera %s: the broker's retained %s command is older than the saved "
                     "value; ignored", camera, option)
            return []
        with self._lock:
            self._options.set(camera, option, value)
            if option == "enabled":
                self._enabled[camera] = value
                if not value:
                    self._drop_pending(camera)
            else:
                self._cameras[camera] = self._overridden(camera)
        log.info("camera %s: %s set to %r%s", camera, option, value,
                 " (retained command)" if retained else "")
        return [(self.option_topic(camera, option), encode_option(option, value), True)]

    def _on_image(self, camera: str, payload: bytes) -> None:
        if not payload:
            return  # an empty (retained-clearing) message
        if image_kind(payload) is None:
            log.warning("camera %s: refused a %d-byte payload that is neither JPEG nor PNG "
                        "(starts %s); publish the raw image bytes", camera, len(payload),
                        payload[:8].hex())
            return
        if not self.is_enabled(camera):
            log.debug("camera %s is OFF; frame ignored", camera)
            return
        cfg = self._cameras[camera]
        self._submit(CameraFrame(camera, None, None, payload,
                                 fill_prompt(cfg.prompt, camera, None, None), cfg.max_tokens))

    def _on_frigate_snapshot(self, camera: str, label: str, payload: bytes,
                             retained: bool = False) -> None:
        if image_kind(payload) is None:
            if payload:
                log.warning("frigate snapshot %s/%s is not a JPEG/PNG; ignored", camera, label)
            return
        self._join.snapshot(camera, label, payload, retained)

    def _on_frigate_event(self, cameras: set[str], payload: bytes) -> None:
        try:
            event = FrigateEvent.model_validate_json(payload)
        except ValidationError as exc:
            log.warning("frigate event ignored: %s", exc.errors(include_url=False)[:1])
            return
        obj = event.after
        cfg = self._cameras.get(obj.camera)
        if obj.camera not in cameras or cfg is None:
            return
        if event.type not in cfg.frigate_events or obj.false_positive:
            return
        if cfg.labels is not None and obj.label not in cfg.labels:
            return
        with self._lock:
            if not self._enabled.get(obj.camera, False) or obj.id in self._described:
                return
        # a new/update event left undecided is decided by its end event, if that counts too
        final = event.type == "end" or "end" not in cfg.frigate_events
        self.journal.add(JournaledEvent(obj.id, obj.camera, obj.label, obj.start_time,
                                        obj.end_time, obj.best_frame_time))
        self._join.event(obj, final)

    def recover(self) -> None:
        """Start-up: every event journaled by an earlier run (killed before its record) gets
        one: described from Frigate's API when ``frigate.url`` is set (else ``fetch_failed``),
        otherwise ``skipped`` with reason ``restarted`` (its snapshot was in the lost memory)."""
        for entry in self.journal.recovered:
            if entry.camera not in self._cameras:
                log.warning("frigate event %s of camera %r in the journal: not a configured "
                            "camera; no record", entry.id, entry.camera[:40])
                self.journal.done(entry.id)
                continue
            obj = FrigateObject(id=entry.id, camera=entry.camera, label=entry.label or "",
                                start_time=entry.start_time, end_time=entry.end_time,
                                snapshot=FrigateThumbnail(frame_time=entry.best))
            log.info("frigate event %s: the daemon restarted before its record", entry.id)
            if self._join.fetch is not None and self._join.run is not None:
                self._join.event(obj, True)
            else:
                self._skip_event(Skip(obj, "restarted", "the daemon restarted (crash or kill) "
                                      "before describing the event; its snapshot was lost"))

    def _decide(self, obj: FrigateObject) -> bool:
        """Mark ``obj`` as having its record; False when it already had one."""
        with self._lock:
            if obj.id in self._described:
                return False
            self._described[obj.id] = None
            while len(self._described) > MAX_REMEMBERED_EVENTS:
                self._described.popitem(last=False)
            return True

    def _describe_event(self, obj: FrigateObject, image: bytes) -> None:
        if not self._decide(obj):
            return
        cfg = self._cameras[obj.camera]
        template = cfg.label_prompts.get(obj.label, cfg.prompt)
        self._submit(CameraFrame(obj.camera, obj.label, obj.id, image,
                                 fill_prompt(template, obj.camera, obj.label, obj.sub_label),
                                 cfg.max_tokens))

    def _skip_event(self, skip: Skip) -> None:
        if self._decide(skip.event):
            self._publish(self.record_messages(skip.event.camera, skip.event.label,
                                               skip.event.id, "skipped", skip.reason,
                                               skip.detail))
            self.journal.done(skip.event.id)

    def _drop_pending(self, camera: str) -> None:
        """The camera was switched off (called with ``self._lock`` held)."""
        for obj in self._join.drop([camera]):
            if obj.id not in self._described:
                self._described[obj.id] = None
                self._publish(self.record_messages(obj.camera, obj.label, obj.id, "skipped",
                                                   "camera_off", "the camera was switched off"))
                self.journal.done(obj.id)

    # ------------------------------------------------------------------ outgoing

    def result_messages(self, frame: CameraFrame, text: str | None, error: WireError | None,
                        model: str, metrics: Mapping[str, float], value: Any = None
                        ) -> list[Message]:
        """The retained description and snapshot of ``frame``'s answer, or a Frigate event's
        ``failed`` record (:func:`camera_messages.result_messages`)."""
        return camera_messages.result_messages(self._topics, frame, text, error, model,
                                               metrics, value)

    def record_messages(self, camera: str, label: str | None, event_id: str, status: str,
                        reason: str, detail: str) -> list[Message]:
        """The ``skipped``/``failed`` record of a Frigate event that gets no description
        (:func:`camera_messages.record_messages`)."""
        return camera_messages.record_messages(self._topics, camera, label, event_id, status,
                                               reason, detail)

    def frame_record(self, frame: CameraFrame, reason: str, detail: str) -> list[Message]:
        """``skipped`` record of a queued event frame that will not run; [] for plain frames."""
        if frame.event_id is None:
            return []
        return self.record_messages(frame.camera, frame.label, frame.event_id, "skipped",
                                    reason, detail)
