"""The worker: one thread that owns the engine and turns queued jobs into answers, for every
front door and source alike.

``pipeline.run.run_admitted`` (the admitted job: media prepared with admission's pixel
bounds, ViT on cache misses, prefill, decode) -> the verb's answer -> the answer envelope.
With ``stream: true`` partial chunks (``status: "partial"``, ``seq`` from 0) go out before
the final answer. Any exception becomes an error answer for that job and a log line; the
thread never dies of one. Answers leave through the job's :class:`~.jobs.Reply` (its front
door's), a frame's result through its ``on_done``.

An answer goes to its requester only: its ``cache[].key`` values are ``image_ref``
capabilities for that requester (:mod:`edgevlm.pipeline.image_refs`). Camera descriptions are
announced on ``bridge/last_answer`` and ``bridge/event`` (``on_answer``); request answers only
with ``share_request_answers`` (``mqtt.share_request_answers``), since every client may read
those.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..engine import Engine, GenerationResult
from ..metrics import Metrics
from ..wire.errors import Busy, DeadlineExceeded, EdgevlmError, WireError, wire_error
from ..wire.protocol import AnswerData, Response, StreamChunk
from .image_refs import PROCESS_REFS, ImageRefs
from .jobs import FrameJob, Job, JobQueue, RequestJob
from .preflight import PreflightContext
from .run import run_admitted

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Answered:
    """A finished answer, for the bridge's last_answer/event topics."""

    request_id: str | None
    camera: str | None
    text: str
    finish_reason: str
    model: str


class Worker:
    """Runs jobs from ``queue`` on one thread with ``engine``."""

    _running_since: float | None = None  # time.monotonic() the running job started

    def __init__(self, engine: Engine, context: PreflightContext, queue: JobQueue,
                 metrics: Metrics, *, on_answer: Callable[[Answered], None] | None = None,
                 on_busy: Callable[[bool], None] | None = None,
                 share_request_answers: bool = False, refs: ImageRefs = PROCESS_REFS,
                 test_delay_s: float = 0.0) -> None:
        self.engine = engine
        self.context = context
        self.queue = queue
        self.metrics = metrics
        self.on_answer = on_answer
        self.on_busy = on_busy
        self.share_request_answers = share_request_answers
        self.refs = refs
        self.test_delay_s = test_delay_s  # test-only: widens the "mid-request" window
        self._stopping = threading.Event()
        self._current: Job | None = None  # the running job (abandon() cancels it)
        self._current_lock = threading.Lock()
        self._busy = False
        self._thread = threading.Thread(target=self._run, name="edgevlm-worker", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def running_since(self) -> float | None:
        """When the running job started (``time.monotonic()``); None while idle. A stuck
        worker is alive but never done (:mod:`edgevlm.liveness`)."""
        return self._running_since

    def shutdown(self, grace_s: float = 10.0) -> None:
        """Refuse queued work (``busy``), let the running job finish for ``grace_s``, then
        cancel it (it is answered with ``finish_reason: cancelled``)."""
        for job in self.queue.close():
            if isinstance(job, RequestJob):
                self.fail(job, Busy("the daemon is stopping; send the request again (another "
                                    "board of the pool, or this one after its restart)"))
        self._stopping.set()
        self._thread.join(timeout=grace_s)
        if self._thread.is_alive():
            log.warning("the running request did not finish within %.0f s; cancelling it",
                        grace_s)
            self.engine.cancel()
            self._thread.join(timeout=10.0)

    def abandon(self, job: RequestJob) -> None:
        """``job``'s requester went away (an HTTP client disconnected): it is not started,
        or, running, it stops at its next token. Any thread."""
        with self._current_lock:
            job.abandoned = True
            if self._current is job:
                self.engine.cancel()

    def refuse_waiting(self, wanted: Callable[[Job], bool], exc: BaseException) -> int:
        """Answer the waiting requests ``wanted`` accepts with ``exc`` (e.g. ``busy`` for
        the pooled ones when the board leaves the pool); returns how many."""
        jobs = [job for job in self.queue.remove(wanted) if isinstance(job, RequestJob)]
        for job in jobs:
            self.fail(job, exc)
        return len(jobs)

    # ------------------------------------------------------------------ the loop

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                job = self.queue.get(timeout=0.25)
                self._running_since = None if job is None else time.monotonic()
                if job is None:
                    self._set_busy(False)
                    continue
                self._set_busy(True)
                with self._current_lock:
                    self._current = job
                try:
                    if isinstance(job, RequestJob):
                        self._run_request(job)
                    else:
                        self._run_frame(job)
                finally:
                    with self._current_lock:
                        self._current = None
            except Exception:  # a bug in the code around the job; keep serving
                log.exception("worker error (the worker carries on)")
        self._set_busy(False)

    def _set_busy(self, busy: bool) -> None:
        if busy == self._busy:
            return
        self._busy = busy
        self.metrics.set_busy(busy)
        if self.on_busy is not None:
            try:
                self.on_busy(busy)
            except Exception:
                log.exception("busy callback failed")

    def _generate(self, job: Job, on_text: Callable[[str], None] | None) -> GenerationResult:
        if self.test_delay_s > 0:
            time.sleep(self.test_delay_s)
        refs = None
        if isinstance(job, RequestJob):
            requester = job.requester

            def refs(ref: str) -> str | None:
                return self.refs.open(ref, requester)

        return run_admitted(self.engine, job.admitted, self.context, refs, on_text)

    # ------------------------------------------------------------------ requests

    def _run_request(self, job: RequestJob) -> None:
        job.started = True
        started = time.monotonic()
        queue_ms = (started - job.received) * 1e3
        rid = job.request.id
        try:
            if job.abandoned:
                raise DeadlineExceeded("the requester went away before the request started")
            if job.deadline is not None and started > job.deadline:
                raise DeadlineExceeded(
                    f"the deadline passed {(started - job.deadline) * 1e3:.0f} ms before the "
                    f"request could start (it waited {queue_ms:.0f} ms in the queue); raise "
                    "deadline_ms or send fewer requests at once")
            on_text = self._streamer(job) if job.request.stream else None
            result = self._generate(job, on_text)
        except Exception as exc:
            self.fail(job, exc)
            return
        data = job.verb.answer(result, self.engine.name, queue_ms,
                                         lambda key: self.refs.issue(key, job.requester))

        def answered() -> None:
            log.info("answered %s in %.0f ms (%d tokens, queue %.0f ms)", rid,
                     data.metrics.total_ms, data.usage.completion_tokens, queue_ms)

        self._finish(job, Response.ok(rid, data), None, data, answered)
        if self.on_answer is not None and self.share_request_answers:
            self.on_answer(Answered(rid, None, data.text, data.finish_reason, data.model))

    def _streamer(self, job: RequestJob) -> Callable[[str], None]:
        seq = 0
        rid = job.request.id

        def on_text(text: str) -> None:
            nonlocal seq
            job.reply.chunk(StreamChunk(id=rid, transaction=rid, seq=seq, text=text))
            seq += 1

        return on_text

    def fail(self, job: RequestJob, exc: BaseException) -> None:
        """Answer ``job`` with the wire error of ``exc``."""
        err = wire_error(exc)
        if isinstance(exc, EdgevlmError):
            log.info("request %s: %s: %s", job.request.id, err.type, err.message)
        else:
            log.error("request %s failed", job.request.id, exc_info=exc)
        response = Response.fail(job.request.id, err.code, err.type, err.message)  # type: ignore[arg-type]
        self._finish(job, response, err.type, None)

    def _finish(self, job: RequestJob, response: Response, error_type: str | None,
                data: AnswerData | None, on_delivered: Callable[[], None] | None = None
                ) -> None:
        job.done = True
        self.metrics.finished(error_type, data.metrics if data else None,
                              data.usage.completion_tokens if data else 0,
                              prompt_tokens=data.usage.prompt_tokens if data else 0,
                              finish_reason=data.finish_reason if data else "stop")
        job.reply.finish(response, error_type, on_delivered)

    # ------------------------------------------------------------------ frames

    def _run_frame(self, job: FrameJob) -> None:
        started = time.monotonic()
        queue_ms = (started - job.received) * 1e3
        self.metrics.received()
        text: str | None = None
        finish = "stop"
        error: WireError | None = None
        metrics: dict[str, float] = {"queue_ms": queue_ms}
        value = None
        try:
            result = self._generate(job, None)
            data = job.verb.answer(result, self.engine.name, queue_ms, None)
            text, finish, value = data.text, data.finish_reason, data.parsed
            metrics = data.metrics.model_dump()
            self.metrics.finished(None, data.metrics, data.usage.completion_tokens,
                                  prompt_tokens=data.usage.prompt_tokens,
                                  finish_reason=data.finish_reason)
        except Exception as exc:
            error = wire_error(exc)
            if not isinstance(exc, EdgevlmError):
                log.error("camera %s: describing failed", job.source, exc_info=exc)
            self.metrics.finished(error.type)
        try:
            job.on_done(text, error, metrics, value)
        except Exception:
            log.exception("camera %s: publishing the result failed", job.source)
        if text is not None and self.on_answer is not None:
            self.on_answer(Answered(job.event_id, job.source, text, finish, self.engine.name))
