"""The daemon's side of the shared pool (:mod:`edgevlm.frontdoors.mqtt.pool`).

The pool member (its own connection, its own thread) asks :class:`PoolMembership` whether the
board may be in the pool now (:meth:`PoolMembership.unfit`), tells it when the board left
(:meth:`PoolMembership.left`: the pooled requests still waiting here hear ``busy``), and has it
make a round trip on the node's own connection before joining
(:meth:`PoolMembership.probe_node_link`). ``bridge/pool`` is published on the node's connection.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from .frontdoors.mqtt.bridge import Bridge
from .frontdoors.mqtt.client import MqttLink
from .frontdoors.mqtt.messages import wait_confirmed
from .frontdoors.mqtt.pool import pool_state
from .frontdoors.mqtt.replies import Replier
from .frontdoors.mqtt.topics import Topics
from .liveness import Liveness
from .pipeline.jobs import Job, RequestJob
from .pipeline.worker import Worker
from .wire.errors import Busy

log = logging.getLogger(__name__)

# An answer unconfirmed this long: the node's connection is silently gone (a cut network the
# 60 s keepalive has not noticed yet); the board leaves the shared pool until answers flow.
POOL_UNCONFIRMED_S = 10.0


class PoolMembership:
    """Why the board may not be in the shared pool, what leaving it does, and ``bridge/pool``.

    ``group`` is ``mqtt.shared_group`` (None or empty: the pool is off); ``stopping`` and
    ``online`` are the service's own state.
    """

    def __init__(self, group: str | None, topics: Topics, link: MqttLink, replier: Replier,
                 worker: Worker, bridge: Bridge, liveness: Liveness, *,
                 stopping: Callable[[], bool], online: threading.Event) -> None:
        self.group = group
        self.topics = topics
        self.link = link
        self.replier = replier
        self.worker = worker
        self.bridge = bridge
        self.liveness = liveness
        self._stopping = stopping
        self._online = online
        self._probe: Any = None  # the last round trip's MQTTMessageInfo

    def unfit(self) -> str | None:
        """Why the board must not be in the shared pool now (None: it should be)."""
        if self._stopping():
            return "stopped"
        if not self._online.is_set():
            return "not online yet"
        if not self.link.ready:
            return "the node's own connection is down"
        if not self.liveness.serving:
            return f"cannot serve: {self.liveness.problem}"
        waited = self.replier.unconfirmed_s()
        if waited > POOL_UNCONFIRMED_S:
            return (f"the broker has not confirmed an answer for {waited:.0f} s (the node's "
                    "connection is gone, not yet noticed)")
        return None

    def left(self, reason: str) -> None:
        """Pool thread: the pooled requests still waiting here get ``busy`` (their clients
        send them again, to a board that serves); the running one finishes."""
        if reason == "stopped":
            return  # the worker's shutdown answers every waiting request
        refused = self.worker.refuse_waiting(is_pooled, Busy(
            f"this board left the shared pool ({reason}); send the request again"))
        if refused:
            log.info("%d pooled request(s) waiting here answered busy", refused)
        try:
            self.bridge.publish_health()
        except Exception:
            log.exception("publishing health failed")

    def publish_off(self) -> None:
        """``bridge/pool`` of a board without a pool (the pool's own thread says the rest)."""
        if not self.group:
            self.publish_state(pool_state(None, False, "the pool is off "
                                          "(mqtt.shared_group: null)"))

    def probe_node_link(self) -> bool:
        """Pool thread: a round trip on the node's own connection (``bridge/pool`` says
        ``joining``), confirmed within 3 s."""
        info = self._probe
        if info is None or info.is_published():  # else wait on the one still in flight
            info = self.link.publish(self.topics.pool, pool_state(self.group, False, "joining"),
                                     qos=1, retain=True)
            self._probe = info
        return wait_confirmed(info, 3.0)

    def publish_state(self, payload: bytes) -> None:
        self.link.publish(self.topics.pool, payload, qos=1, retain=True)


def is_pooled(job: Job) -> bool:
    return isinstance(job, RequestJob) and job.pooled
