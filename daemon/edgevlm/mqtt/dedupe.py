"""Dedupe by request id: a repeated or redelivered request is never inferred twice.

QoS 1 is at-least-once: after a crash or a reconnect the broker redelivers requests that were
not acknowledged, and clients retry. Each request key is *running* (queued or on the worker)
or *done* (its answer remembered for ``window_s``, at most ``max_entries``). A second arrival
of a running request is attached to it and answered when it finishes; a second arrival of a
done request is answered from memory.
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
    kind: Literal["new", "running", "done"]
    response: Response | None = None   # for "done"


@dataclass
class Attached:
    """Arrivals of a request while it was running: more routes to answer and more acks."""

    routes: list[Route] = field(default_factory=list)
    acks: list[Ack] = field(default_factory=list)


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
        self._done: OrderedDict[str, tuple[Response, float]] = OrderedDict()

    def claim(self, key: str, route: Route, ack: Ack | None, redelivered: bool = False
              ) -> Claim:
        """Register an arrival of ``key``: new work, attached to running work, or answered.

        A redelivered copy (MQTT DUP flag) of a running request with the same route is only
        acknowledged later, not answered a second time."""
        with self._lock:
            self._prune()
            done = self._done.get(key)
            if done is not None:
                return Claim("done", done[0])
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
                self._done[key] = (response, self._clock() + self.window_s)
                self._done.move_to_end(key)
                self._prune()
            return running.attached if running is not None else Attached()

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
            key, (_, expires) = next(iter(self._done.items()))
            if expires > now and len(self._done) <= self.max_entries:
                break
            del self._done[key]
