"""Answers out, acks back: publish now, acknowledge the request once the broker confirmed.

An answer is published at once from the calling thread (the worker, or the network thread for
answers that need no work). The request message(s) are acknowledged (``manual_ack``) only
once the broker confirmed every copy of the answer (PUBACK), across reconnects. If the process
dies before that, the broker redelivers the request and the dedupe memory answers it again.

Who waits for the confirmation: for answers published on the network thread (refusals,
answers from memory: a flood of bad requests is all of this kind) the network thread itself,
in paho's ``on_publish``, so each request costs no thread hand-over; for answers from other
threads (the worker) a small ack thread.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import paho.mqtt.client as paho
from paho.mqtt.properties import Properties

from ..errors import PayloadTooLarge
from ..protocol import Response, StreamChunk
from .client import MqttLink, PacketTooLarge, wait_confirmed
from .fast_properties import publish_properties

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Route:
    """Where one answer goes: a topic, and the v5 Correlation Data to send with it."""

    topic: str
    correlation: bytes | None = None

    def properties(self) -> Properties | None:
        if self.correlation is None:
            return None
        return publish_properties(self.correlation)


@dataclass(frozen=True)
class Ack:
    """A received message to acknowledge (its packet id and QoS)."""

    mid: int
    qos: int


@dataclass
class _Pending:
    infos: list[paho.MQTTMessageInfo]
    acks: list[Ack]
    on_confirmed: Callable[[], None] | None
    since: float = field(default_factory=time.monotonic)


@dataclass
class _Unconfirmed:
    mids: set[int]     # answer copies the broker has not confirmed yet
    acks: list[Ack]
    since: float


class _NetworkThreadAcks:
    """Acks of answers published on the network thread, settled there on each PUBACK.

    Only the network thread touches the table: an answer is registered right after it is
    published (before any PUBACK can be read), and confirmed from paho's ``on_publish``. paho
    never reuses the id of a message still waiting for its PUBACK."""

    def __init__(self, ack: Callable[[Ack], None], timeout_s: float) -> None:
        self._ack = ack
        self.timeout_s = timeout_s
        self._by_mid: dict[int, _Unconfirmed] = {}
        self.open = 0   # entries still waiting (read from other threads: an int is atomic)

    def track(self, infos: Sequence[paho.MQTTMessageInfo], acks: Sequence[Ack]) -> None:
        now = time.monotonic()
        self._expire(now)
        mids = {info.mid for info in infos if not info.is_published()}
        if not mids:
            for ack in acks:
                self._ack(ack)
            return
        entry = _Unconfirmed(mids, list(acks), now)
        for mid in mids:
            self._by_mid[mid] = entry
        self.open += 1

    def confirmed(self, mid: int) -> None:
        entry = self._by_mid.pop(mid, None)
        if entry is None:
            return
        entry.mids.discard(mid)
        if not entry.mids:
            self.open -= 1
            for ack in entry.acks:
                self._ack(ack)

    def _expire(self, now: float) -> None:
        """Give up on the oldest entries after ``timeout_s`` (their requests stay unacked)."""
        while self._by_mid:
            entry = next(iter(self._by_mid.values()))
            if now - entry.since <= self.timeout_s:
                return
            for other in entry.mids:
                self._by_mid.pop(other, None)
            entry.mids.clear()
            self.open -= 1
            log.warning("an answer was not confirmed by the broker within %.0f s; its "
                        "request stays unacknowledged", self.timeout_s)


class Replier:
    """Publishes answers and acks their requests after the broker confirmed the answers."""

    def __init__(self, link: MqttLink, confirm_timeout_s: float = 600.0) -> None:
        self.link = link
        self.confirm_timeout_s = confirm_timeout_s
        self._pending: queue.Queue[_Pending | None] = queue.Queue()
        self._on_network_thread = _NetworkThreadAcks(self._ack, confirm_timeout_s)
        link.set_on_published(self._on_network_thread.confirmed)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="edgevlm-acks", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, drain_s: float = 5.0) -> None:
        """Wait up to ``drain_s`` for outstanding confirmations, then stop the ack thread."""
        deadline = time.monotonic() + drain_s
        while self.outstanding and time.monotonic() < deadline:
            time.sleep(0.02)
        self._stopping.set()
        self._pending.put(None)
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)

    @property
    def outstanding(self) -> int:
        """Answers whose requests are not acknowledged yet."""
        return self._pending.unfinished_tasks + self._on_network_thread.open

    # ------------------------------------------------------------------ sending

    def answer(self, routes: Sequence[Route], response: Response, acks: Sequence[Ack] = (),
               on_confirmed: Callable[[], None] | None = None) -> None:
        """Publish ``response`` to every route; ack ``acks`` once all copies are confirmed."""
        self.send(routes, response.to_json(), response.id, acks, on_confirmed)

    def send(self, routes: Sequence[Route], payload: bytes, request_id: str | None,
             acks: Sequence[Ack] = (), on_confirmed: Callable[[], None] | None = None) -> None:
        """:meth:`answer` with the answer already serialised (e.g. by
        :func:`edgevlm.protocol.error_answer_json`)."""
        infos: list[paho.MQTTMessageInfo] = []
        for route in routes:
            info = self._publish_answer(route, payload, request_id)
            if info is not None:
                infos.append(info)
        if on_confirmed is None and self.link.on_network_thread():
            self._on_network_thread.track(infos, acks)
        else:
            self._pending.put(_Pending(infos, list(acks), on_confirmed))

    def _publish_answer(self, route: Route, payload: bytes, request_id: str | None
                        ) -> paho.MQTTMessageInfo | None:
        props = route.properties()
        try:
            return self.link.publish(route.topic, payload, qos=1, properties=props)
        except PacketTooLarge as exc:
            log.warning("answer to %s not sent: %s", request_id, exc)
            err = PayloadTooLarge(f"the answer is larger than the broker's maximum packet size "
                                  f"({self.link.max_packet_size} bytes); ask for fewer tokens")
            fallback = Response.fail(request_id, err.code, "payload_too_large", err.message)
            try:
                return self.link.publish(route.topic, fallback.to_json(), qos=1,
                                         properties=props)
            except Exception:
                log.exception("cannot send the error answer to %s either", route.topic)
                return None
        except Exception:
            log.exception("publishing the answer to %s on %s failed", request_id, route.topic)
            return None

    def after_confirmed(self, infos: Sequence[paho.MQTTMessageInfo],
                        callback: Callable[[], None]) -> None:
        """Call ``callback`` (on the ack thread) once the broker confirmed ``infos``."""
        self._pending.put(_Pending(list(infos), [], callback))

    def ack_after_earlier_answers(self, acks: Sequence[Ack]) -> None:
        """Acknowledge ``acks`` once every answer published before from the worker is
        confirmed (the ack thread settles in order)."""
        self._pending.put(_Pending([], list(acks), None))

    def chunk(self, routes: Sequence[Route], chunk: StreamChunk) -> None:
        """A streamed partial answer: QoS 1 (ordered before the final answer), not tracked."""
        payload = chunk.model_dump_json(exclude_none=True).encode()
        for route in routes:
            try:
                self.link.publish(route.topic, payload, qos=1, properties=route.properties())
            except Exception:
                log.warning("stream chunk %d to %s not sent", chunk.seq, route.topic,
                            exc_info=True)

    def publish(self, topic: str, payload: bytes | str, retain: bool = False, qos: int = 1
                ) -> bool:
        """Fire-and-forget publish of a state/event message; False if it could not be sent."""
        try:
            self.link.publish(topic, payload, qos=qos, retain=retain)
            return True
        except Exception as exc:
            log.warning("not published to %s: %s", topic, exc)
            return False

    def ack_now(self, acks: Sequence[Ack]) -> None:
        for ack in acks:
            self._ack(ack)

    def _ack(self, ack: Ack) -> None:
        try:
            self.link.ack(ack.mid, ack.qos)
        except Exception:
            log.warning("ack of message %d failed", ack.mid, exc_info=True)

    # ------------------------------------------------------------------ the ack thread

    def _run(self) -> None:
        while True:
            item = self._pending.get()
            try:
                if item is None:
                    return
                self._settle(item)
            except Exception:
                log.exception("error while acknowledging a request")
            finally:
                self._pending.task_done()

    def _settle(self, item: _Pending) -> None:
        for info in item.infos:
            while not wait_confirmed(info, 0.25):
                if self._stopping.is_set():
                    return  # unacked: the broker redelivers the request next time
                if time.monotonic() - item.since > self.confirm_timeout_s:
                    log.warning("an answer was not confirmed by the broker within %.0f s; "
                                "its request stays unacknowledged", self.confirm_timeout_s)
                    return
        for ack in item.acks:
            self._ack(ack)
        if item.on_confirmed is not None:
            item.on_confirmed()
