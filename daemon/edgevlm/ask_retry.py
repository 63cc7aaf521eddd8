"""The ``edgevlm ask`` client's half of the shared pool's promise: a pooled request is sent
again when the pool goes silent about it.

The broker drops what a dead board held (docs/mqtt.md "The shared pool"), so the client
(:class:`edgevlm.ask.DescribeClient`) asks the board that takes it for ``working`` messages
and publishes the same bytes again — same id, same reply route — when none come. A board that
already has it answers it once (dedupe); a board that died mid-request may still answer after
its restart, so at most one extra answer per lost board, with the same id.

:class:`PoolRetry` is the rule, :class:`Waiter` one request in flight (its answer and its retry
state), :class:`Resender` the thread that applies the rule and picks where a retry goes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from paho.mqtt.properties import Properties

from .frontdoors.mqtt.topics import Topics

log = logging.getLogger(__name__)

Chunk = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class PoolRetry:
    """The client's half of the pool's promise: publish the same request again when the pool
    goes silent about it.

    The request asks for ``working`` every ``progress_s`` (its ``progress_s`` field). Nothing
    heard within ``accept_s`` of a publish (it went to a board that is gone), or nothing for
    ``silence_s`` after the last message (the board died or its network was cut): publish the
    same bytes again. A ``busy`` answer: again after ``busy_pause_s`` (another board will
    likely take it); when time runs out, that ``busy`` answer is the result.

    Where a retry goes: the pool; but after a silence, and from the third publish on, the
    board heard from most recently (its ``working`` messages) that has not fell silent, on
    its own request topic: the broker may keep handing pooled requests to a board whose
    network is cut until it notices (Mosquitto 2.0: 1.5 keepalives plus up to 6 s)."""

    progress_s: float = 2.0
    accept_s: float = 2.0
    silence_s: float = 5.0
    busy_pause_s: float = 0.5
    suspect_s: float = 30.0   # a board that fell silent is not sent a retry this long


@dataclass
class Waiter:
    """One request in flight: its answer when it comes, and what a retry needs."""

    request_id: str
    on_chunk: Chunk | None
    done: threading.Event = field(default_factory=threading.Event)
    answer: dict[str, Any] | None = None
    received_at: float = 0.0          # time.monotonic() when the final answer arrived
    # the retry rule (None: publish once) and what a retry publishes again
    retry: PoolRetry | None = None
    topic: str = ""
    payload: bytes = b""
    properties: Properties | None = None
    attempts: int = 0                 # publishes so far
    published_at: float = 0.0         # the last publish (time.monotonic())
    heard_at: float | None = None     # the last message about it since that publish
    again_at: float | None = None     # a busy answer: publish again at this time
    busy: dict[str, Any] | None = None  # the last busy answer (the result if time runs out)
    pooled: bool = False              # sent to the pool (retries may go to one board)
    node: str | None = None           # the board its last ``working`` came from


class Resender:
    """Publishes the client's waiting requests again by the rule of their :class:`PoolRetry`,
    on one thread (started by the first request with a rule). ``lock`` is the client's: it
    guards ``waiters`` and every :class:`Waiter` in it; ``publish(waiter, topic)`` sends the
    waiter's bytes again."""

    def __init__(self, base_topic: str, lock: threading.Lock, waiters: Mapping[str, Waiter],
                 publish: Callable[[Waiter, str], None]) -> None:
        self.base = base_topic
        self._lock = lock
        self._waiters = waiters
        self._publish = publish
        self._thread: threading.Thread | None = None
        self._heard: dict[str, float] = {}    # board -> when its last ``working`` came
        self._silent: dict[str, float] = {}   # board -> until when it is not sent retries
        self._closed = threading.Event()

    def heard_working(self, board: str, now: float) -> None:
        """A ``working`` message came from ``board`` (caller holds the lock)."""
        self._heard[board] = now
        self._silent.pop(board, None)

    def start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._loop, daemon=True,
                                            name="edgevlm-ask-retry")
        self._thread.start()

    def stop(self) -> None:
        self._closed.set()

    def _loop(self) -> None:
        while not self._closed.wait(0.1):
            try:
                for waiter, why, topic in self.due_again(time.monotonic()):
                    log.info("request %s: %s; sending it again to %s (attempt %d)",
                             waiter.request_id, why, topic, waiter.attempts + 1)
                    self._publish(waiter, topic)
            except Exception:  # the next round tries again
                log.exception("resending a pooled request failed")

    def due_again(self, now: float) -> list[tuple[Waiter, str, str]]:
        """The waiters whose request must be published again: why, and to which topic."""
        due: list[tuple[Waiter, str, str]] = []
        with self._lock:
            for waiter in self._waiters.values():
                rule = waiter.retry
                if rule is None or waiter.done.is_set():
                    continue
                if waiter.again_at is not None:
                    if now >= waiter.again_at:
                        due.append((waiter, "the board answered busy", waiter.topic))
                elif waiter.heard_at is None:
                    if now - waiter.published_at >= rule.accept_s:
                        due.append((waiter, f"no board took it within {rule.accept_s:g} s",
                                    self._retry_topic(waiter, now, silent=False)))
                elif now - waiter.heard_at >= rule.silence_s:
                    if waiter.node is not None:
                        self._silent[waiter.node] = now + rule.suspect_s
                    due.append((waiter, f"no word from board {waiter.node} for "
                                        f"{rule.silence_s:g} s",
                                self._retry_topic(waiter, now, silent=True)))
        return due

    def _retry_topic(self, waiter: Waiter, now: float, silent: bool) -> str:
        """The pool, or (after a silence, or from the third publish on) the request topic of
        the board heard from last that has not fell silent (caller holds the lock)."""
        if not waiter.pooled or not (silent or waiter.attempts >= 2):
            return waiter.topic
        live = [(at, node) for node, at in self._heard.items()
                if node != waiter.node and self._silent.get(node, 0.0) <= now
                and now - at <= 3 * (waiter.retry.silence_s if waiter.retry else 5.0)]
        if not live:
            return waiter.topic
        return Topics(self.base, max(live)[1]).request("describe")
