"""Admission of request messages, on the network thread: cheap, and it never raises.

In order: the reply route (v5 Response Topic + Correlation Data, else
``<base>/<node>/response/<verb>``; a Response Topic outside ``mqtt.reply_prefix`` or on
anything the daemon publishes or subscribes to is refused, answered on the default route),
then :func:`edgevlm.pipeline.admission.admit` (size, schema, per-modality limits, token budget from
image headers — no media is decoded here; an ``image_ref`` must have been given to this
requester), dedupe by request id, payload and route (an id reused for other bytes is
``id_reused``), the deadline (v5 Message Expiry, ``deadline_ms``, else
``limits.default_deadline_ms``), and queue capacity (``busy``). Everything heavy runs on the
worker. Requests arrive on two connections (the node's and the shared pool's,
:mod:`.pool`); admission keeps no state between messages, so both network threads admit at once.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Callable

from ...metrics import Metrics
from ...pipeline.admission import RequestSide, side_for
from ...pipeline.image_refs import PROCESS_REFS, ImageRefs
from ...pipeline.jobs import JobQueue, RequestJob
from ...verbs import get_verb
from ...wire.errors import (
    Busy,
    EdgevlmError,
    IdReused,
    InvalidRequest,
    PayloadTooLarge,
    wire_error,
)
from ...wire.protocol import error_answer_json, request_id_of
from .client import Incoming
from .dedupe import DedupeMemory, RequestKey, digest
from .delivery import MqttReply
from .progress import ProgressBeacon
from .refusals import RefusalLog
from .replies import Ack, Replier, Route
from .topics import ReplyPolicy, RequestTopic, Topics

log = logging.getLogger(__name__)

_ID_NEAR_START = re.compile(rb'"(?:id|transaction)"\s*:\s*"([^"\\]{1,128})"')


def _id_near_start(payload: bytes) -> str | None:
    """The id of a payload too big to parse, if it is written near the start."""
    match = _ID_NEAR_START.search(payload[:4096])
    return match.group(1).decode("utf-8", "replace") if match else None


def dedupe_key(verb: str, request_id: str | None, payload: bytes, reply_topic: str
               ) -> RequestKey:
    """The verb, the requester's reply topic and the request id (or, without one, a hash of
    the bytes), and the payload's digest. An id names one request *of one requester*: the same
    id with other bytes on the same reply topic is refused (``id_reused``); on another reply
    topic it is another requester's request and meets nothing of this one, so a client that
    plants a predictable id can neither answer nor block its victim."""
    payload_digest = digest(payload)
    scope = digest(reply_topic.encode()).hex()[:16]
    if request_id is not None:
        return RequestKey(f"{verb}:{scope}:id:{request_id}", payload_digest)
    return RequestKey(f"{verb}:{scope}:sha:{payload_digest.hex()}", payload_digest)


MAX_REQUESTER_SIDES = 1024
REFUSAL_KEY_BYTES = 64 * 1024   # what a refused payload's key hashes (of any size)


def refusal_key(verb: str, payload: bytes) -> RequestKey:
    """The key of a request refused at admission, to know a redelivered copy of it: its
    length and a hash of its first bytes (its id may be missing or a lie)."""
    return RequestKey(f"{verb}:refused:{len(payload)}",
                      hashlib.blake2b(payload[:REFUSAL_KEY_BYTES], digest_size=16).digest())


class RequestHandler:
    """Turns request messages into queued jobs or immediate answers."""

    def __init__(self, topics: Topics, side: RequestSide, queue: JobQueue,
                 dedupe: DedupeMemory, replier: Replier, metrics: Metrics,
                 default_deadline_ms: int | None,
                 clock: Callable[[], float] = time.monotonic, *,
                 replies: ReplyPolicy | None = None, refs: ImageRefs = PROCESS_REFS) -> None:
        self.topics = topics
        self.replies = replies or ReplyPolicy.for_node(topics)
        self.refs = refs
        self.side = side
        self._sides: dict[str, RequestSide] = {}  # requester -> its side (_side_of)
        self.queue = queue
        self.dedupe = dedupe
        self.replier = replier
        self.metrics = metrics
        self.default_deadline_ms = default_deadline_ms
        self.clock = clock
        self.accepting = True
        self.refusals = RefusalLog(log)
        self.progress: ProgressBeacon | None = None  # ``working`` messages (progress_s)

    def _side_of(self, requester: str) -> RequestSide:
        """The request side of ``requester`` (its image_ref capabilities), made once per
        requester: a few hundred reply topics at most, rebuilt from scratch past that."""
        side = self._sides.get(requester)
        if side is None:
            if len(self._sides) >= MAX_REQUESTER_SIDES:
                self._sides.clear()
            side = self._sides[requester] = side_for(self.side, self.refs, requester)
        return side

    def route_for(self, msg: Incoming, verb: str) -> tuple[Route, str | None]:
        """The reply route of ``msg``, and why its own Response Topic was refused (if so)."""
        default = Route(self.topics.response(verb), msg.correlation)
        if msg.response_topic is None:
            return default, None
        why = self.replies.refusal(msg.response_topic)
        if why is not None:
            return default, (f"the response topic {msg.response_topic[:200]!r} is outside this "
                             f"daemon's reply namespace: {why}; use a topic under "
                             f"'{self.replies.prefix}' (mqtt.reply_prefix) without wildcards, "
                             f"e.g. '{self.replies.prefix}<your client id>/reply' (the answer "
                             "went to the default response topic)")
        return Route(msg.response_topic, msg.correlation), None


    def handle(self, msg: Incoming, rt: RequestTopic) -> None:
        """Admit one request message (called on the network thread; never raises)."""
        if not self.accepting:
            return  # stopping: left unacknowledged, the broker redelivers it after restart
        if msg.retain:  # a retained request would be run again on every (re)subscribe
            log.warning("ignoring a retained request on %s; publish requests without the "
                        "retain flag (clear it with an empty retained message)", msg.topic)
            self.replier.ack_now([Ack.of(msg)])
            return
        route, refused = self.route_for(msg, rt.verb)
        try:
            self._admit(msg, rt, route, refused)
        except Exception as exc:  # a bug: answer "internal", keep the network thread alive
            rid = request_id_of(msg.payload) if len(msg.payload) <= \
                self.side.limits.max_payload_bytes else None
            self._refuse(msg, rt.verb, route, rid, exc)

    def _admit(self, msg: Incoming, rt: RequestTopic, route: Route, refused: str | None
               ) -> None:
        ack = Ack.of(msg)
        requester = self.replies.requester(route.topic)
        try:
            admitted = get_verb(rt.verb).admit(msg.payload, self._side_of(requester))
        except EdgevlmError as exc:  # the id comes with it: the payload is parsed once
            rid = exc.request_id
            if rid is None and isinstance(exc, PayloadTooLarge):
                rid = _id_near_start(msg.payload)
            self._refuse(msg, rt.verb, route, rid, exc)
            return
        request = admitted.request
        if refused is not None:
            self._refuse(msg, rt.verb, route, request.id, InvalidRequest(refused))
            return
        key = dedupe_key(rt.verb, request.id, msg.payload, route.topic)
        claim = self.dedupe.claim(key, route, ack, redelivered=msg.dup)
        if claim.kind == "reused":
            self._refuse(msg, rt.verb, route, request.id, IdReused(
                f"the id {request.id!r} belongs to another request to this reply topic (other "
                f"bytes) answered or running within the last {self.dedupe.window_s:g} s "
                "(limits.dedupe_window_s); give every request a new, unpredictable id, and "
                "send a retry with the same bytes"))
            return
        if claim.kind == "done":
            assert claim.response is not None
            self.metrics.deduplicated()
            log.info("request %s answered again from memory", request.id)
            self.replier.answer([route], claim.response, [ack])
            self.dedupe.mark_sent(key, route)
            return
        if claim.kind == "sent":
            self._redelivered(request.id, ack)
            return
        if claim.kind == "running":
            self.metrics.deduplicated()
            log.info("request %s is already being worked on; it will be answered then",
                     request.id)
            return
        self.metrics.received()
        job = RequestJob(admitted=admitted, verb=get_verb(rt.verb),
                         reply=MqttReply(route, [ack], key, self.replier, self.dedupe),
                         received=msg.received, deadline=self._deadline(msg, request.deadline_ms),
                         door="mqtt",
                         requester=requester, pooled=rt.pooled)
        if self.queue.put(job):
            if self.progress is not None and request.progress_s is not None:
                self.progress.track(job, route)
            return
        attached = self.dedupe.forget(key, route)
        err = wire_error(Busy(f"the queue is full ({self.queue.capacity} waiting, "
                              "limits.max_queue); retry later or send to the shared pool"))
        self.metrics.finished(err.type)
        payload = error_answer_json(request.id, err.code, err.type, err.message)  # type: ignore[arg-type]
        routes = [route] * (1 + attached.repeats)
        self.replier.send(routes, payload, request.id, [ack, *attached.acks])
        self.dedupe.mark_sent(key, route)

    def _deadline(self, msg: Incoming, deadline_ms: int | None) -> float | None:
        candidates = []
        if msg.expiry_s is not None:
            candidates.append(msg.received + msg.expiry_s)
        budget_ms = deadline_ms if deadline_ms is not None else self.default_deadline_ms
        if budget_ms is not None:
            candidates.append(msg.received + budget_ms / 1e3)
        return min(candidates) if candidates else None

    def _redelivered(self, request_id: str | None, ack: Ack) -> None:
        """A broker redelivery (after a reconnect) of a request whose answer paho already
        holds: acknowledge it once that answer is confirmed; a second answer would be a
        duplicate."""
        self.metrics.deduplicated()
        log.info("request %s was redelivered; its answer is already on its way", request_id)
        self.replier.ack_after_earlier_answers([ack])

    def _refuse(self, msg: Incoming, verb: str, route: Route, request_id: str | None,
                exc: BaseException) -> None:
        ack = Ack.of(msg)
        key = refusal_key(verb, msg.payload)
        if msg.dup and self.dedupe.sent_before(key, route):
            self._redelivered(request_id, ack)
            return
        err = wire_error(exc)
        if err.type == "internal":
            log.error("admission of request %s failed", request_id, exc_info=exc)
        else:
            self.refusals.refused(request_id, err)
        self.metrics.received()
        self.metrics.finished(err.type)
        payload = error_answer_json(request_id, err.code, err.type, err.message)  # type: ignore[arg-type]
        self.replier.send([route], payload, request_id, [ack])
        self.dedupe.mark_sent(key, route)
