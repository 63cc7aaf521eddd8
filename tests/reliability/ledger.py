"""A ledger of request ids: every request sent (with its deadline) and every final answer.

It proves the delivery promises of docs/mqtt.md: each request gets exactly one final answer
(``status`` ``ok`` or ``error``; stream chunks are not final), or none because its MQTT v5
Message Expiry ran out while the broker held it for a daemon that was away (the documented
expiry rule: such a request is never run and the broker drops it). ``faults`` are the windows
in which the daemon could not take requests (killed, broker down, connection reset); a request
without an answer is *expired* only if its expiry ran out inside such a window (plus
``grace_s`` for the redelivery), otherwise it is *lost*.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Sent:
    rid: str
    at: float            # time.monotonic() of the publish
    expiry_s: int        # the request's MQTT v5 Message Expiry Interval
    phase: str
    expect: str          # "ok", or the error type a bad input must get
    queued: bool         # passes admission: may also get busy / deadline_exceeded


@dataclass(frozen=True)
class Final:
    at: float
    status: str
    error_type: str | None
    total_ms: float | None     # the daemon's own time for the work (answers only)
    cache_hits: int
    redelivered: bool = False  # DUP flag: the broker sent it to this client before


@dataclass
class Fault:
    name: str
    start: float
    end: float | None = None   # when the daemon was serving again


@dataclass
class Summary:
    sent: int
    answered: int
    errors: dict[str, int]
    busy: int
    expired: int               # unanswered, expiry ran out in a fault window
    deadline_exceeded: int     # answered deadline_exceeded
    duplicates: int
    duplicates_by_fault: dict[str, int]   # the fault before each second answer
    lost: list[str]
    unexpected: list[str]      # final answers that contradict what the request was
    unknown: int               # answers to ids never sent
    faults: int
    cache_hits: int            # on first answers with no fault between request and answer
    cache_hits_by_fault: dict[str, int]   # a request redelivered after a fault, run again
    latency_ms: dict[str, float]
    model_ms_p50: float
    model_ms_p99: float
    queue_ms: dict[str, float]   # latency - the daemon's work time: waiting + transport

    def line(self) -> str:
        return (f"sent {self.sent}, answered {self.answered}, errors {sum(self.errors.values())} "
                f"{dict(self.errors)}, busy {self.busy}, expired {self.expired}, "
                f"deadline_exceeded {self.deadline_exceeded}, duplicates {self.duplicates}, "
                f"lost {len(self.lost)}, unexpected {len(self.unexpected)}, faults "
                f"{self.faults}, cache hits {self.cache_hits} (+{self.cache_hits_by_fault} after "
                f"faults), latency ms {self.latency_ms}, model ms p50 {self.model_ms_p50:.1f} "
                f"p99 {self.model_ms_p99:.1f}, queue ms {self.queue_ms}")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Ledger:
    grace_s: float = 3.0
    sent: dict[str, Sent] = field(default_factory=dict)
    finals: dict[str, list[Final]] = field(default_factory=dict)
    faults: list[Fault] = field(default_factory=list)
    unknown: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # ------------------------------------------------------------------ recording

    def record_sent(self, rid: str, expiry_s: int, phase: str, expect: str = "ok",
                    queued: bool = True) -> None:
        with self._lock:
            assert rid not in self.sent, f"request id {rid} sent twice"
            self.sent[rid] = Sent(rid, time.monotonic(), expiry_s, phase, expect, queued)

    def record_reply(self, payload: bytes, correlation: bytes | None = None,
                     redelivered: bool = False) -> None:
        """One message on the reply topic (called on the client's network thread); the
        request is found by its Correlation Data (the id, even for unparsable requests),
        else by the answer's ``id``."""
        now = time.monotonic()
        try:
            answer = json.loads(payload)
        except ValueError:
            answer = None
        if not isinstance(answer, dict) or answer.get("status") not in ("ok", "error"):
            return  # a stream chunk or garbage: not a final answer
        data = answer.get("data") or {}
        error = answer.get("error") or {}
        final = Final(now, answer["status"], error.get("type"),
                      (data.get("metrics") or {}).get("total_ms"),
                      sum(1 for c in data.get("cache") or [] if c.get("hit")), redelivered)
        rid = correlation.decode(errors="replace") if correlation else answer.get("id")
        with self._lock:
            if rid not in self.sent:
                self.unknown += 1
                return
            self.finals.setdefault(rid, []).append(final)

    def fault(self, name: str) -> Fault:
        fault = Fault(name, time.monotonic())
        with self._lock:
            self.faults.append(fault)
        return fault

    # ------------------------------------------------------------------ reading

    def settled(self, now: float | None = None) -> bool:
        """Every request has a final answer or can no longer get one (expired)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            return all(rid in self.finals or now > s.at + s.expiry_s + self.grace_s
                       for rid, s in self.sent.items())

    def first_answers(self, phase: str) -> list[float]:
        """When the requests of ``phase`` got their first final answer, in order."""
        with self._lock:
            return sorted(self.finals[rid][0].at for rid, s in self.sent.items()
                          if s.phase == phase and rid in self.finals)

    def duplicate_details(self) -> list[dict[str, Any]]:
        """Each request with more than one final answer: what it was, when it was sent, and
        each answer (status, seconds from the start of the fault before the second answer,
        cache hits, and the DUP flag: true when the broker resent its own copy to this client,
        false when the daemon published the answer again)."""
        with self._lock:
            out = []
            for rid, finals in self.finals.items():
                if len(finals) < 2:
                    continue
                s = self.sent[rid]
                fault = [f for f in self.faults if f.start <= finals[1].at]
                zero = fault[-1].start if fault else s.at
                out.append({
                    "id": rid, "expect": s.expect, "fault": fault[-1].name if fault else "none",
                    "sent_s": round(s.at - zero, 4),
                    "answers": [(f.status if f.status == "ok" else f.error_type,
                                 round(f.at - zero, 4), f.cache_hits, f.redelivered)
                                for f in finals]})
            return out

    def _fault_before(self, at: float) -> str:
        before = [f for f in self.faults if f.start <= at]
        return before[-1].name if before else "none"

    def _fault_between(self, start: float, end: float) -> str | None:
        """The last fault whose window overlaps [start - 1 s, end]: the request was sent
        during it, or at most 1 s before it began (a publish in flight), and answered after
        it began."""
        inside = [f for f in self.faults if f.start <= end and (f.end or end) >= start - 1.0]
        return inside[-1].name if inside else None

    def _excused(self, s: Sent) -> bool:
        ends = s.at + s.expiry_s
        return any(f.start - self.grace_s <= ends <= (f.end or ends) + self.grace_s
                   for f in self.faults)

    def summary(self, phase: str | None = None) -> Summary:
        with self._lock:
            sent = [s for s in self.sent.values() if phase is None or s.phase == phase]
            errors: Counter[str] = Counter()
            by_fault: Counter[str] = Counter()
            hits_by_fault: Counter[str] = Counter()
            answered = duplicates = expired = hits = 0
            queue: list[float] = []
            lost: list[str] = []
            unexpected: list[str] = []
            latency: list[float] = []
            model: list[float] = []
            for s in sent:
                finals = self.finals.get(s.rid, [])
                if not finals:
                    if self._excused(s):
                        expired += 1
                    else:
                        lost.append(s.rid)
                    continue
                duplicates += len(finals) - 1
                for extra in finals[1:]:
                    by_fault[self._fault_before(extra.at)] += 1
                first = finals[0]
                if first.cache_hits:
                    # a request the daemon ran, whose answer a fault lost, is delivered again
                    # and finds its own features in the cache
                    fault = self._fault_between(s.at, first.at)
                    if fault is None:
                        hits += first.cache_hits
                    else:
                        hits_by_fault[fault] += first.cache_hits
                if first.status == "ok":
                    answered += 1
                    latency.append((first.at - s.at) * 1e3)
                    if first.total_ms is not None:
                        model.append(first.total_ms)
                        queue.append(latency[-1] - first.total_ms)
                else:
                    errors[first.error_type or "?"] += 1
                got = first.status if first.status == "ok" else first.error_type
                if got != s.expect and not (s.queued and got in ("busy", "deadline_exceeded")):
                    unexpected.append(f"{s.rid}: expected {s.expect}, got {got}")
            return Summary(
                sent=len(sent), answered=answered, errors=dict(errors),
                busy=errors.get("busy", 0), expired=expired,
                deadline_exceeded=errors.get("deadline_exceeded", 0), duplicates=duplicates,
                duplicates_by_fault=dict(by_fault),
                lost=lost, unexpected=unexpected, unknown=self.unknown,
                faults=sum(1 for f in self.faults if phase is None or f.name.startswith(phase)),
                cache_hits=hits, cache_hits_by_fault=dict(hits_by_fault),
                latency_ms={"p50": round(percentile(latency, 0.50), 1),
                            "p99": round(percentile(latency, 0.99), 1),
                            "max": round(max(latency, default=float("nan")), 1)},
                model_ms_p50=statistics.median(model) if model else float("nan"),
                model_ms_p99=percentile(model, 0.99),
                queue_ms={"p50": round(percentile(queue, 0.50), 1),
                          "p99": round(percentile(queue, 0.99), 1)})

    def series(self, phase: str) -> list[tuple[float, float, float | None]]:
        """(sent at, latency ms, the daemon's work ms) of each answered request of ``phase``,
        in sending order: where the latency tail sits in time."""
        with self._lock:
            out = []
            for s in sorted(self.sent.values(), key=lambda s: s.at):
                finals = self.finals.get(s.rid)
                if s.phase == phase and finals and finals[0].status == "ok":
                    out.append((s.at, (finals[0].at - s.at) * 1e3, finals[0].total_ms))
            return out

    def stats(self) -> dict[str, Any]:
        return self.summary().__dict__
