"""A translated request into the pipeline: the describe verb's admission (the same limits,
token budget and ``image_ref`` capabilities as MQTT, before any media is decoded), then the
shared job queue with an :class:`HttpReply` that carries the worker's answer back to the
event loop."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...metrics import Metrics
from ...pipeline.admission import RequestSide, admit_request, side_for
from ...pipeline.image_refs import ImageRefs
from ...pipeline.jobs import JobQueue, RequestJob
from ...verbs import get_verb
from ...wire.errors import Busy, EdgevlmError
from ...wire.protocol import Response, StreamChunk, parse_request

log = logging.getLogger(__name__)


@dataclass
class HttpReply:
    """The worker's answer, handed to the event loop: ``("chunk", text)`` events, then one
    ``("done", Response)``."""

    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue[tuple[str, Any]] = field(default_factory=asyncio.Queue)
    job: RequestJob | None = None  # set once queued

    def _put(self, event: tuple[str, Any]) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, event)
        except RuntimeError:  # the server stopped: nobody is waiting any more
            log.debug("an HTTP answer arrived after the server stopped")

    def chunk(self, chunk: StreamChunk) -> None:
        self._put(("chunk", chunk.text))

    def finish(self, response: Response, error_type: str | None,
               on_delivered: Callable[[], None] | None = None) -> None:
        self._put(("done", response))
        if on_delivered is not None:
            on_delivered()


@dataclass
class Submitter:
    """Admits requests of the HTTP front door and queues them for the worker."""

    side: Callable[[], RequestSide]
    queue: JobQueue
    metrics: Metrics
    refs: ImageRefs
    default_deadline_ms: int | None
    abandon_job: Callable[[RequestJob], None] | None = None  # the worker's abandon()

    def abandon(self, reply: HttpReply) -> None:
        """The client of ``reply`` disconnected: its job is not started, or stops."""
        if reply.job is not None and self.abandon_job is not None:
            log.info("http: the client went away; its request is cancelled")
            self.abandon_job(reply.job)

    def precheck(self, body: dict[str, Any], size: int, requester: str) -> None:
        """Admission without queueing or counting (the lower bound of a request whose image
        URLs stand for the smallest image): raises the error to answer with."""
        admit_request(parse_request(body), size, side_for(self.side(), self.refs, requester))

    def submit(self, body: dict[str, Any], size: int, requester: str,
               loop: asyncio.AbstractEventLoop, *, fit_max_tokens: bool = False) -> HttpReply:
        """Admit ``body`` (the protocol form of the request, ``size`` bytes on the wire) and
        queue it; raises the error to answer with. ``fit_max_tokens``: the dialect's token
        limit is a cap the answer is fitted to the context by (Ollama's ``num_predict``)."""
        self.metrics.received()
        try:
            request = parse_request(body)
            admitted = admit_request(request, size, side_for(self.side(), self.refs, requester),
                                     fit_max_tokens=fit_max_tokens)
        except EdgevlmError as exc:
            self.metrics.finished(exc.type)
            raise
        now = time.monotonic()
        budget_ms = (request.deadline_ms if request.deadline_ms is not None
                     else self.default_deadline_ms)
        reply = HttpReply(loop)
        job = RequestJob(admitted=admitted, verb=get_verb("describe"), reply=reply, door="http",
                         received=now,
                         deadline=now + budget_ms / 1e3 if budget_ms is not None else None,
                         requester=requester)
        reply.job = job
        if not self.queue.put(job):
            self.metrics.finished("busy")
            raise Busy(f"the queue is full ({self.queue.capacity} waiting, limits.max_queue); "
                       "retry later")
        return reply
