"""Dedupe by request id: a repeated or redelivered request is never inferred twice.

QoS 1 is at-least-once: after a crash or a reconnect the broker redelivers requests that were
not acknowledged, and clients retry. Each request key is *running* (queued or on the worker)
or *done* (its answer remembered for ``window_s``, at most ``max_entries``). A second arrival
of a running request is attached to it and answered when it finishes; a second arrival of a
done request is answered from memory.

A broker *redelivery* (DUP flag) of a request whose answer this process already published to
the same route is only acknowledged, whatever that answer was: paho sends the answer itself
(it keeps QoS 1 messages until the broker confirms them, across reconnects), so a second
answer would only be a duplicate (after a connection reset, every request answered while the
connection was down, or whose acknowledgement the reset lost, is redelivered). Answers that
are not repeated to a client's retry (``busy``, ``deadline_exceeded``, ``internal``, and
refusals at admission) are remembered for this alone, in a memory of their own, so that a
flood of them never pushes out the answers that are.
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
class _Answered:
    """An answer of this process: the response (None when it is not repeated to a retry)
    and the routes it was published to."""

    expires: float
    response: Response | None = None
    sent: set[Route] = field(default_factory=set)


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
        self._done: OrderedDict[str, _Answered] = OrderedDict()        # with a response
        self._delivered: OrderedDict[str, _Answered] = OrderedDict()   # without

    def claim(self, key: str, route: Route, ack: Ack | None, redelivered: bool = False
              ) -> Claim:
        """Register an arrival of ``key``: new work, attached to running work, answered
        (``done``: answer it from memory), or ``sent``: a redelivered copy (MQTT DUP flag)
        whose answer was already published to its route (acknowledge it, do not answer).

        A redelivered copy of a running request with the same route is only acknowledged
        later, not answered a second time."""
        with self._lock:
            self._prune()
            if redelivered and self._sent_to(key, route):
                return Claim("sent")
            done = self._done.get(key)
            if done is not None and done.response is not None:
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
                self._done[key] = _Answered(self._clock() + self.window_s, response)
                self._done.move_to_end(key)
                self._prune()
            return running.attached if running is not None else Attached()

    def mark_sent(self, key: str, routes: list[Route]) -> None:
        """The answer of ``key`` (remembered or not) was handed to paho for ``routes``: a
        redelivered copy on one of them is only acknowledged from now on."""
        with self._lock:
            done = self._done.get(key)
            if done is not None:
                done.sent.update(routes)
                return
            if self.window_s <= 0 or self.max_entries <= 0:
                return
            delivered = self._delivered.get(key)
            if delivered is None:
                delivered = self._delivered[key] = _Answered(self._clock() + self.window_s)
            delivered.sent.update(routes)
            self._delivered.move_to_end(key)
            self._prune()

    def sent_before(self, key: str, route: Route) -> bool:
        """Was an answer of ``key`` handed to paho for ``route`` (for a redelivered copy of a
        request that is refused at admission, which never claims a key)?"""
        with self._lock:
            self._prune()
            return self._sent_to(key, route)

    def forget(self, key: str) -> Attached:
        """Drop a running key without remembering an answer (e.g. the work was refused)."""
        with self._lock:
            running = self._running.pop(key, None)
            return running.attached if running is not None else Attached()

    def __len__(self) -> int:
        with self._lock:
            return len(self._done)

    def _sent_to(self, key: str, route: Route) -> bool:
        done = self._done.get(key)
        delivered = self._delivered.get(key)
        return ((done is not None and route in done.sent)
                or (delivered is not None and route in delivered.sent))

    def _prune(self) -> None:
        now = self._clock()
        _drop_old(self._done, now, self.max_entries)
        _drop_old(self._delivered, now, self.max_entries)


def _drop_old(memory: OrderedDict[str, _Answered], now: float, max_entries: int) -> None:
    """Drop expired entries and the oldest beyond ``max_entries`` (oldest first)."""
    while memory:
        key, entry = next(iter(memory.items()))
        if entry.expires > now and len(memory) <= max_entries:
            return
        del memory[key]
