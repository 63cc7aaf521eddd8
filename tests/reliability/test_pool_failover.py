"""Pool failover (issue 22): boards die and lose their network under steady pooled load; every
request is still answered, within seconds, at most once more than it should be.

Three boards (``edgevlm serve`` child processes b1, b2, b3, the demo model, one engine thread)
in one ``mqtt.shared_group`` on one real Mosquitto; b3 reaches the broker through
tests/reliability/tcp_cut.py's proxy. A DescribeClient sends 5 pooled text requests a second
(each a unique id, ``max_tokens`` 2) with :class:`edgevlm.ask.PoolRetry` for 41 s. The faults:

- t ≈ 8 s: b1 is SIGKILLed and stays dead;
- t ≈ 16 s: b2 is SIGKILLed and restarted at once;
- t ≈ 24 s: b3's network is cut (every byte black-holed, no socket closed) for 12 s, then
  healed; the load goes on 5 s after the heal.

With ``EDGEVLM_LONG=1`` the faults come at 10, 22 and 35 s (a 20 s cut) and the load lasts
300 s.

Each kill waits (up to 3 s) for its board to hold a request (a ``working`` message about an
unanswered one), and the boards' worker takes 100 ms a job (the test-only delay), so that
there are requests in flight at the losses. The cut comes at 24 s whatever b3 is doing: after
the heal its pool connection is back within seconds while its main connection (the one its
answers go out on) is still the black-holed socket until its 60 s keepalive notices; b3 must
not take pooled requests meanwhile. The cut outlasts both ways b3 notices it: its pool
connection's 2 s keepalive, and an answer unconfirmed for 10 s
(:data:`edgevlm.service_pool.POOL_UNCONFIRMED_S`).

A plain subscriber of ``edgevlm/clients/#`` counts every final answer (``status`` ok or
error) of every request, so duplicates the client no longer listens for are seen too.

Asserted: every request answered ``ok``; the requests in flight at a loss (sent before it,
first answered after it) answered within 10 s of the loss, and every request within 10 s of
its first publish, both with 2 s of slack (see ``SLACK_S``); at most one duplicate final
answer per request, at most as many duplicates in all as requests in flight at the losses,
and every copy carries its request's id. The summary is printed and written to
``build/pool-failover.json``.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from edgevlm.ask import DescribeClient, PoolRetry, describe_request
from tests.mqtt.conftest import Broker, Daemon, connect_client, wait_until
from tests.reliability.conftest import write_daemon_config
from tests.reliability.profile import LONG
from tests.reliability.tcp_cut import Proxy

RATE = 5.0                  # pooled requests a second
GROUP = "failover"
NODES = ("b1", "b2", "b3")
# seconds after the load starts; the load ends DURATION_S after it starts
if LONG:
    KILL_B1_AT, RESTART_B2_AT, CUT_B3_AT, CUT_B3_FOR, DURATION_S = 10.0, 22.0, 35.0, 20.0, 300.0
else:
    KILL_B1_AT, RESTART_B2_AT, CUT_B3_AT, CUT_B3_FOR, DURATION_S = 8.0, 16.0, 24.0, 12.0, 41.0
TARGET_S = 10.0             # the promise: answered within 10 s of a loss
# Slack over TARGET_S: the client notices a loss only after PoolRetry's accept_s (3 s) or
# silence_s (5 s) and looks every 0.1 s; the answer then crosses the broker twice; and three
# daemons, the broker, the proxy and this test share two CPU cores (a daemon's thread may
# wait a scheduling slice or two under the load of a restart). 2 s covers that noise, not a
# missed retry: a request that needs one more round of accept_s is 3 s late, beyond it.
SLACK_S = 2.0
LIMIT_S = TARGET_S + SLACK_S
# The test-only worker delay (EDGEVLM_TEST_WORKER_DELAY_MS): the demo model answers in 2-5 ms,
# so a board would hardly ever hold a request when it is lost; with 100 ms a job is long
# enough to be caught mid-request (each fault waits up to FAULT_WAIT_S for its board to say
# ``working`` about an unanswered request). b2 alone during the cut: 5/s x 0.1 s, half busy.
WORKER_DELAY_MS = int(os.environ.get("EDGEVLM_POOL_FAILOVER_DELAY_MS", "100"))
FAULT_WAIT_S = 3.0
SETTLE_S = 20.0             # after the last request: the stragglers, then late duplicates
LATE_DUPLICATES_S = 3.0
REPORT = Path(__file__).resolve().parents[2] / "build" / "pool-failover.json"


@dataclass
class Sent:
    rid: str
    sent_at: float
    waiter: Any
    answer: dict[str, Any] | None = None
    answered_at: float | None = None
    given_up: bool = False

    def take(self, client: DescribeClient) -> None:
        """The first final answer, right after it came: DescribeClient keeps a request's
        waiter until ``wait`` and overwrites its answer and ``received_at`` with every later
        final copy (a duplicate), so they must be read before one arrives."""
        self.answered_at = self.waiter.received_at
        with contextlib.suppress(Exception):
            self.answer = self.waiter.answer
            client.wait(self.waiter, 0)

    @property
    def latency(self) -> float | None:
        return None if self.answered_at is None else self.answered_at - self.sent_at


@dataclass
class Fault:
    name: str
    node: str
    at: float = 0.0          # time.monotonic() of the fault
    in_flight: list[Sent] = field(default_factory=list)


class Observer:
    """A plain v5 subscriber: every message on the clients' reply routes and every
    ``bridge/pool`` change, with its arrival time."""

    def __init__(self, broker: Broker) -> None:
        self.lock = threading.Lock()
        self.finals: dict[str, list[tuple[float, dict[str, Any]]]] = defaultdict(list)
        self.working: dict[str, list[tuple[float, str, str]]] = defaultdict(list)
        self.mismatched: list[tuple[str | None, Any]] = []   # correlation != payload id
        self.pool: dict[str, dict[str, Any]] = {}
        self.pool_changes: list[tuple[float, str, bool, Any]] = []
        self.errors: list[str] = []
        self.client = connect_client(broker.host, broker.port, client_id="pool-observer")
        self.client.on_message = self._on_message
        self.client.sub("edgevlm/clients/#", "edgevlm/+/bridge/pool")

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        now = time.monotonic()
        try:
            body = json.loads(msg.payload)
            if msg.topic.endswith("/bridge/pool"):
                node = msg.topic.split("/")[1]
                with self.lock:
                    self.pool[node] = body
                    self.pool_changes.append((now, node, bool(body.get("member")),
                                              body.get("reason")))
                return
            props = getattr(msg, "properties", None)
            raw = getattr(props, "CorrelationData", None)
            correlation = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else None
            status = body.get("status")
            with self.lock:
                if status in ("ok", "error"):
                    key = correlation or str(body.get("id"))
                    self.finals[key].append((now, body))
                    if correlation is not None and body.get("id") != correlation:
                        self.mismatched.append((correlation, body.get("id")))
                elif status == "working":
                    self.working[correlation or str(body.get("id"))].append(
                        (now, str(body.get("node")), str(body.get("stage"))))
        except Exception as exc:  # never kill paho's thread; the test reports it
            self.errors.append(f"{msg.topic}: {type(exc).__name__}: {exc}")

    def busy(self, node: str, within_s: float = 1.0) -> bool:
        """Whether ``node`` said ``working`` in the last ``within_s`` about a request that has
        no final answer yet: it holds a request now."""
        now = time.monotonic()
        with self.lock:
            return any(at > now - within_s and who == node and not self.finals.get(rid)
                       for rid, said in self.working.items() for at, who, _ in said[-1:])

    def members(self) -> set[str]:
        with self.lock:
            return {n for n, body in self.pool.items() if body.get("member") is True}

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.disconnect()
            self.client.loop_stop()


class Boards:
    """The three daemons; b3's broker is the proxy. Every start appends to the board's log."""

    def __init__(self, broker: Broker, proxy: Proxy, directory: Path) -> None:
        self.configs: dict[str, Path] = {}
        self.logs: dict[str, Path] = {}
        self.running: dict[str, Daemon] = {}
        self.started: list[Daemon] = []
        for node in NODES:
            port = proxy.port if node == "b3" else broker.port
            self.configs[node] = write_daemon_config(
                directory / f"{node}.yaml", broker,
                mqtt={"node_id": node, "port": port, "shared_group": GROUP,
                      "reconnect_min_s": 0.5, "reconnect_max_s": 2})
            self.logs[node] = directory / f"{node}.log"

    def start(self, node: str) -> None:
        daemon = Daemon(self.configs[node], self.logs[node], delay_ms=WORKER_DELAY_MS)
        self.running[node] = daemon
        self.started.append(daemon)

    def kill(self, node: str) -> None:
        self.running.pop(node).kill()

    def close(self) -> None:
        for daemon in self.started:
            with contextlib.suppress(Exception):
                daemon.close()

    def lines(self, needle: str, limit: int = 6) -> dict[str, list[str]]:
        """The log lines of each board that mention ``needle``."""
        out: dict[str, list[str]] = {}
        for node, path in self.logs.items():
            text = path.read_text(errors="replace") if path.exists() else ""
            found = [line for line in text.splitlines() if needle in line]
            if found:
                out[node] = found[:limit]
        return out


@pytest.fixture
def proxy(broker: Broker) -> Iterator[Proxy]:
    with Proxy(broker.host, broker.port) as p:
        yield p


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def test_pool_answers_every_request_through_board_deaths_and_a_cut(
        broker: Broker, proxy: Proxy, tmp_path: Path) -> None:
    observer = Observer(broker)
    boards = Boards(broker, proxy, tmp_path)
    client = DescribeClient(broker.host, broker.port, client_id="pool-load")
    sent: list[Sent] = []
    faults = [Fault("kill b1", "b1"), Fault("kill+restart b2", "b2"),
              Fault(f"cut b3 {CUT_B3_FOR:g} s", "b3")]
    stop = threading.Event()
    send_errors: list[str] = []
    try:
        for node in NODES:
            boards.start(node)
        wait_until(lambda: observer.members() >= set(NODES), 90,
                   what="the three boards to join the pool")
        client.connect()
        t0 = time.monotonic()

        def load() -> None:
            k = 0
            while not stop.is_set() and time.monotonic() - t0 < DURATION_S:
                delay = t0 + k / RATE - time.monotonic()
                if delay > 0 and stop.wait(delay):
                    return
                rid = f"fo-{k:04d}"
                request = describe_request(f"Question {k}: what is a pool?", request_id=rid,
                                           max_tokens=2)
                try:
                    at = time.monotonic()
                    waiter = client.send(request, None, retry=PoolRetry())
                    sent.append(Sent(rid, at, waiter))
                except Exception as exc:
                    send_errors.append(f"{rid}: {type(exc).__name__}: {exc}")
                k += 1

        def collect() -> None:
            """Take each first final answer as soon as it is in: ``client.wait`` hands it
            over and forgets the request (a later copy would overwrite the waiter's answer
            and time, see ``Sent.take``)."""
            while not (collected.is_set() and all(s.answered_at is not None or s.given_up
                                                  for s in list(sent))):
                for s in list(sent):
                    if s.answered_at is None and s.waiter.done.is_set():
                        s.take(client)
                time.sleep(0.01)

        collected = threading.Event()
        sender = threading.Thread(target=load, name="pool-load", daemon=True)
        collector = threading.Thread(target=collect, name="pool-collect", daemon=True)
        sender.start()
        collector.start()

        def at(seconds: float, busy: str | None = None) -> None:
            """Wait until ``seconds`` after t0, then (``busy``) until that board holds a
            request, for at most FAULT_WAIT_S more."""
            time.sleep(max(0.0, t0 + seconds - time.monotonic()))
            deadline = time.monotonic() + FAULT_WAIT_S
            while busy and not observer.busy(busy) and time.monotonic() < deadline:
                time.sleep(0.005)

        at(KILL_B1_AT, "b1")
        faults[0].at = time.monotonic()
        boards.kill("b1")
        at(RESTART_B2_AT, "b2")
        faults[1].at = time.monotonic()
        boards.kill("b2")
        boards.start("b2")
        at(CUT_B3_AT)  # whatever b3 is doing (busy or idle: both must work)
        faults[2].at = time.monotonic()
        proxy.cut()
        at(CUT_B3_AT + CUT_B3_FOR)
        heal_at = time.monotonic()
        proxy.heal()
        sender.join(DURATION_S + 30)
        load_end = time.monotonic()

        # the stragglers, then the duplicates still on their way
        collected.set()
        deadline = load_end + SETTLE_S
        while time.monotonic() < deadline and any(s.answered_at is None for s in sent):
            time.sleep(0.1)
        for s in sent:
            s.given_up = s.answered_at is None
        collector.join(5)
        time.sleep(LATE_DUPLICATES_S)
        end = time.monotonic()
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            client.close()
        observer.close()
        boards.close()

    # ------------------------------------------------------------------ the numbers
    for fault in faults:
        fault.in_flight = [s for s in sent if s.sent_at < fault.at
                           and (s.answered_at is None or s.answered_at > fault.at)]
    answered = [s for s in sent if s.answered_at is not None]
    ok = [s for s in answered if s.answer is not None and s.answer.get("status") == "ok"]
    latencies = [s.latency for s in answered if s.latency is not None]
    with observer.lock:
        copies = {s.rid: len(observer.finals.get(s.rid, [])) for s in sent}
        stray = sorted(set(observer.finals) - {s.rid for s in sent})
        mismatched = list(observer.mismatched)
        pool_changes = [(round(t - t0, 2), n, m, r) for t, n, m, r in observer.pool_changes
                        if t >= t0]
        working_nodes = {rid: sorted({n for _, n, _ in w}) for rid, w in
                         observer.working.items()}
    duplicates = {rid: n - 1 for rid, n in copies.items() if n > 1}
    in_flight_total = sum(len(f.in_flight) for f in faults)
    attempts = Counter(s.waiter.attempts for s in sent)
    slow = [s for s in answered if s.latency is not None and s.latency > LIMIT_S]
    late_after_loss = [(f.name, s) for f in faults for s in f.in_flight
                       if s.answered_at is None
                       or s.answered_at - max(s.sent_at, f.at) > LIMIT_S]
    ok_ids = {s.rid for s in ok}
    not_ok = [s for s in sent if s.rid not in ok_ids]

    def rounded(value: float | None) -> float | None:
        return None if value is None else round(value, 2)

    events = [("start", t0), *((f.name, f.at) for f in faults), ("heal b3", heal_at),
              ("end of load", load_end)]
    windows = []
    for (name, start), (_, stop_at) in pairwise(events):
        window = [s for s in sent if start <= s.sent_at < stop_at]
        retried = [s for s in window if s.waiter.attempts > 1]
        windows.append({"from": name, "from_s": round(start - t0, 1),
                        "to_s": round(stop_at - t0, 1), "requests": len(window),
                        "retried": len(retried),
                        "max_latency_s": rounded(max((s.latency for s in window
                                                      if s.latency is not None),
                                                     default=None))})

    def described(s: Sent) -> dict[str, Any]:
        """One request, for a failure: its timings, its copies, who worked on it, the logs."""
        return {"id": s.rid, "sent_s": rounded(s.sent_at - t0),
                "answered_s": rounded(None if s.answered_at is None else s.answered_at - t0),
                "latency_s": rounded(s.latency), "attempts": s.waiter.attempts,
                "status": None if s.answer is None else s.answer.get("status"),
                "error": None if s.answer is None else s.answer.get("error"),
                "final_copies": copies.get(s.rid, 0),
                "working_from": working_nodes.get(s.rid, []),
                "daemon_log": boards.lines(s.rid)}

    problems = {
        "not_ok": [described(s) for s in not_ok[:10]],
        "slow": [described(s) for s in slow[:10]],
        "late_after_loss": [{"fault": name, **described(s)} for name, s in late_after_loss[:10]],
        "duplicated": [described(s) for s in sent if s.rid in duplicates][:10],
    }
    report: dict[str, Any] = {
        "duration_s": DURATION_S, "rate": RATE, "wall_s": round(end - t0, 1),
        "requests": len(sent), "answered": len(answered), "ok": len(ok),
        "latency_s": {"p50": rounded(statistics.median(latencies)) if latencies else None,
                      "p95": rounded(_percentile(latencies, 0.95)) if latencies else None,
                      "max": rounded(max(latencies, default=None))},
        "publishes": sum(s.waiter.attempts for s in sent),
        "retries": sum(s.waiter.attempts - 1 for s in sent),
        "retried_requests": sum(1 for s in sent if s.waiter.attempts > 1),
        "attempts_histogram": dict(sorted(attempts.items())),
        "duplicates": sum(duplicates.values()), "duplicated_ids": sorted(duplicates),
        "stray_answer_ids": stray[:10], "mismatched_ids": mismatched[:10],
        "faults": [{"name": f.name, "at_s": round(f.at - t0, 2),
                    "in_flight": len(f.in_flight),
                    "max_latency_after_loss_s": rounded(max(
                        ((s.answered_at or end) - f.at for s in f.in_flight), default=None)),
                    "max_latency_s": rounded(max(
                        ((s.answered_at or end) - s.sent_at for s in f.in_flight),
                        default=None))} for f in faults],
        "healed_at_s": round(heal_at - t0, 2),
        # the requests sent from each event to the next: how many needed another publish
        # (they went to a board that was gone: not "in flight at the loss", sent after it)
        "windows": windows,
        "pool_changes": pool_changes,
        "proxy": {"accepted": proxy.accepted, "black_holed": proxy.black_holed,
                  "discarded_bytes": proxy.discarded, "errors": proxy.errors},
        "send_errors": send_errors[:10], "observer_errors": observer.errors[:10],
        "problems": problems,
    }
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(json.dumps(report, indent=2))
    print(json.dumps({k: v for k, v in report.items() if k != "problems"}, indent=2))
    if any(problems.values()):
        print("problems:", json.dumps(problems, indent=2))

    assert not send_errors and not observer.errors and not proxy.errors, report
    assert len(sent) >= RATE * DURATION_S * 0.95, f"only {len(sent)} requests were sent"
    assert not not_ok, f"{len(not_ok)} requests not answered ok: {problems['not_ok']}"
    assert not late_after_loss, \
        f"in flight at a loss, answered > {LIMIT_S:g} s after it: {problems['late_after_loss']}"
    assert not slow, f"{len(slow)} requests slower than {LIMIT_S:g} s: {problems['slow']}"
    assert max(duplicates.values(), default=0) <= 1, problems["duplicated"]
    assert sum(duplicates.values()) <= in_flight_total, \
        f"{sum(duplicates.values())} duplicates > {in_flight_total} in flight at the losses"
    assert not mismatched and not stray, (mismatched, stray)
