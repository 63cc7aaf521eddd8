"""Work items for the worker and the bounded queue that holds them; any front door or
source fills it.

A :class:`RequestJob` is an admitted request with its :class:`Reply`, the way its front door
answers it (MQTT: :class:`edgevlm.frontdoors.mqtt.delivery.MqttReply`). A :class:`FrameJob`
is a frame from a source (a camera topic, Frigate) with the callbacks that publish its result.

The queue holds at most ``capacity`` jobs (a full queue answers ``busy``) and is shared by the
front doors and the cameras, fairly: each job is in the *lane* of where it came from (its
front door, ``mqtt`` or ``http``, or ``camera``), and the worker takes the oldest job of the
lane served least recently. One lane alone is first-in first-out; with several, a flood through
one door waits its turn with the others instead of holding the board (one HTTP client's 30
requests delay an MQTT request by one job, not by 30). Camera
frames take a named *slot* (``camera:<name>``): a newer frame replaces the one still waiting
in that slot and keeps its place in line, so a busy board describes the latest frame instead of
a backlog. Frigate events are not frames to replace: each one queues on its own
(:meth:`JobQueue.put_event`), at most ``limit`` per camera; every event that leaves the queue
without running (pushed out by a newer one, refused, past its deadline, the daemon stopping)
is handed to its ``on_skip`` with the reason, so it still gets its ``skipped`` record.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..wire.errors import WireError
from ..wire.protocol import Request, Response, StreamChunk
from .admission import Admitted

if TYPE_CHECKING:
    from ..verbs.base import Verb

log = logging.getLogger(__name__)


class Reply(Protocol):
    """How the front door a request came through answers it (called on the worker thread)."""

    def chunk(self, chunk: StreamChunk) -> None:
        """A partial answer (``stream: true``)."""

    def finish(self, response: Response, error_type: str | None,
               on_delivered: Callable[[], None] | None = None) -> None:
        """The final answer (``error_type``: its error's type, None when ok);
        ``on_delivered`` runs once the transport confirmed it."""


@dataclass
class RequestJob:
    """An admitted request and the way back to its requester."""

    admitted: Admitted               # the request and what admission decided for it
    verb: Verb                       # the worker answers with verb.answer
    reply: Reply
    received: float                  # time.monotonic() when the message arrived
    deadline: float | None           # time.monotonic() after which it must not start
    door: str                        # the front door it came through: its lane in the queue
    requester: str = ""              # who the route belongs to (image_ref capabilities)
    pooled: bool = False             # it came through the shared pool
    started: bool = False            # the worker has taken it (progress: "running")
    done: bool = False               # answered (progress messages stop)
    abandoned: bool = False          # its requester went away: not started, or cancelled

    @property
    def request(self) -> Request:
        return self.admitted.request


# (description or None, its wire error or None, the answer's metrics, its JSON value or
# None) -> publish the result
FrameDone = Callable[[str | None, WireError | None, dict[str, float], Any], None]


@dataclass
class FrameJob:
    """A frame from a source to describe (no requester: ``on_done`` publishes the result)."""

    source: str                      # the camera's name
    event_id: str | None             # the Frigate event, if it is one
    verb: Verb                       # describe
    admitted: Admitted               # the frame as an admitted describe request
    received: float
    on_done: FrameDone
    on_skip: Callable[[str], None] | None = None  # (reason): left the queue without running
    deadline: float | None = None    # time.monotonic() after which it must not start
    group: str | None = None         # put_event's group (the camera of a Frigate event)

    @property
    def request(self) -> Request:
        return self.admitted.request


Job = RequestJob | FrameJob


@dataclass
class _Slot:
    name: str


CAMERA_LANE = "camera"


def _lane(item: Job | _Slot | Any) -> str:
    """The lane of a waiting item: a request's front door, or ``camera`` for frames."""
    if isinstance(item, RequestJob):
        return item.door
    if isinstance(item, FrameJob | _Slot):
        return CAMERA_LANE
    return ""  # anything else (the unit tests' plain values): one lane


@dataclass
class JobQueue:
    """Thread-safe bounded queue, fair between lanes (FIFO within one), with latest-wins
    slots."""

    capacity: int
    _items: deque[Job | _Slot] = field(default_factory=deque)
    _slots: dict[str, Job] = field(default_factory=dict)
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _closed: bool = False
    _served: dict[str, int] = field(default_factory=dict)  # lane -> when it was last served
    _serial: int = 0

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)

    def put(self, job: Job) -> bool:
        """Queue ``job``; False when the queue is full or closed."""
        with self._cond:
            if self._closed or len(self._items) >= self.capacity:
                return False
            self._items.append(job)
            self._cond.notify()
            return True

    def put_latest(self, slot: str, job: Job) -> tuple[bool, Job | None]:
        """Put ``job`` in ``slot``: (accepted, the job it replaced)."""
        with self._cond:
            if self._closed:
                return False, None
            replaced = self._slots.get(slot)
            if replaced is None:
                if len(self._items) >= self.capacity:
                    return False, None
                self._items.append(_Slot(slot))
            self._slots[slot] = job
            self._cond.notify()
            return True, replaced

    def put_event(self, group: str, limit: int, job: FrameJob) -> bool:
        """Queue ``job`` on its own, at most ``limit`` of ``group`` waiting: a full group
        pushes out its oldest (its ``on_skip("queue_full")``). False (``job`` is not
        queued; the caller reports it) when the whole queue is full or closed."""
        dropped: FrameJob | None = None
        with self._cond:
            if self._closed:
                return False
            job.group = group
            mine = [i for i, item in enumerate(self._items)
                    if isinstance(item, FrameJob) and item.group == group]
            if len(mine) >= limit:
                dropped = self._items[mine[0]]  # type: ignore[assignment]
                del self._items[mine[0]]
            elif len(self._items) >= self.capacity:
                return False
            self._items.append(job)
            self._cond.notify()
        if dropped is not None:
            self._dropped([dropped], "queue_full")
        return True

    def get(self, timeout: float) -> Job | None:
        """The next job; events past their deadline are dropped (``on_skip``) on the way."""
        expired: list[FrameJob] = []
        try:
            with self._cond:
                while True:
                    if not self._items and not self._cond.wait_for(lambda: bool(self._items),
                                                                   timeout):
                        return None
                    item = self._take_next()
                    job = self._slots.pop(item.name) if isinstance(item, _Slot) else item
                    if (isinstance(job, FrameJob) and job.deadline is not None
                            and time.monotonic() > job.deadline):
                        expired.append(job)
                        continue
                    return job
        finally:
            self._dropped(expired, "deadline")

    def _take_next(self) -> Job | _Slot:
        """Under the lock, with items waiting: the oldest item of the lane served least
        recently (a lane never served first, then the lane whose oldest item came first)."""
        first: dict[str, int] = {}
        for i, item in enumerate(self._items):
            first.setdefault(_lane(item), i)
        lane = min(first, key=lambda name: (self._served.get(name, -1), first[name]))
        self._serial += 1
        self._served[lane] = self._serial
        index = first[lane]
        item = self._items[index]
        del self._items[index]
        return item

    def remove(self, wanted: Callable[[Job], bool]) -> list[Job]:
        """Take the waiting jobs ``wanted`` accepts out of the queue (e.g. the pooled
        requests of a board leaving the pool); the caller answers them."""
        with self._cond:
            taken: list[Job] = []
            kept: deque[Job | _Slot] = deque()
            for item in self._items:
                if not isinstance(item, _Slot) and wanted(item):
                    taken.append(item)
                else:
                    kept.append(item)
            self._items = kept
            return taken

    def close(self) -> list[Job]:
        """Refuse new work; return what was still waiting (events are also skipped)."""
        with self._cond:
            self._closed = True
            left = [self._slots.pop(i.name) if isinstance(i, _Slot) else i for i in self._items]
            self._items.clear()
        self._dropped([j for j in left if isinstance(j, FrameJob) and j.group is not None],
                      "stopping")
        return left

    def _dropped(self, jobs: list[FrameJob], reason: str) -> None:
        """Outside the lock: each job's ``on_skip``."""
        for job in jobs:
            if job.on_skip is None:
                continue
            try:
                job.on_skip(reason)
            except Exception:  # a report failing must not lose the queue
                log.exception("reporting a skipped frame failed")
