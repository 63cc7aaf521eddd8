"""Log lines for refused requests, a few per interval: a flood must not flood the log.

Every refusal is answered on MQTT and counted in ``bridge/health`` (``errors_by_type``). The
log shows the first ``burst`` refusals of each ``interval_s`` one by one, and the rest as one
summary line with counts by error type, written with the first refusal after the interval
(a line per refusal at INFO cost the network thread more than answering it, and filled the
journal at thousands of lines a second).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ...wire.errors import WireError


class RefusalLog:
    """Rate-limited INFO lines for refused requests (thread-safe)."""

    def __init__(self, logger: logging.Logger, burst: int = 10, interval_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.log = logger
        self.burst = burst
        self.interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._window_end = float("-inf")
        self._logged = 0
        self._suppressed: dict[str, int] = {}

    def refused(self, request_id: str | None, err: WireError) -> None:
        if not self.log.isEnabledFor(logging.INFO):
            return
        with self._lock:
            now = self._clock()
            if now >= self._window_end:
                self._summarise()
                self._window_end = now + self.interval_s
                self._logged = 0
            if self._logged >= self.burst:
                self._suppressed[err.type] = self._suppressed.get(err.type, 0) + 1
                return
            self._logged += 1
        self.log.info("refused request %s: %s: %s", request_id, err.type, err.message)

    def _summarise(self) -> None:
        if not self._suppressed:
            return
        counts = ", ".join(f"{kind} {n}" for kind, n in sorted(self._suppressed.items()))
        self.log.info("refused %d more requests within %.0f s (not logged one by one; "
                      "bridge/health counts them): %s", sum(self._suppressed.values()),
                      self.interval_s, counts)
        self._suppressed = {}
