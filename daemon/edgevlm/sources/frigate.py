"""Frigate events joined with Frigate's MQTT snapshots, so an event is described from its frame.

What Frigate publishes (blakeblackshear/frigate, ``frigate/track/object_processing.py``):

- ``<prefix>/<camera>/<label>/snapshot``: raw JPEG, *retained*, with no event id and no time.
  It is the camera's best object of that label, published when an object becomes the best
  one (``send_mqtt_snapshot``, ``frigate/camera/state.py``), and never for an object that
  stays stationary or outside ``mqtt.required_zones`` (``should_mqtt_snapshot``).
- ``<prefix>/events``: ``{"type": new|update|end, "before": {...}, "after": {...}}``, where
  ``after`` is ``TrackedObject.to_dict()`` (``frigate/track/tracked_object.py``): ``id``,
  ``start_time``, ``end_time``, ``frame_time`` and ``snapshot`` = the object's best
  thumbnail ``{"frame_time", "box", "area", "region", "score", ...}`` (older releases:
  ``snapshot_time``).

The join rule. A snapshot carries no id, so it is stamped with the daemon's wall clock when it
arrives; Frigate publishes it right after it processed the frame, so the snapshot of a frame
taken at ``t`` arrives at ``t`` plus a little (detection and network latency, at most
:data:`SNAPSHOT_LATENCY_S`), give or take the clock difference of the two machines (NTP on a
LAN: well under a second, :data:`CLOCK_SKEW_S`). For an event whose best frame is ``F =
after.snapshot.frame_time``, a snapshot of its camera and label is accepted only when

- it arrived live (a message the broker replays on (re)subscribe has the MQTT retain flag
  set: it was published at some unknown time before the subscription, maybe hours ago, so it
  is never accepted), and
- it arrived within ``[max(start_time, F) - skew, F + latency + skew]``: not older than the
  event's start and best frame, and not a later best frame (of this object, which would have
  moved ``F``, or of another object of the same label). The one residual risk: a snapshot of
  another object published less than ``skew`` before ``F`` passes; with both programs on one
  machine set ``skew`` to 0.

Of several accepted snapshots, the first that arrived at or after ``F`` (else the last before
it). When none is accepted yet and one may still arrive (the window is still open), the event
waits until the window closes, at most ``wait_s``; then it is *skipped* with the reason
(``no_snapshot``: none arrived, as for a stationary object; ``stale_snapshot``: only ones
outside the window or replayed). A skipped ``new``/``update`` event is left for its ``end``
event when that type is configured too; otherwise the skip is final and reported.

With ``frigate.url`` set (:mod:`edgevlm.sources.frigate_api`), an event's image is fetched from
Frigate
instead (``GET /api/events/<id>/snapshot.jpg``); when that fails, the MQTT snapshot that the
rule above accepts right away, else the event is skipped (``fetch_failed``).


This class keeps the snapshots and the waiting events;
:class:`edgevlm.sources.cameras.CameraSources`
decides which events count and turns the outcome into work or a ``skipped`` record.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

log = logging.getLogger(__name__)

CLOCK_SKEW_S = 0.5           # Frigate's clock vs ours (NTP on a LAN)
SNAPSHOT_LATENCY_S = 1.5     # a frame taken -> its snapshot arrives (detection + network)
SNAPSHOT_HISTORY = 16        # snapshots remembered per (camera, label)
EVENT_QUEUE_PER_CAMERA = 4   # Frigate events waiting for the model, per camera
EVENT_DEADLINE_S = 120.0     # an event not started within this is skipped ("deadline")


class FrigateThumbnail(BaseModel):
    """``after.snapshot``: the object's best frame (``TrackedObject.thumbnail_data``)."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    frame_time: float | None = None


class FrigateObject(BaseModel):
    """The part of Frigate's tracked object (``after``) this daemon uses."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    id: str
    camera: str
    label: str
    sub_label: str | None = None
    false_positive: bool = False
    start_time: float | None = None
    end_time: float | None = None
    frame_time: float | None = None
    snapshot: FrigateThumbnail | None = None
    snapshot_time: float | None = None   # Frigate < 0.14
    position_changes: int | None = None

    @field_validator("sub_label", mode="before")
    @classmethod
    def _sub_label_name(cls, value: Any) -> Any:
        # Frigate >= 0.14 sends [name, score]; older releases a bare string.
        if isinstance(value, list | tuple):
            return value[0] if value and isinstance(value[0], str) else None
        return value

    @field_validator("snapshot", mode="before")
    @classmethod
    def _snapshot_or_none(cls, value: Any) -> Any:
        return value if isinstance(value, dict) else None

    @property
    def best_frame_time(self) -> float | None:
        """When the object's best frame (the one Frigate would publish) was taken."""
        if self.snapshot is not None and self.snapshot.frame_time:
            return self.snapshot.frame_time
        return self.snapshot_time or self.frame_time or self.start_time


class FrigateEvent(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    type: str
    after: FrigateObject


@dataclass(frozen=True)
class Snapshot:
    image: bytes
    arrived: float   # wall clock (time.time()) on arrival
    retained: bool   # replayed by the broker on subscribe: published at an unknown time


@dataclass
class _Waiting:
    event: FrigateObject
    final: bool
    timer: threading.Timer | None = None


@dataclass(frozen=True)
class Skip:
    event: FrigateObject
    reason: str
    detail: str


@dataclass
class FrigateJoin:
    """Joins events with snapshots; ``describe(event, image)`` or ``skip(Skip)`` per event."""

    describe: Callable[[FrigateObject, bytes], None]
    skip: Callable[[Skip], None]
    wait_s: float = 5.0
    skew_s: float = CLOCK_SKEW_S
    latency_s: float = SNAPSHOT_LATENCY_S
    wall: Callable[[], float] = time.time
    fetch: Callable[[str], bytes] | None = None  # an event id -> its image (Frigate's API)
    run: Callable[[Callable[[], None]], bool] | None = None  # runs fetch off this thread
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _snapshots: dict[tuple[str, str], deque[Snapshot]] = field(default_factory=dict)
    _waiting: dict[str, _Waiting] = field(default_factory=dict)

    def window(self, event: FrigateObject) -> tuple[float, float]:
        best = event.best_frame_time
        if best is None:
            return float("-inf"), float("inf")
        start = event.start_time or best
        return max(start, best) - self.skew_s, best + self.latency_s + self.skew_s

    def pick(self, event: FrigateObject) -> tuple[Snapshot | None, Skip]:
        """The snapshot of ``event`` among those seen, or why there is none."""
        lo, hi = self.window(event)
        with self._lock:
            seen = list(self._snapshots.get((event.camera, event.label), ()))
        live = [s for s in seen if not s.retained]
        fits = [s for s in live if lo <= s.arrived <= hi]
        best = event.best_frame_time
        if fits:
            after = [s for s in fits if best is None or s.arrived >= best]
            return (after[0] if after else fits[-1]), Skip(event, "", "")
        still = " (Frigate publishes none for an object that never moved)" if (
            event.position_changes == 0) else ""
        if not seen:
            return None, Skip(event, "no_snapshot", f"Frigate published no {event.label} "
                              f"snapshot of {event.camera} for this event{still}")
        if not live:
            return None, Skip(event, "stale_snapshot", "only a retained snapshot replayed by "
                              "the broker on subscribe: its age is unknown, so it may show an "
                              "earlier object")
        last = live[-1].arrived
        side = (f"{lo - last:.1f} s before the event's best frame" if last < lo
                else f"{last - hi:.1f} s after the event's best frame window")
        return None, Skip(event, "stale_snapshot", f"no {event.label} snapshot arrived with "
                          "the event's best frame (after.snapshot.frame_time); the last one "
                          f"arrived {side}{still}")

    # ------------------------------------------------------------------ incoming

    def snapshot(self, camera: str, label: str, image: bytes, retained: bool) -> None:
        shot = Snapshot(image, self.wall(), retained)
        with self._lock:
            self._snapshots.setdefault((camera, label), deque(maxlen=SNAPSHOT_HISTORY)).append(
                shot)
            waiting = [w for w in self._waiting.values()
                       if (w.event.camera, w.event.label) == (camera, label)]
        for w in waiting:
            self._try(w.event, w.final, waited=False)

    def event(self, event: FrigateObject, final: bool) -> None:
        """A new/update/end message that counts; ``final``: no later message will decide.
        With Frigate's API (``fetch``), the event's own image is fetched on ``run``'s thread."""
        if self.fetch is not None and self.run is not None:
            if not self.run(lambda: self._fetched(event, final)):
                self._fallback(event, final, "too many events waited for Frigate's API")
            return
        self._try(event, final, waited=False)

    def _fetched(self, event: FrigateObject, final: bool) -> None:
        assert self.fetch is not None
        try:
            image = self.fetch(event.id)
        except Exception as exc:
            self._fallback(event, final, str(exc))
            return
        self.describe(event, image)

    def _fallback(self, event: FrigateObject, final: bool, detail: str) -> None:
        """Frigate's API gave no image: the MQTT snapshot of the event's best frame, if one
        arrived (the rule above, without waiting), else a ``fetch_failed`` record."""
        found, _ = self.pick(event)
        if found is not None:
            log.info("frigate event %s: no image from Frigate's API (%s); described from "
                     "its MQTT snapshot", event.id, detail)
            self.describe(event, found.image)
        elif final:
            log.info("frigate event %s not described: Frigate's API gave no image (%s)",
                     event.id, detail)
            self.skip(Skip(event, "fetch_failed", f"Frigate's API gave no image of the "
                           f"event ({detail}) and no MQTT snapshot of its best frame arrived"))

    def _try(self, event: FrigateObject, final: bool, waited: bool) -> None:
        found, why = self.pick(event)
        hi = self.window(event)[1]
        now = self.wall()
        with self._lock:
            old = self._waiting.pop(event.id, None)
            if old is not None and old.timer is not None:
                old.timer.cancel()
            if found is None and not waited and now < hi:
                timer = threading.Timer(max(0.0, min(self.wait_s, hi - now)), self._expire,
                                        (event.id,))
                timer.daemon = True
                self._waiting[event.id] = _Waiting(event, final, timer)
                timer.start()
                log.debug("frigate event %s waits for its %s snapshot", event.id, event.label)
                return
        if found is not None:
            self.describe(event, found.image)
        elif final:
            log.info("frigate event %s not described: %s", event.id, why.detail)
            self.skip(why)
        else:
            log.debug("frigate event %s: %s; left for its end event", event.id, why.detail)

    def _expire(self, event_id: str) -> None:
        with self._lock:
            w = self._waiting.get(event_id)
        if w is not None:
            self._try(w.event, w.final, waited=True)

    def drop(self, cameras: Iterable[str]) -> list[FrigateObject]:
        """Forget the events of ``cameras`` still waiting (a camera switched off)."""
        names = set(cameras)
        with self._lock:
            gone = [w for w in self._waiting.values() if w.event.camera in names]
            for w in gone:
                del self._waiting[w.event.id]
                if w.timer is not None:
                    w.timer.cancel()
        return [w.event for w in gone]
