"""Whether the daemon can serve: the rule behind ``bridge/state``, ``bridge/health`` and the
systemd watchdog.

Threads that are alive do not make a daemon that answers (issue 20: a request paho could not
decode dropped the connection, the broker redelivered it, and the board reconnected six times
in seven seconds without answering while ``bridge/state`` said ``online``). The daemon cannot
serve while any of these holds:

- **a reconnect loop**: the connection was lost ``losses`` times (3) within
  ``loss_window_s`` (60 s). Only connections the broker had accepted count: attempts that
  fail while the broker is away are an outage, which a restart of the daemon would not end.
  It ends once a connection has held for ``stable_s`` (10 s).
- **a stuck worker**: one job has run longer than ``stuck_s`` (600 s; a 4,096-token answer
  at 10 tokens/s takes 410 s). It ends when the job ends.
- **a failing engine**: the last ``failures`` (5) requests the worker ran all ended with an
  ``internal`` error, none answered in between. It ends with the next answer.

Not serving turns ``bridge/state`` to ``offline`` (what Home Assistant's availability knows:
``payload_not_available``; another word would leave the entities available), puts
``serving: false`` and the ``problem`` into ``bridge/health``, and stops the ``WATCHDOG=1``
pings, so that systemd restarts the daemon after ``WatchdogSec``; a daemon that serves again
before that publishes ``online`` and pings again. :meth:`Liveness.add_listener` is the hook
for whatever else should follow (the shared pool's subscription).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LivenessPolicy:
    losses: int = 3               # connection losses ...
    loss_window_s: float = 60.0   # ... within this long: a reconnect loop
    stable_s: float = 10.0        # a connection held this long ends the loop
    stuck_s: float = 600.0        # one job running longer: the worker is stuck
    failures: int = 5             # requests in a row ending ``internal``: the engine fails
    check_interval_s: float = 1.0


Listener = Callable[[bool, "str | None"], None]


class Liveness:
    """The serving state, from connection events and two probes read every second.

    ``job_started()`` is the ``time.monotonic()`` start of the worker's running job (None when
    idle); ``failures_in_a_row()`` the requests that ended ``internal`` since the last answer.
    Thread-safe; the rule is evaluated by :meth:`check`, which the liveness thread
    (:meth:`start`) runs every ``check_interval_s`` and at once after a connection event, so
    listeners run there, one change at a time, never on paho's network thread.
    """

    def __init__(self, policy: LivenessPolicy | None = None, *,
                 job_started: Callable[[], float | None] = lambda: None,
                 failures_in_a_row: Callable[[], int] = lambda: 0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy or LivenessPolicy()
        self._job_started = job_started
        self._failures_in_a_row = failures_in_a_row
        self._clock = clock
        self._lock = threading.Lock()
        self._notify_lock = threading.Lock()  # one check at a time: listeners see every change
        # in order
        self._losses: deque[float] = deque()
        self._connected_at: float | None = None
        self._loop: str | None = None  # the reconnect loop's description while it lasts
        self._serving = True
        self._problem: str | None = None
        self._listeners: list[Listener] = []
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ state

    @property
    def serving(self) -> bool:
        with self._lock:
            return self._serving

    @property
    def problem(self) -> str | None:
        """Why the daemon cannot serve (None while it serves)."""
        with self._lock:
            return self._problem

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(serving, problem)`` on every change of :attr:`serving`."""
        with self._lock:
            self._listeners.append(listener)

    # ------------------------------------------------------------------ inputs

    def connection(self, connected: bool) -> None:
        """The MQTT connection came up (CONNACK) or was lost."""
        now = self._clock()
        p = self.policy
        with self._lock:
            if connected:
                self._connected_at = now
            else:
                self._connected_at = None
                self._losses.append(now)
                while self._losses and now - self._losses[0] > p.loss_window_s:
                    self._losses.popleft()
                if len(self._losses) >= p.losses:
                    self._loop = (f"reconnect loop: the connection to the broker was lost "
                                  f"{len(self._losses)} times within {p.loss_window_s:.0f} s")
        self._wake.set()  # the liveness thread checks at once

    # ------------------------------------------------------------------ the rule

    def check(self) -> bool:
        """Evaluate the rule now; tell the listeners when the answer changed."""
        with self._notify_lock:
            return self._check()

    def _check(self) -> bool:
        now = self._clock()
        p = self.policy
        started = self._job_started()
        failures = self._failures_in_a_row()
        with self._lock:
            if (self._loop is not None and self._connected_at is not None
                    and now - self._connected_at >= p.stable_s):
                self._loop = None
                self._losses.clear()
            problems = [self._loop] if self._loop is not None else []
            if started is not None and now - started > p.stuck_s:
                problems.append(f"stuck worker: one job has been running for "
                                f"{now - started:.0f} s (bound {p.stuck_s:.0f} s)")
            if failures >= p.failures:
                problems.append(f"failing engine: the last {failures} requests ended with an "
                                f"internal error")
            problem = "; ".join(problems) or None
            changed = (problem is None) != self._serving
            self._serving, self._problem = problem is None, problem
            listeners = list(self._listeners) if changed else []
        if changed:
            self._announce(problem, listeners)
        return problem is None

    def _announce(self, problem: str | None, listeners: list[Listener]) -> None:
        if problem is None:
            log.info("serving again")
        else:
            log.error("cannot serve: %s; bridge/state is offline until this ends (systemd "
                      "restarts the daemon if it lasts past WatchdogSec)", problem)
        for listener in listeners:
            try:
                listener(problem is None, problem)
            except Exception:
                log.exception("a liveness listener failed")

    # ------------------------------------------------------------------ the thread

    def start(self) -> None:
        """Check every ``check_interval_s`` on a thread of its own (the time-based parts)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="edgevlm-liveness", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout=2.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.policy.check_interval_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.check()
            except Exception:
                log.exception("the liveness check failed")
