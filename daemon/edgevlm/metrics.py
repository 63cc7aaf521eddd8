"""Counters and latency summaries behind ``bridge/health`` and the Home Assistant sensors.

One :class:`Metrics` per daemon, shared by the network thread (``received``, ``deduplicated``,
connection state) and the worker (``finished``, ``set_busy``); every method takes one lock and
does O(1) work, except :meth:`Metrics.snapshot` which sorts the last 256 latencies.

Invariant at every snapshot: ``received == answered + errored + in_progress``.
"""

from __future__ import annotations

import logging
import os
import resource
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .latency_histograms import Totals
from .pipeline.cache import CacheStats
from .wire import protocol

log = logging.getLogger(__name__)

WINDOW = 256  # answers the percentiles and tokens/s are computed over


@dataclass(frozen=True)
class _Answer:
    ttft_ms: float
    total_ms: float
    decode_tokens: int
    decode_s: float


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..100) of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n * q / 100), at least 1
    return ordered[int(rank) - 1]


def rss_bytes() -> int | None:
    """Resident memory of this process: /proc/self/statm, else the peak from getrusage."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    try:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    except (OSError, ValueError):
        return None
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


class Metrics:
    """Thread-safe request counters, recent latencies and connection state."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._started = clock()
        self._lock = threading.Lock()
        self._internal_in_a_row = 0  # requests ended ``internal`` since the last answer
        self._received = self._answered = self._errored = self._deduplicated = 0
        self._errors: Counter[str] = Counter()
        self._recent: deque[_Answer] = deque(maxlen=WINDOW)
        self._queue_depth: Callable[[], int] = lambda: 0  # read at each snapshot
        self._busy = False
        self._connected = False
        self._reconnects = 0
        self._answers_refused = 0
        self._totals = Totals()  # GET /metrics (edgevlm.frontdoors.http.prometheus)

    def received(self) -> None:
        """A request message was taken; it is in progress until :meth:`finished`."""
        with self._lock:
            self._received += 1

    def finished(self, error_type: str | None, metrics: protocol.Metrics | None = None,
                 completion_tokens: int = 0, *, prompt_tokens: int = 0,
                 finish_reason: str = "stop") -> None:
        """A request ended: answered (``error_type`` None) or errored with that wire type.

        A request finished without :meth:`received` is counted as received too, so the
        invariant holds even if a caller forgets.
        """
        with self._lock:
            if self._answered + self._errored >= self._received:
                log.debug("finished() without received(); counting it as received")
                self._received += 1
            if error_type is not None:
                self._errored += 1
                self._errors[error_type] += 1
                if error_type == "internal":
                    self._internal_in_a_row += 1
                return
            self._answered += 1
            self._internal_in_a_row = 0
            if metrics is not None:
                decode_tokens = max(completion_tokens - 1, 0)
                decode_s = (decode_tokens * metrics.tpot_ms if metrics.tpot_ms > 0
                            else max(metrics.total_ms - metrics.ttft_ms, 0.0)) / 1000
                self._recent.append(_Answer(metrics.ttft_ms, metrics.total_ms,
                                            decode_tokens, decode_s))
                self._totals.answered(metrics.ttft_ms, metrics.tpot_ms, metrics.total_ms,
                                      prompt_tokens, completion_tokens, finish_reason)

    def deduplicated(self) -> None:
        """A repeated request was answered again from memory (not counted as received)."""
        with self._lock:
            self._deduplicated += 1

    def failures_in_a_row(self) -> int:
        """Requests that ended with an ``internal`` error since the last answer (other errors
        neither count nor reset it): a failing engine, for :mod:`edgevlm.liveness`."""
        with self._lock:
            return self._internal_in_a_row

    def watch_queue(self, depth: Callable[[], int]) -> None:
        """Read the queue depth from ``depth`` (e.g. ``len`` of the job queue) at each
        snapshot: a gauge that is read, never pushed, cannot be left stale by a thread that
        changed the queue and has not yet reported it."""
        self._queue_depth = depth

    def set_busy(self, busy: bool) -> None:
        with self._lock:
            self._busy = busy

    def reconnected(self) -> None:
        with self._lock:
            self._reconnects += 1

    def answer_refused(self) -> None:
        """The broker refused an answer (PUBACK reason code >= 0x80, e.g. its ACL)."""
        with self._lock:
            self._answers_refused += 1

    def set_connected(self, connected: bool) -> None:
        with self._lock:
            self._connected = connected

    def totals(self) -> Totals:
        """A copy of the cumulative histograms and token counters."""
        with self._lock:
            return self._totals.copy()

    @property
    def busy(self) -> bool:
        with self._lock:
            return self._busy

    def snapshot(self, cache: CacheStats | None = None) -> dict[str, Any]:
        """The ``bridge/health`` JSON document (see docs/configuration.md for the schema)."""
        queue_depth = max(self._queue_depth(), 0)  # the queue's own lock, outside ours
        with self._lock:
            received, answered, errored = self._received, self._answered, self._errored
            errors = dict(sorted(self._errors.items()))
            recent = list(self._recent)
            state = (queue_depth, self._busy, self._connected, self._reconnects,
                     self._deduplicated)
            answers_refused = self._answers_refused
            uptime = self._clock() - self._started
        queue_depth, busy, connected, reconnects, deduplicated = state
        ttft = [a.ttft_ms for a in recent]
        total = [a.total_ms for a in recent]
        decode_s = sum(a.decode_s for a in recent)
        tokens_per_s = sum(a.decode_tokens for a in recent) / decode_s if decode_s > 0 else None
        return {
            "uptime_s": round(uptime, 1),
            "rss_bytes": rss_bytes(),
            "busy": busy,
            "queue_depth": queue_depth,
            "requests": {"received": received, "answered": answered, "errored": errored,
                         "in_progress": received - answered - errored,
                         "deduplicated": deduplicated, "errors_by_type": errors},
            "latency_ms": {
                "ttft": {"p50": _round(percentile(ttft, 50)),
                         "p95": _round(percentile(ttft, 95))},
                "total": {"p50": _round(percentile(total, 50)),
                          "p95": _round(percentile(total, 95))},
            },
            "tokens_per_s": _round(tokens_per_s),
            "cache": _cache(cache),
            "mqtt": {"connected": connected, "reconnects": reconnects,
                     "answers_refused": answers_refused},
        }


def _cache(stats: CacheStats | None) -> dict[str, Any]:
    if stats is None:
        return {"hits": 0, "misses": 0, "hit_rate": None, "bytes": 0, "entries": 0}
    lookups = stats.hits + stats.misses
    return {"hits": stats.hits, "misses": stats.misses,
            "hit_rate": round(stats.hit_rate, 4) if lookups else None,
            "bytes": stats.bytes, "entries": stats.entries}
