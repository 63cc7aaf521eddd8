"""Dedupe: a repeated or redelivered request is never inferred twice for its requester, and its
answer never goes to anyone else.

QoS 1 is at-least-once: after a crash or a reconnect the broker redelivers requests that were
not acknowledged, and clients retry. A request is known by its :class:`RequestKey` — the verb
and id (or, without an id, a hash of the bytes) *and* a digest of the exact payload — and by
its reply route (Response Topic + Correlation Data, compared by digest); the key names the
requester's reply topic too (``requests.dedupe_key``), so ids of different requesters never
meet. Per key and route it is
*running* (queued or on the worker) or *done* (its answer remembered for ``window_s``). A
second arrival on the same route of a running request is attached to it and answered when it
finishes; of a done request, answered from memory. The same request from another route is
another requester: it runs again (its answer is its own, never the first one). An id that
arrives on the same reply topic with another payload while the first is running or remembered
is refused (``id_reused``): an id names one request of its requester, so nobody gets an answer
meant for other bytes.

A broker *redelivery* (DUP flag) of a request whose answer this process already published to
the same route is only acknowledged, whatever that answer was: paho sends the answer itself
(it keeps QoS 1 messages until the broker confirms them, across reconnects), so a second
answer would only be a duplicate (after a connection reset, every request answered while the
connection was down, or whose acknowledgement the reset lost, is redelivered). Answers that
are not repeated to a client's retry (``busy``, ``deadline_exceeded``, ``internal``, and
refusals at admission) are remembered for this alone, in a memory of their own, so that a
flood of them never pushes out the answers that are.

Bounded: only 16-byte digests of payloads and routes are kept (never Correlation Data), at most
``ROUTES_PER_KEY`` routes per key (the oldest route is forgotten first), and each memory holds
at most ``max_entries`` routes in all (oldest keys dropped first). A running request answers at
most ``REPEATS_PER_RUN`` extra arrivals on its route (QoS 0 copies have no acknowledgement to
hold the broker back); later ones are acknowledged with it.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

from ...wire.protocol import Response
from .replies import Ack, Route

ROUTES_PER_KEY = 4      # reply routes remembered per request key
REPEATS_PER_RUN = 4     # extra answers to arrivals on the same route while a request runs
DIGEST_BYTES = 16


def digest(data: bytes) -> bytes:
    """The 16-byte BLAKE2b digest the memory keeps instead of the bytes."""
    return hashlib.blake2b(data, digest_size=DIGEST_BYTES).digest()


def route_digest(route: Route) -> bytes:
    """A route as 16 bytes: its topic and Correlation Data (absent and empty differ)."""
    h = hashlib.blake2b(route.topic.encode(), digest_size=DIGEST_BYTES)
    if route.correlation is None:
        h.update(b"\0-")
    else:
        h.update(b"\0+")
        h.update(route.correlation)
    return h.digest()


@dataclass(frozen=True)
class RequestKey:
    """What a request is: ``name`` (the verb and id, or a hash of the bytes without an id; an
    id names one request) and ``payload``, the digest of its exact bytes."""

    name: str
    payload: bytes


@dataclass(frozen=True)
class Claim:
    kind: Literal["new", "running", "done", "sent", "reused"]
    response: Response | None = None   # for "done"


@dataclass
class Attached:
    """Arrivals on a request's route while it ran: answers to repeat, and acks."""

    repeats: int = 0
    acks: list[Ack] = field(default_factory=list)


@dataclass
class _Running:
    payload: bytes
    by_route: dict[bytes, Attached] = field(default_factory=dict)


@dataclass
class _RouteState:
    response: Response | None   # None: not repeated to a retry (only a redelivery is known)
    sent: bool = False          # handed to paho: a redelivered copy is only acknowledged


@dataclass
class _Answered:
    """A request answered by this process: its payload digest and, per route digest (at most
    ``ROUTES_PER_KEY``, oldest first), the answer."""

    payload: bytes
    expires: float
    routes: OrderedDict[bytes, _RouteState] = field(default_factory=OrderedDict)


K = TypeVar("K", bound=Hashable)


class _Memory(Generic[K]):
    """Answered keys, oldest first, bounded by the routes they hold in all."""

    def __init__(self, max_routes: int) -> None:
        self.max_routes = max_routes
        self.entries: OrderedDict[K, _Answered] = OrderedDict()
        self.routes = 0

    def get(self, key: K) -> _Answered | None:
        return self.entries.get(key)

    def entry(self, key: K, payload: bytes, expires: float) -> _Answered:
        """The entry of ``key`` for ``payload`` (a fresh one if it held another payload),
        now the newest, expiring at ``expires``."""
        entry = self.entries.get(key)
        if entry is None or entry.payload != payload:
            self.drop(key)
            entry = self.entries[key] = _Answered(payload, expires)
        entry.expires = max(entry.expires, expires)
        self.entries.move_to_end(key)
        return entry

    def set_route(self, entry: _Answered, route: bytes, state: _RouteState) -> None:
        if route in entry.routes:
            entry.routes.move_to_end(route)
        else:
            self.routes += 1
            if len(entry.routes) >= ROUTES_PER_KEY:
                entry.routes.popitem(last=False)
                self.routes -= 1
        entry.routes[route] = state

    def drop(self, key: K) -> None:
        entry = self.entries.pop(key, None)
        if entry is not None:
            self.routes -= len(entry.routes)

    def prune(self, now: float) -> None:
        """Drop expired keys and the oldest while more than ``max_routes`` routes are held."""
        while self.entries:
            key, entry = next(iter(self.entries.items()))
            if entry.expires > now and self.routes <= self.max_routes:
                return
            self.drop(key)

    def __len__(self) -> int:
        return len(self.entries)


class DedupeMemory:
    """Thread-safe memory of running and answered requests, per key and reply route."""

    def __init__(self, window_s: float = 600.0, max_entries: int = 1024,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self.max_entries = max_entries
        self._clock = clock
        self._lock = threading.Lock()
        self._running: dict[str, _Running] = {}
        self._done: _Memory[str] = _Memory(max_entries)                        # with a response
        self._delivered: _Memory[tuple[str, bytes]] = _Memory(max_entries)     # without

    @property
    def _remembers(self) -> bool:
        return self.window_s > 0 and self.max_entries > 0

    def claim(self, key: RequestKey, route: Route, ack: Ack | None, redelivered: bool = False
              ) -> Claim:
        """Register an arrival of ``key`` on ``route``: ``new`` work; ``running`` (attached to
        the same request running for the same route); ``done`` (answer it from memory); ``sent``:
        a redelivered copy (MQTT DUP flag) whose answer was already published to its route
        (acknowledge it, do not answer); ``reused``: the id is bound to another payload.

        A redelivered copy of a running request is only acknowledged later, not answered a
        second time."""
        rd = route_digest(route)
        with self._lock:
            self._prune()
            running = self._running.get(key.name)
            done = self._done.get(key.name)
            bound = running.payload if running is not None else (
                done.payload if done is not None else None)
            if bound is not None and bound != key.payload:
                return Claim("reused")
            if redelivered and self._sent_to(key, rd):
                return Claim("sent")
            state = done.routes.get(rd) if done is not None else None
            if state is not None and state.response is not None:
                return Claim("done", state.response)
            if running is None:
                running = self._running[key.name] = _Running(key.payload)
            attached = running.by_route.get(rd)
            if attached is None:
                running.by_route[rd] = Attached()
                return Claim("new")
            if not redelivered and attached.repeats < REPEATS_PER_RUN:
                attached.repeats += 1
            if ack is not None:
                attached.acks.append(ack)
            return Claim("running")

    def complete(self, key: RequestKey, route: Route, response: Response,
                 remember: bool = True) -> Attached:
        """The answer of ``key`` for ``route``; returns the arrivals attached while it ran."""
        rd = route_digest(route)
        with self._lock:
            attached = self._detach(key, rd)
            if remember and self._remembers:
                entry = self._done.entry(key.name, key.payload, self._clock() + self.window_s)
                self._done.set_route(entry, rd, _RouteState(response))
                self._prune()
            return attached

    def mark_sent(self, key: RequestKey, route: Route) -> None:
        """The answer of ``key`` (remembered or not) was handed to paho for ``route``: a
        redelivered copy on it is only acknowledged from now on."""
        rd = route_digest(route)
        with self._lock:
            done = self._done.get(key.name)
            if done is not None and done.payload == key.payload and rd in done.routes:
                done.routes[rd].sent = True
                return
            if not self._remembers:
                return
            entry = self._delivered.entry((key.name, key.payload),
                                          key.payload, self._clock() + self.window_s)
            self._delivered.set_route(entry, rd, _RouteState(None, sent=True))
            self._prune()

    def sent_before(self, key: RequestKey, route: Route) -> bool:
        """Was an answer of ``key`` handed to paho for ``route`` (for a redelivered copy of a
        request that is refused at admission, which never claims a key)?"""
        rd = route_digest(route)
        with self._lock:
            self._prune()
            return self._sent_to(key, rd)

    def forget(self, key: RequestKey, route: Route) -> Attached:
        """Drop a running request without remembering an answer (e.g. the queue was full)."""
        with self._lock:
            return self._detach(key, route_digest(route))

    def __len__(self) -> int:
        """Remembered answers (keys)."""
        with self._lock:
            return len(self._done)

    def routes_held(self) -> int:
        """Routes held by both memories (each at most ``max_entries``)."""
        with self._lock:
            return self._done.routes + self._delivered.routes

    def _detach(self, key: RequestKey, rd: bytes) -> Attached:
        running = self._running.get(key.name)
        if running is None or running.payload != key.payload:
            return Attached()
        attached = running.by_route.pop(rd, None) or Attached()
        if not running.by_route:
            del self._running[key.name]
        return attached

    def _sent_to(self, key: RequestKey, rd: bytes) -> bool:
        done = self._done.get(key.name)
        if done is not None and done.payload == key.payload:
            state = done.routes.get(rd)
            if state is not None and state.sent:
                return True
        delivered = self._delivered.get((key.name, key.payload))
        return delivered is not None and rd in delivered.routes

    def _prune(self) -> None:
        now = self._clock()
        self._done.prune(now)
        self._delivered.prune(now)
