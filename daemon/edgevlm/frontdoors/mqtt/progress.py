"""``working`` messages: a request that asked for them (``progress_s``) hears from the board
that took it, at once and then every ``progress_s`` seconds until its answer.

They are how a client tells a slow answer from a lost one: a pooled request whose board died
(or whose network was cut) goes silent, and the client sends the same bytes again
(:class:`edgevlm.ask.PoolRetry`, docs/mqtt.md "The shared pool"). Only a board that can serve
sends them (:mod:`edgevlm.liveness`): a stuck one falls silent and its clients go elsewhere.

QoS 0 on the request's reply route (they may be lost; the client waits for a few of them), from
the network thread for the first and from one small thread for the rest. At most one entry per
admitted request: the queue bounds them (``limits.max_queue`` plus the running one).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from paho.mqtt.properties import Properties

from ...pipeline.jobs import RequestJob
from ...wire.protocol import Progress
from .periodic import PeriodicThread
from .replies import Route

log = logging.getLogger(__name__)

TICK_S = 0.25
MAX_AGE_S = 3600.0  # an entry whose job never finished (a bug) is dropped after this long

Publish = Callable[[str, bytes, "Properties | None"], None]  # (topic, payload, properties)


class ProgressBeacon:
    """Sends ``working`` for the tracked jobs until each is done."""

    def __init__(self, node: str, publish: Publish, *, serving: Callable[[], bool],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.node = node
        self._publish = publish
        self._serving = serving
        self._clock = clock
        self._lock = threading.Lock()
        # id(job) -> (job, its reply route, next send)
        self._due: dict[int, tuple[RequestJob, Route, float]] = {}
        self._thread = PeriodicThread("edgevlm-progress", TICK_S, self.tick, log=log,
                                      failure="sending progress messages failed (carrying on)")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._thread.stop()

    def track(self, job: RequestJob, route: Route) -> None:
        """A job just queued that asked for ``progress_s``: its first ``working`` now (to
        ``route``, where its answer goes)."""
        interval = job.request.progress_s
        if interval is None:
            return
        self._send(job, route)
        with self._lock:
            self._due[id(job)] = (job, route, self._clock() + interval)

    def tick(self) -> None:
        """Send what is due, drop what is done (the thread calls this every ``TICK_S``)."""
        now = self._clock()
        serving = self._serving()
        due: list[tuple[RequestJob, Route]] = []
        with self._lock:
            for key, (job, route, at) in list(self._due.items()):
                if job.done or now - job.received > MAX_AGE_S:
                    del self._due[key]
                elif at <= now:
                    interval = job.request.progress_s or 1.0
                    self._due[key] = (job, route, max(at + interval, now))
                    due.append((job, route))
        if serving:  # a board that cannot serve falls silent: its clients go elsewhere
            for job, route in due:
                self._send(job, route)

    def _send(self, job: RequestJob, route: Route) -> None:
        rid = job.request.id
        payload = Progress(id=rid, transaction=rid, node=self.node,
                           stage="running" if job.started else "queued"
                           ).model_dump_json(exclude_none=True).encode()
        try:
            self._publish(route.topic, payload, route.properties())
        except Exception as exc:
            log.debug("progress of %s not sent: %s", rid, exc)
