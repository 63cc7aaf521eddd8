"""A small background loop: one daemon thread that calls a function every few seconds."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable


class PeriodicThread:
    """Calls ``tick`` every ``interval_s`` seconds on a daemon thread named ``name``, from
    :meth:`start` until :meth:`stop`. An exception of ``tick`` is logged on ``log`` with the
    message ``failure``, and the loop carries on."""

    def __init__(self, name: str, interval_s: float, tick: Callable[[], None], *,
                 log: logging.Logger, failure: str) -> None:
        self.interval_s = interval_s
        self._tick = tick
        self._log = log
        self._failure = failure
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop the loop and wait up to ``timeout_s`` for a tick under way."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=timeout_s)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._tick()
            except Exception:
                self._log.exception(self._failure)
