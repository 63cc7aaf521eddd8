"""Camera frames between the sources and the worker: admitted like any request, queued,
and their results published (part of the composition root, beside :mod:`edgevlm.service`).

Plain frames on a camera topic: the latest waiting frame of a camera wins. Frigate events:
each on its own, at most ``EVENT_QUEUE_PER_CAMERA`` per camera, each with a deadline; one
dropped gets its ``skipped`` record. With ``frigate.write_description``, the description of
a Frigate event is written back on the Frigate API thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from .config import Config
from .metrics import Metrics
from .pipeline.admission import RequestSide, admit_request
from .pipeline.jobs import FrameJob, JobQueue
from .sources.camera_options import OptionStore, camera_event
from .sources.cameras import CameraFrame, CameraSources
from .sources.event_journal import EventJournal
from .sources.frigate import EVENT_DEADLINE_S, EVENT_QUEUE_PER_CAMERA
from .sources.frigate_api import FetchThread, FrigateAPI
from .verbs import describe
from .wire.errors import EdgevlmError, WireError, wire_error

log = logging.getLogger(__name__)

Publish = Callable[[str, bytes, bool], Any]   # (topic, payload, retain)


def frigate_api(config: Config) -> tuple[FrigateAPI | None, FetchThread | None]:
    """Frigate's HTTP API and the thread its calls run on, when ``frigate.url`` is set."""
    frigate = config.frigate
    if frigate.url is None:
        return None, None
    log.info("frigate events: images from %s (%s)%s", frigate.url, frigate.fetch,
             ", descriptions written back" if frigate.write_description else "")
    return FrigateAPI.from_config(frigate, config.limits.max_part_bytes), FetchThread()


class CameraFlow:
    """The camera sources of one daemon and what happens to their frames."""

    def __init__(self, config: Config, node_id: str, queue: JobQueue, metrics: Metrics, *,
                 side: Callable[[], RequestSide], publish: Publish, model_name: str,
                 options: OptionStore) -> None:
        self.queue = queue
        self.metrics = metrics
        self.cameras = config.cameras  # each camera's answer shape and pixel budget
        self._side = side
        self._publish = publish
        self.model_name = model_name
        self.frigate_api, self.frigate_calls = frigate_api(config)
        self.journal = EventJournal(config.cache.dir)  # edgevlm.sources.event_journal
        self.sources = CameraSources(
            config.cameras, config.mqtt.base_topic, node_id, self.submit, options=options,
            publish=self.publish_messages,
            fetch_image=self.frigate_api.event_image if self.frigate_api else None,
            run_fetch=self.frigate_calls.submit if self.frigate_calls else None,
            journal=self.journal)

    def stop(self) -> None:
        if self.frigate_calls is not None:
            self.frigate_calls.stop()
        self.journal.stop()

    def publish_messages(self, messages: list[tuple[str, bytes, bool]]) -> None:
        for topic, payload, retain in messages:
            self._publish(topic, payload, retain)

    def submit(self, frame: CameraFrame) -> None:
        """A frame from a camera source (network thread): admit it, then queue it."""
        cam = self.cameras.get(frame.camera)
        request = describe.frame_request(frame.image, frame.prompt, frame.max_tokens,
                                         cam.json_schema if cam else None,
                                         cam.choices if cam else None,
                                         cam.max_pixels if cam else None)
        try:  # the admission every request passes: sizes, pixels, the token budget
            admitted = admit_request(request, len(frame.image) + len(frame.prompt.encode()),
                                     self._side())
        except EdgevlmError as exc:
            log.warning("camera %s: frame refused: %s", frame.camera, exc.message)
            self.result(frame, None, wire_error(exc), {})
            return
        now = time.monotonic()

        def done(text: str | None, error: WireError | None, metrics: dict[str, float],
                 value: Any = None) -> None:
            self.described(frame, text, error, metrics, value)

        def skipped(reason: str) -> None:
            self.dropped(frame, reason)

        if frame.event_id is not None:
            job = FrameJob(frame.camera, frame.event_id, describe.VERB, admitted, now, done,
                           skipped, deadline=now + EVENT_DEADLINE_S)
            if not self.queue.put_event(f"camera:{frame.camera}", EVENT_QUEUE_PER_CAMERA, job):
                self.dropped(frame, "queue_full")
            return
        job = FrameJob(frame.camera, frame.event_id, describe.VERB, admitted, now, done)
        accepted, replaced = self.queue.put_latest(f"camera:{frame.camera}", job)
        if replaced is not None:
            log.info("camera %s: a newer frame replaced the one still waiting", frame.camera)
        elif not accepted:
            log.info("camera %s: queue full, frame dropped", frame.camera)

    def dropped(self, frame: CameraFrame, reason: str) -> None:
        """A queued Frigate event that will not run: its ``skipped`` record."""
        detail = {"queue_full": f"more than {EVENT_QUEUE_PER_CAMERA} events of this camera "
                                "waited for the model; the oldest is skipped",
                  "deadline": f"not started within {EVENT_DEADLINE_S:g} s of its arrival",
                  "stopping": "the daemon stopped before describing it"}.get(reason, reason)
        log.info("camera %s: frigate event %s skipped (%s)", frame.camera, frame.event_id,
                 reason)
        self.publish_messages(self.sources.frame_record(frame, reason, detail))
        self.journal.done(frame.event_id)

    def described(self, frame: CameraFrame, text: str | None, error: WireError | None,
                  metrics: dict[str, float], value: Any = None) -> None:
        """Worker: publish the result; a Frigate event's description goes back to Frigate
        (``frigate.write_description``) on the Frigate API thread."""
        self.result(frame, text, error, metrics, value)
        api, calls = self.frigate_api, self.frigate_calls
        if (api is not None and calls is not None and api.write_description
                and frame.event_id is not None and error is None and text is not None):
            event_id, described = frame.event_id, text
            if not calls.submit(lambda: api.set_description(event_id, described)):
                log.warning("frigate event %s: description not written back (the Frigate "
                            "API queue is full)", event_id)

    def result(self, frame: CameraFrame, text: str | None, error: WireError | None,
               metrics: dict[str, float], value: Any = None) -> None:
        """The description (or the event's ``failed`` record; ``value``: a JSON answer's
        value) and the camera's HA event."""
        self.publish_messages(self.sources.result_messages(frame, text, error,
                                                           self.model_name, metrics, value))
        if error is None and text is not None:  # the camera's HA event entity
            self._publish(*camera_event(
                self.sources.option_topic(frame.camera, "event"), "description_ready",
                frame.camera, frame.label, frame.event_id, text), False)
        self.journal.done(frame.event_id)
