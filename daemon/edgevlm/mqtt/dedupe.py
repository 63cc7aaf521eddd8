"""Dedupe by request id: a repeated or redelivered request is never inferred twice.

QoS 1 is at-least-once: after a crash or a reconnect the broker redelivers requests that were
not acknowledged, and clients retry. Each request key is *running* (queued or on the worker)
or *done* (its answer remembered for ``window_s``, at most ``max_entries``). A second arrival
of a running request is attached to it and answered when it finishes; a second arrival of a
done request is answered from memory, except a broker *redelivery* (DUP flag) on a route the
answer was already published to (by this process): paho sends that answer itself (it keeps
QoS 1 messages until the broker confirms them, across reconnects), so a second copy would only
be a duplicate (after a connection reset, every request answered while the connection was
down is redelivered).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from ..protocol import Response
from .replies import Ack, Route


@dataclass(frozen=True)
class Claim:
    kind: Literal["new", "running", "done", "sent"]
    response: Response | None = None   # for "done"


@dataclass
class Attached:
    """Arrivals of a request while it was running: more routes to answer and more acks."""

    routes: list[Route] = field(default_factory=list)
    acks: list[Ack] = field(default_factory=list)


@dataclass
class _Done:
    response: Response
    expires: float
    sent: set[Route] = field(default_factory=set)   # routes the answer was published to


@dataclass
class _Running:
    primary: Route
    attached: Attached = field(default_factory=Attached)


class DedupeMemory:
    """Thread-safe memory of running and answered request keys."""

    def __init__(self, window_s: float = 600.0, max_entries: int = 1024,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self.max_entries = max_entries
        self._clock = clock
        self._lock = threading.Lock()
        self._running: dict[str, _Running] = {}
        self._done: OrderedDict[str, _Done] = OrderedDict()

    def claim(self, key: str, route: Route, ack: Ack | None, redelivered: bool = False
              ) -> Claim:
        """Register an arrival of ``key``: new work, attached to running work, answered
        (``done``: answer it from memory), or ``sent``: a redelivered copy (MQTT DUP flag)
        whose answer was already published to its route (acknowledge it, do not answer).

        A redelivered copy of a running request with the same route is only acknowledged
        later, not answered a second time."""
        with self._lock:
            self._prune()
            done = self._done.get(key)
            if done is not None:
                if redelivered and route in done.sent:
                    return Claim("sent")
                return Claim("done", done.response)
            running = self._running.get(key)
            if running is None:
                self._running[key] = _Running(route)
                return Claim("new")
            same_route = route == running.primary or route in running.attached.routes
            if not (redelivered and same_route):
                running.attached.routes.append(route)
            if ack is not None:
                running.attached.acks.append(ack)
            return Claim("running")

    def complete(self, key: str, response: Response, remember: bool = True) -> Attached:
        """The answer of ``key``; returns the arrivals attached while it ran."""
        with self._lock:
            running = self._running.pop(key, None)
            if remember and self.window_s > 0 and self.max_entries > 0:
                self._done[key] = _Done(response, self._clock() + self.window_s)
                self._done.move_to_end(key)
                self._prune()
            return running.attached if running is not None else Attached()

    def mark_sent(self, key: str, routes: list[Route]) -> None:
        """The remembered answer of ``key`` was handed to paho for ``routes``."""
        with self._lock:
            done = self._done.get(key)
            if done is not None:
                done.sent.update(routes)

    def forget(self, key: str) -> Attached:
        """Drop a running key without remembering an answer (e.g. the work was refused)."""
        with self._lock:
            running = self._running.pop(key, None)
            return running.attached if running is not None else Attached()

    def __len__(self) -> int:
        with self._lock:
            return len(self._done)

    def _prune(self) -> None:
        now = self._clock()
        while self._done:
            key, done = next(iter(self._done.items()))
            if done.expires > now and len(self._done) <= self.max_entries:
                break
            del self._done[key]
