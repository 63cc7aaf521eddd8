"""Answers out, acks back: publish now, acknowledge the request once the broker confirmed.

An answer is published at once from the calling thread (the worker, or the network thread for
answers that need no work). The request message(s) are acknowledged (``manual_ack``) only
once the broker confirmed every copy of the answer (PUBACK), across reconnects. If the process
dies before that, the broker redelivers the request and the dedupe memory answers it again.

Who waits for the confirmation: for answers published on the network thread (refusals,
answers from memory: a flood of bad requests is all of this kind) the network thread itself,
in paho's ``on_publish``, so each request costs no thread hand-over; for answers from other
threads (the worker) a small ack thread.

A confirmation with a reason code >= 0x80 (MQTT v5: the broker refused the message, e.g. its
ACL does not let the daemon write the reply topic) is a refused answer: logged as such (never
as "answered") and counted (``bridge/health`` ``mqtt.answers_refused``); the request is
acknowledged all the same, as sending it again would be refused again.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import paho.mqtt.client as paho
from paho.mqtt.properties import Properties

from ...wire.errors import PayloadTooLarge
from ...wire.protocol import Response, StreamChunk
from .client import Incoming, MqttLink, PacketTooLarge, wait_confirmed
from .fast_properties import publish_properties

if TYPE_CHECKING:
    from ...metrics import Metrics

log = logging.getLogger(__name__)

REFUSALS_KEPT = 1024          # refused PUBACKs remembered until their answer is settled
REFUSAL_LOG_BURST = 10        # refused answers logged one by one per REFUSAL_LOG_INTERVAL_S
REFUSAL_LOG_INTERVAL_S = 10.0


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
    """A received message to acknowledge: its packet id and QoS, and the connection it came
    on (None: the replier's own; the shared pool has a connection of its own)."""

    mid: int
    qos: int
    link: MqttLink | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, msg: Incoming) -> Ack:
        return cls(msg.mid, msg.qos, msg.link)


@dataclass
class _Sent:
    """The copies of one answer: to check for refusals once the broker confirmed them."""

    request_id: str | None
    copies: list[tuple[int, str]]     # (mid, topic)
    since: float                      # time.monotonic() before the first copy was published
    on_delivered: Callable[[], None] | None = None


@dataclass
class _Pending:
    infos: list[paho.MQTTMessageInfo]
    acks: list[Ack]
    on_confirmed: Callable[[], None] | None
    since: float = field(default_factory=time.monotonic)
    sent: _Sent | None = None


@dataclass
class _Unconfirmed:
    mids: set[int]     # answer copies the broker has not confirmed yet
    acks: list[Ack]
    since: float
    sent: _Sent | None = None


class _NetworkThreadAcks:
    """Acks of answers published on the network thread, settled there on each PUBACK.

    Only the network thread touches the table: an answer is registered right after it is
    published (before any PUBACK can be read), and confirmed from paho's ``on_publish``. paho
    never reuses the id of a message still waiting for its PUBACK."""

    def __init__(self, ack: Callable[[Ack], None], timeout_s: float,
                 settled: Callable[[_Sent], None] | None = None) -> None:
        self._ack = ack
        self._settled = settled
        self.timeout_s = timeout_s
        self._by_mid: dict[int, _Unconfirmed] = {}
        self.open = 0   # entries still waiting (read from other threads: an int is atomic)

    def track(self, infos: Sequence[paho.MQTTMessageInfo], acks: Sequence[Ack],
              sent: _Sent | None = None) -> None:
        now = time.monotonic()
        self._expire(now)
        mids = {info.mid for info in infos if not info.is_published()}
        if not mids:
            self._settle(sent, acks)
            return
        entry = _Unconfirmed(mids, list(acks), now, sent)
        for mid in mids:
            self._by_mid[mid] = entry
        self.open += 1

    def oldest(self) -> float | None:
        """When the oldest answer still waiting was published (``time.monotonic()``)."""
        try:
            return next(iter(self._by_mid.values())).since if self._by_mid else None
        except (StopIteration, RuntimeError):  # changed under us: ask again next time
            return None

    def confirmed(self, mid: int) -> None:
        entry = self._by_mid.pop(mid, None)
        if entry is None:
            return
        entry.mids.discard(mid)
        if not entry.mids:
            self.open -= 1
            self._settle(entry.sent, entry.acks)

    def _settle(self, sent: _Sent | None, acks: Sequence[Ack]) -> None:
        if sent is not None and self._settled is not None:
            self._settled(sent)
        for ack in acks:
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

    def __init__(self, link: MqttLink, confirm_timeout_s: float = 600.0,
                 metrics: Metrics | None = None) -> None:
        self.link = link
        self.confirm_timeout_s = confirm_timeout_s
        self.metrics = metrics
        self._pending: queue.Queue[_Pending | None] = queue.Queue()
        self._on_network_thread = _NetworkThreadAcks(self._ack, confirm_timeout_s,
                                                     self._check_refused)
        self._refusals: OrderedDict[int, tuple[float, str]] = OrderedDict()  # mid -> (t, why)
        self._refusals_lock = threading.Lock()
        self._refusal_log_window = (0.0, 0)   # (start, refused answers logged in it)
        link.on_publish_refused = self._on_refused
        link.set_on_published(self._on_network_thread.confirmed)
        self._stopping = threading.Event()
        self._settling_since: float | None = None  # the answer the ack thread waits for
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

    def unconfirmed_s(self, now: float | None = None) -> float:
        """How long the oldest answer has waited for the broker's confirmation (0: none
        waits). Long: the connection is gone without the daemon knowing yet."""
        now = time.monotonic() if now is None else now
        times = [t for t in (self._settling_since, self._on_network_thread.oldest())
                 if t is not None]
        return max(now - min(times), 0.0) if times else 0.0

    @property
    def outstanding(self) -> int:
        """Answers whose requests are not acknowledged yet."""
        return self._pending.unfinished_tasks + self._on_network_thread.open

    # ------------------------------------------------------------------ sending

    def answer(self, routes: Sequence[Route], response: Response, acks: Sequence[Ack] = (),
               on_confirmed: Callable[[], None] | None = None,
               on_delivered: Callable[[], None] | None = None) -> None:
        """Publish ``response`` to every route; ack ``acks`` once all copies are confirmed;
        then ``on_delivered`` unless the broker refused a copy."""
        self.send(routes, response.to_json(), response.id, acks, on_confirmed, on_delivered)

    def send(self, routes: Sequence[Route], payload: bytes, request_id: str | None,
             acks: Sequence[Ack] = (), on_confirmed: Callable[[], None] | None = None,
             on_delivered: Callable[[], None] | None = None) -> None:
        """:meth:`answer` with the answer already serialised (e.g. by
        :func:`edgevlm.wire.protocol.error_answer_json`)."""
        sent = _Sent(request_id, [], time.monotonic(), on_delivered)
        infos: list[paho.MQTTMessageInfo] = []
        for route in routes:
            info = self._publish_answer(route, payload, request_id)
            if info is not None:
                infos.append(info)
                sent.copies.append((info.mid, route.topic))
        if on_confirmed is None and on_delivered is None and self.link.on_network_thread():
            self._on_network_thread.track(infos, acks, sent)
        else:
            self._pending.put(_Pending(infos, list(acks), on_confirmed, sent=sent))

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

    # ------------------------------------------------------------------ refused answers

    def _on_refused(self, mid: int, reason: Any) -> None:
        """A PUBACK with a reason code >= 0x80 (network thread), for any of our publishes:
        kept until the answer it belongs to (if any) is settled."""
        with self._refusals_lock:
            self._refusals[mid] = (time.monotonic(), str(reason))
            self._refusals.move_to_end(mid)
            while len(self._refusals) > REFUSALS_KEPT:
                self._refusals.popitem(last=False)

    def _check_refused(self, sent: _Sent) -> None:
        """Once every copy of an answer is confirmed: log and count the refused ones, else
        call ``on_delivered``. A refusal recorded before the answer was published belongs to
        an earlier message with the same packet id."""
        refused: list[tuple[str, str]] = []
        with self._refusals_lock:
            for mid, topic in sent.copies:
                found = self._refusals.pop(mid, None)
                if found is not None and found[0] >= sent.since:
                    refused.append((topic, found[1]))
        if not refused:
            if sent.on_delivered is not None:
                sent.on_delivered()
            return
        for topic, reason in refused:
            if self.metrics is not None:
                self.metrics.answer_refused()
            self._log_refused(sent.request_id, topic, reason)

    def _log_refused(self, request_id: str | None, topic: str, reason: str) -> None:
        now = time.monotonic()
        start, logged = self._refusal_log_window
        if now - start > REFUSAL_LOG_INTERVAL_S:
            start, logged = now, 0
        self._refusal_log_window = (start, logged + 1)
        if logged < REFUSAL_LOG_BURST:
            log.warning("the broker refused the answer to request %s on %s (%s): not "
                        "delivered; the request is acknowledged (bridge/health counts refused "
                        "answers in mqtt.answers_refused; check that the broker's ACL lets the "
                        "daemon write there)", request_id, topic[:200], reason)

    def ack_now(self, acks: Sequence[Ack]) -> None:
        for ack in acks:
            self._ack(ack)

    def _ack(self, ack: Ack) -> None:
        try:
            (ack.link or self.link).ack(ack.mid, ack.qos)
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
        if item.infos:
            self._settling_since = item.since
        try:
            self._settle_waiting(item)
        finally:
            self._settling_since = None

    def _settle_waiting(self, item: _Pending) -> None:
        for info in item.infos:
            while not wait_confirmed(info, 0.25):
                if self._stopping.is_set():
                    return  # unacked: the broker redelivers the request next time
                if time.monotonic() - item.since > self.confirm_timeout_s:
                    log.warning("an answer was not confirmed by the broker within %.0f s; "
                                "its request stays unacknowledged", self.confirm_timeout_s)
                    return
        if item.sent is not None:
            self._check_refused(item.sent)
        for ack in item.acks:
            self._ack(ack)
        if item.on_confirmed is not None:
            item.on_confirmed()
