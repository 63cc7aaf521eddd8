"""The shared pool's own connection: a board is a member only while it can serve.

What the broker does decides the design. Measured on Mosquitto 2.0.11
(``bench/pool_redispatch.py``): a member with a *persistent* session stays in the group after
its board dies, and the broker goes on handing it its share of the requests, queued for the
session's expiry (1 h) — a pool of N boards with one dead loses 1/N of the work. A member
whose session ends with its connection (Clean Start, Session Expiry 0) leaves the group at
once when the board dies (the kernel closes the socket) or 1.5 keepalives after its network
is cut; the requests it held unacknowledged are dropped, not handed to another member (MQTT 5
§4.8.2 only says SHOULD). Hence:

- the pool subscription lives on a second connection, ``<client id>-pool``, with Clean Start,
  Session Expiry 0 and a short keepalive (``mqtt.pool_keepalive_s``, 4 s); the node's own
  topics keep their persistent session on the main connection (which drops a pool
  subscription an earlier version left in its session);
- the board joins while it is online and serving, once a round trip on its main connection
  (where its answers go) worked, and leaves with a clean DISCONNECT when it cannot serve
  (:mod:`edgevlm.liveness`), when its main connection is down or its answers go unconfirmed,
  and when it stops; a pool connection that drops is not left to paho's reconnect (after a
  cut network heals it may be back before the main one): the board joins afresh;
- retained ``<base>/<node>/bridge/pool`` (published on the main connection, after the pool
  connection subscribed or disconnected) says whether it is a member, and why not; the pool
  connection's last will says ``member: false`` (``connection lost``);
- what a dead member held is sent again by its clients: a request with ``progress_s`` hears
  ``working`` from the board that took it (:mod:`.progress`), and the client rule
  (:class:`edgevlm.ask.PoolRetry`) publishes the same bytes again after a silence.

Joining and leaving run on the pool's own thread, never on a paho network thread.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from .client import Incoming, LinkSettings, MqttLink
from .topics import VERBS, Topics

log = logging.getLogger(__name__)

RECONCILE_S = 0.5      # how often the pool thread compares membership with what it should be
PROBE_RETRY_S = 5.0    # after the node's connection failed the round trip, try again after


def pool_state(group: str | None, member: bool, reason: str | None, *, since: bool = True) -> bytes:
    """The retained ``bridge/pool`` payload."""
    body: dict[str, Any] = {"group": group, "member": member, "reason": reason}
    if since:
        body["since"] = datetime.now(UTC).isoformat(timespec="milliseconds")
    return json.dumps(body).encode()


def pool_settings(main: LinkSettings, topics: Topics, group: str, keepalive_s: int
                  ) -> LinkSettings:
    """The pool connection: the main one's broker, login and TLS; its own client id, a
    session that ends with the connection, a short keepalive and a will on ``bridge/pool``."""
    return dataclasses.replace(
        main, client_id=f"{main.client_id}-pool", keepalive=keepalive_s, clean_start=True,
        session_expiry_s=0, will_topic=topics.pool,
        will_payload=pool_state(group, False, "connection lost", since=False), will_delay_s=0)


class PoolMember:
    """Keeps the pool connection in step with ``unfit()`` (None: the board should be a
    member; else why not)."""

    def __init__(self, settings: LinkSettings, topics: Topics, group: str, *,
                 on_message: Callable[[Incoming], None], unfit: Callable[[], str | None],
                 publish_state: Callable[[bytes], None], probe: Callable[[], bool],
                 on_left: Callable[[str], None] | None = None,
                 exit_process: Callable[[int], Any] | None = None) -> None:
        self.settings = settings
        self.topics = topics
        self.group = group
        self._on_message = on_message
        self._unfit = unfit
        self._publish_state = publish_state
        self._probe = probe
        self._lost = False          # the pool connection dropped: leave, and join afresh
        self._next_try = 0.0        # time.monotonic() before which no join is tried
        self._on_left = on_left
        self._exit_process = exit_process
        self._link: MqttLink | None = None
        self.reason: str | None = "not joined yet"  # why the board is not a member (None: it is)
        self.joins = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="edgevlm-pool", daemon=True)

    @property
    def member(self) -> bool:
        """In the group: the pool connection is up and its subscription confirmed."""
        link = self._link
        return link is not None and link.ready

    def status(self) -> dict[str, Any]:
        """For ``bridge/health``."""
        return {"group": self.group, "member": self.member,
                "reason": None if self.member else (self.reason or "connecting"),
                "joins": self.joins}

    def start(self) -> None:
        self._thread.start()

    def poke(self) -> None:
        """Something ``unfit()`` reads has changed: reconcile now."""
        self._wake.set()

    def stop(self) -> None:
        """Leave the pool (``stopped``) and end the pool thread."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)
        with self._lock:
            self._leave("stopped")

    # ------------------------------------------------------------------ the pool thread

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(RECONCILE_S)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                with self._lock:
                    self._reconcile()
            except Exception:  # never lose the thread: the next round tries again
                log.exception("the shared pool's membership could not be updated")

    def _reconcile(self) -> None:
        why = self._unfit()
        if self._link is not None:
            if why is not None:
                self._leave(why)
            elif self._lost:  # paho would reconnect it at once, maybe over a dead network
                self._leave("connection lost", refuse_waiting=False)
            return
        if why is not None or time.monotonic() < self._next_try:
            return
        # Answers leave by the node's own connection: join only once a round trip on it
        # worked (after a cut network heals, the pool's connection may be back before it)
        if not self._probe():
            self.reason = "the node's own connection does not confirm messages"
            self._next_try = time.monotonic() + PROBE_RETRY_S
            log.warning("not joining the shared pool %r yet: %s", self.group, self.reason)
            return
        self._join()

    def _join(self) -> None:
        link = MqttLink(self.settings, on_message=self._on_message, on_ready=self._on_ready,
                        on_connection=self._on_connection,
                        exit_process=self._exit_process or os._exit, role="pool")
        link.set_subscriptions([self.topics.pool_subscription(self.group, verb)
                                for verb in VERBS])
        self._link = link
        self._lost = False
        self.reason = None
        self.joins += 1
        link.start()
        log.info("joining the shared pool %r (its own connection %s, keepalive %d s)",
                 self.group, self.settings.client_id, self.settings.keepalive)

    def _on_ready(self, session_present: bool) -> None:
        """Pool connection, network thread: subscribed; say so (retained)."""
        if self._link is None:
            return
        try:
            self._publish_state(pool_state(self.group, True, None))
            log.info("in the shared pool %r", self.group)
        except Exception:
            log.exception("publishing the pool membership failed")

    def _on_connection(self, connected: bool) -> None:
        """Pool connection, network thread."""
        if not connected:
            self._lost = True
            self.poke()

    def _leave(self, reason: str, refuse_waiting: bool = True) -> None:
        """Disconnect the pool connection; ``refuse_waiting``: the pooled requests waiting
        here are answered ``busy`` (``on_left``), as this board cannot serve them soon."""
        link, self._link = self._link, None
        self.reason = reason
        if link is None:
            return
        log.log(logging.INFO if reason == "stopped" else logging.WARNING,
                "leaving the shared pool %r: %s", self.group, reason)
        link.stop()  # a clean DISCONNECT: the session, and with it the membership, ends
        try:  # then say so: nothing pooled arrives here after ``member: false``
            self._publish_state(pool_state(self.group, False, reason))
        except Exception:
            log.warning("could not publish leaving the pool", exc_info=True)
        if self._on_left is not None and refuse_waiting:
            try:
                self._on_left(reason)
            except Exception:
                log.exception("handling leaving the pool failed")
