"""Work items for the worker and the bounded queue that holds them.

Requests queue first-in first-out up to ``capacity`` (a full queue answers ``busy``). Camera
frames take a named *slot* (``camera:<name>``): a newer frame replaces the one still waiting
in that slot and keeps its place in line, so a busy board describes the latest frame instead of
a backlog.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

from ..protocol import Request
from ..sources import CameraFrame
from .dedupe import RequestKey
from .replies import Ack, Route


@dataclass
class RequestJob:
    """An admitted request message."""

    key: RequestKey | None           # dedupe key (request id or a hash, and the payload's)
    request: Request
    verb: str
    route: Route
    acks: list[Ack]
    received: float                  # time.monotonic() when the message arrived
    deadline: float | None           # time.monotonic() after which it must not start
    requester: str = ""              # who the route belongs to (image_ref capabilities)


@dataclass
class CameraJob:
    """A camera frame to describe (no reply route: results go to the camera's topics)."""

    frame: CameraFrame
    request: Request
    received: float


Job = RequestJob | CameraJob


@dataclass
class _Slot:
    name: str


@dataclass
class JobQueue:
    """Thread-safe bounded FIFO with latest-wins slots."""

    capacity: int
    _items: deque[Job | _Slot] = field(default_factory=deque)
    _slots: dict[str, Job] = field(default_factory=dict)
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _closed: bool = False

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

    def get(self, timeout: float) -> Job | None:
        with self._cond:
            if not self._items and not self._cond.wait_for(lambda: bool(self._items), timeout):
                return None
            item = self._items.popleft()
            return self._slots.pop(item.name) if isinstance(item, _Slot) else item

    def close(self) -> list[Job]:
        """Refuse new work; return what was still waiting."""
        with self._cond:
            self._closed = True
            left = [self._slots.pop(i.name) if isinstance(i, _Slot) else i for i in self._items]
            self._items.clear()
            return left
