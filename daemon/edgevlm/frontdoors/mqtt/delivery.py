"""How an MQTT request is answered: the worker's :class:`~edgevlm.pipeline.jobs.Reply` for a
request that came over MQTT.

The answer goes to the request's reply route (and once more for each redelivered copy that
attached to it while it ran); the request's PUBACK waits until the broker confirmed the answer
(:mod:`.replies`). The answer is remembered for dedupe (:mod:`.dedupe`) unless its error is
transient: a retry of the same id may well succeed then.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ...wire.protocol import Response, StreamChunk
from .dedupe import DedupeMemory, RequestKey
from .replies import Ack, Replier, Route

# Error types that are not remembered for dedupe: retrying the same id may well succeed.
TRANSIENT_ERRORS = frozenset({"busy", "deadline_exceeded", "internal"})


@dataclass
class MqttReply:
    """The way back to one MQTT requester."""

    route: Route
    acks: list[Ack]
    key: RequestKey | None           # dedupe key (request id or a hash, and the payload's)
    replier: Replier
    dedupe: DedupeMemory

    def chunk(self, chunk: StreamChunk) -> None:
        self.replier.chunk([self.route], chunk)

    def finish(self, response: Response, error_type: str | None,
               on_delivered: Callable[[], None] | None = None) -> None:
        attached = None
        if self.key is not None:
            attached = self.dedupe.complete(self.key, self.route, response,
                                            remember=error_type not in TRANSIENT_ERRORS)
        routes = [self.route] * (1 + (attached.repeats if attached else 0))
        acks = [*self.acks, *(attached.acks if attached else [])]
        self.replier.answer(routes, response, acks, on_delivered=on_delivered)
        if self.key is not None:  # from now on a redelivered copy needs no second answer
            self.dedupe.mark_sent(self.key, self.route)
