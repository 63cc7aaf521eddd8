"""Soak: the daemon's capacity with ~100 KB frames, then 1x, 1.5x and 2x that rate with faults.

Capacity: the closed-loop throughput (two requests always in the daemon), of which 75 % is
the rate the board sustains, 1x (``SUSTAINED``).

One daemon (``edgevlm serve`` in a child process, the demo model) and one real Mosquitto with
persistence serve all three rates in a row: 60 s each in CI, 10 min each with
``EDGEVLM_LONG=1``. Requests are paced on a fixed schedule (request k leaves at
``t0 + k / rate``; a late sender does not burst to catch up with more than it owes).

Frames: 32 different ~100 KB images (JPEG and PNG) made from the fixture photo, sent in a
cycle, and a vision cache of 64 KiB in the daemon (about one entry of the demo model), so that
every request runs the vision encoder: the cache would otherwise turn a repeated frame into a
4 ms answer instead of ~35 ms (the ledger counts cache hits; the test asserts there are none,
except for a request that a fault made the broker deliver again after the daemon had run it:
it finds its own features, one per fault at most).

Mixed in: bad inputs (refused at admission) and a request that fails on the worker (a JPEG
cut in half: its header passes admission, the decode on the worker fails). Faults on a
schedule: the daemon's TCP connection reset (``ss -K``), a broker restart with persistence,
and SIGKILL + restart of the daemon.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.reliability.conftest import (
    Broker,
    Daemon,
    Frame,
    LoadClient,
    request_payload,
    reset_connection,
    rss_bytes,
)
from tests.reliability.ledger import Ledger, Summary
from tests.reliability.profile import LONG
from tests.reliability.stall_probe import StallProbe

PHASE_S = 600.0 if LONG else 60.0
CAPACITY_S = 30.0 if LONG else 10.0
# The board's capacity (1x) is the rate it sustains: 75 % of its closed-loop throughput. At
# 100 % arrivals and completions are equal on average, so every slowdown leaves a queue that
# never drains. A shared VM also changes speed for tens of seconds: in the 2026-12-01 long run
# the daemon's own work time for the same 32-frame cycle, median per 10 s, went 9.3 -> 12.5
# ms (+33 %), and at 90 % each such stretch was an overload whose queue set the p99 (10-s
# over-bound counts followed the work time, correlation 0.92; the stall probe saw one 40 ms
# pause). 75 % keeps a 33 % slowdown under capacity. 1.5x and 2x are 1.125x and 1.5x the
# throughput: above what the board can do (busy answers).
SUSTAINED = 0.75
RATES = (("1x", 1.0), ("1.5x", 1.5), ("2x", 2.0))
SHORT_EXPIRY_S = 3     # 1 request in 5: lost to the documented expiry rule if held in a fault
LONG_EXPIRY_S = 30
RSS_LIMIT = 20 * 2**20
BACK_ONLINE_S = 30.0
# How long before a SIGKILL an answer may have reached the client and still have its request
# unacknowledged: the broker's PUBACK of the answer back to the daemon and the request's PUBACK
# to the broker, behind the admission work a 2x load keeps on the network thread, through a
# pause of the shared machine (the CI run of 2026-12-03 saw 2.4 s latencies). A lost ack
# would show as a duplicate first answered long before the kill.
KILL_ACK_WINDOW_S = 3.0
# An answer the broker had before the kill may reach the client after it; the new process
# answers nothing that early (it starts Python and loads the model first: 1.3-1.9 s).
FORWARDED_S = 0.5
OUT_DIR = Path(os.environ.get("EDGEVLM_RELIABILITY_OUT", "build/reliability"))

DAEMON_SECTIONS: dict[str, dict[str, Any]] = {
    "cache": {"max_bytes": 64 * 1024},
    "mqtt": {"reconnect_min_s": 0.5},
}

# Fault schedule: (phase, when as a fraction of the phase, fault). None at 1x, where the
# latency is measured; the daemon is killed late, so one process lives through most of the run
# (its resident memory is the one measured).
if LONG:
    SCHEDULE = [("1.5x", 0.15, "socket-reset"), ("1.5x", 0.4, "broker-restart"),
                ("1.5x", 0.65, "socket-reset"), ("1.5x", 0.85, "broker-restart"),
                ("2x", 0.25, "socket-reset"), ("2x", 0.5, "broker-restart"),
                ("2x", 0.8, "daemon-kill")]
else:
    SCHEDULE = [("1.5x", 0.25, "socket-reset"), ("1.5x", 0.65, "broker-restart"),
                ("2x", 0.5, "daemon-kill")]


def bad_inputs(rid: str, frame: Frame) -> list[tuple[bytes, str, bool]]:
    """(payload, the error type it must get, whether it passes admission): three refused at
    admission, and one that fails on the worker (the work-time failure)."""
    good = request_payload(rid, frame)
    cut = Frame(frame.data[: len(frame.data) // 2], frame.mime)
    return [
        (good[: len(good) // 3], "invalid_request", False),                # cut JSON
        (json.dumps({"v": 1, "id": rid, "messages": "hello"}).encode(), "invalid_request",
         False),
        (request_payload(rid, Frame(b"GIF89a" + frame.data[6:], frame.mime)),
         "unsupported_media", False),                                      # wrong magic
        (request_payload(rid, cut), "unsupported_media", True),            # fails on the worker
    ]


@dataclass
class Soak:
    broker: Broker
    start_daemon: Callable[..., Daemon]
    client: LoadClient
    ledger: Ledger
    frames: list[Frame]
    daemon: Daemon
    rss: list[tuple[float, int, int]] = field(default_factory=list)   # (t, pid, bytes)
    killed_at: dict[str, float] = field(default_factory=dict)  # fault -> SIGKILL sent
    sent: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    # ------------------------------------------------------------------ load

    def request(self, phase: str, k: int) -> None:
        rid = f"{phase}-{k}"
        frame = self.frames[self.sent % len(self.frames)]
        self.sent += 1
        if k % 25 == 7:  # 4 % bad inputs, one kind after the other
            kinds = bad_inputs(rid, frame)
            payload, expect, queued = kinds[(k // 25) % len(kinds)]
            self.client.send(rid, payload, phase, LONG_EXPIRY_S, expect, queued)
            return
        expiry = SHORT_EXPIRY_S if k % 5 == 0 else LONG_EXPIRY_S
        self.client.send(rid, request_payload(rid, frame), phase, expiry)

    def paced(self, phase: str, rate: float, duration: float) -> None:
        """Send at ``rate``/s for ``duration`` s on a fixed schedule."""
        t0 = time.monotonic()
        k = 0
        while not self.stop.is_set():
            due = t0 + k / rate
            if due - t0 >= duration:
                return
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self.request(phase, k)
            k += 1

    def closed_loop(self, phase: str, duration: float, outstanding: int = 2) -> None:
        """Keep ``outstanding`` requests in the daemon (one running, one waiting)."""
        end = time.monotonic() + duration
        k = 0
        while time.monotonic() < end:
            done = len(self.ledger.first_answers(phase))
            if k - done < outstanding:
                self.client.send(f"{phase}-{k}", request_payload(
                    f"{phase}-{k}", self.frames[self.sent % len(self.frames)]), phase,
                    LONG_EXPIRY_S)
                self.sent += 1
                k += 1
                continue
            self.client.replied.wait(0.5)
            self.client.replied.clear()

    # ------------------------------------------------------------------ faults

    def _until_back(self, name: str, inject: Callable[[], None]) -> float:
        fault = self.ledger.fault(name)
        self.client.online.clear()
        inject()
        assert self.client.online.wait(BACK_ONLINE_S), f"daemon not back online after {name}"
        fault.end = time.monotonic()
        return fault.end - fault.start

    def inject(self, phase: str, name: str) -> float:
        full = f"{phase}:{name}"
        if name == "socket-reset":
            def reset() -> None:
                # the node's connection and the shared pool's (issue 22): a Wi-Fi drop
                # takes both
                assert reset_connection(self.daemon.pid, self.broker.port) == 2
            return self._until_back(full, reset)
        if name == "broker-restart":
            return self._until_back(full, self.broker.restart)

        def kill_and_restart() -> None:
            self.sample_rss()
            self.daemon.kill()
            self.killed_at[full] = time.monotonic()
            self.daemon = self.start_daemon(**DAEMON_SECTIONS)
        return self._until_back(full, kill_and_restart)

    # ------------------------------------------------------------------ memory

    def sample_rss(self) -> None:
        with contextlib.suppress(OSError, AssertionError):  # gone: killed by a fault
            self.rss.append((time.monotonic(), self.daemon.pid, rss_bytes(self.daemon.pid)))

    def sample_forever(self) -> None:
        while not self.stop.wait(1.0):
            self.sample_rss()

    def rss_growth(self, pid: int, after: float) -> tuple[int, int]:
        """(growth, samples): median of the last 5 samples of ``pid`` minus the median of
        its first 5 samples after ``after`` (the end of the warm-up)."""
        samples = [b for t, p, b in self.rss if p == pid and t >= after]
        if len(samples) < 10:
            return 0, len(samples)
        return int(statistics.median(samples[-5:]) - statistics.median(samples[:5])), len(
            samples)


def capacity(soak: Soak) -> tuple[float, float]:
    """(requests/s the daemon completes when it always has work, model ms p50)."""
    soak.closed_loop("capacity", CAPACITY_S)
    assert soak.client.online.is_set()
    times = soak.ledger.first_answers("capacity")
    steady = [t for t in times if t >= times[0] + 2.0]  # the first 2 s warm up
    summary = soak.ledger.summary("capacity")
    assert summary.answered >= 20, summary.line()
    rate = (len(steady) - 1) / (steady[-1] - steady[0])
    return rate, summary.model_ms_p50


def test_soak_at_1x_1_5x_2x_capacity_with_faults(broker, soak_daemon, frames):
    ledger = Ledger()
    client = LoadClient(broker, ledger)
    daemon = soak_daemon(**DAEMON_SECTIONS)
    assert client.online.wait(BACK_ONLINE_S), "the daemon did not come online"
    soak = Soak(broker, soak_daemon, client, ledger, frames, daemon)
    sampler = threading.Thread(target=soak.sample_forever, daemon=True)
    sampler.start()
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    probe = StallProbe(OUT_DIR / f"soak-stalls{'-long' if LONG else ''}.txt")
    phase_span: dict[str, tuple[float, float]] = {}
    report: dict[str, Any] = {"long": LONG, "phase_s": PHASE_S}
    try:
        throughput, model_ms = capacity(soak)
        cap = SUSTAINED * throughput
        report.update(throughput_rps=round(throughput, 2), capacity_rps=round(cap, 2),
                      model_ms_p50=round(model_ms, 1))
        warm = time.monotonic() + 10.0  # RSS baseline: 10 s into the 1x phase
        first_pid = soak.daemon.pid
        recoveries: dict[str, float] = {}
        for phase, factor in RATES:
            sender = threading.Thread(target=soak.paced, args=(phase, cap * factor, PHASE_S),
                                      daemon=True)
            t0 = time.monotonic()
            phase_span[phase] = (t0, t0 + PHASE_S)
            sender.start()
            for _, offset, name in (s for s in SCHEDULE if s[0] == phase):
                time.sleep(max(0.0, t0 + offset * PHASE_S - time.monotonic()))
                recoveries[f"{phase}:{name}"] = round(soak.inject(phase, name), 2)
            sender.join(PHASE_S * 2)
        deadline = time.monotonic() + LONG_EXPIRY_S + 30
        while not ledger.settled() and time.monotonic() < deadline:
            time.sleep(0.5)
        soak.sample_rss()
    finally:
        soak.stop.set()
        sampler.join(5)
        client.close()
        probe.close()
    growth, samples = soak.rss_growth(first_pid, warm)
    restarted = [f.end for f in ledger.faults if f.name.endswith("daemon-kill") and f.end]
    last_growth, last_samples = (soak.rss_growth(soak.daemon.pid, restarted[-1] + 10.0)
                                 if restarted else (0, 0))
    total = ledger.summary()
    phases = {phase: ledger.summary(phase) for phase, _ in RATES}
    one = phases["1x"]
    series = ledger.series("1x")   # (sent at, latency, work) of every answered 1x request
    bound = 2 * one.model_ms_p50 + 5
    report.update(
        rates_rps={p: round(cap * f, 2) for p, f in RATES}, recovery_s=recoveries,
        rss_growth_mb=round(growth / 2**20, 2), rss_samples=samples,
        restarted_daemon_rss_growth_mb=round(last_growth / 2**20, 2),
        restarted_daemon_rss_samples=last_samples, p99_bound_ms_1x=round(bound, 1),
        total=summary_dict(total), phases={p: summary_dict(s) for p, s in phases.items()},
        machine_stalls={p: stall_summary(probe.stalls(*span)) for p, span in phase_span.items()},
        over_bound_1x=over_bound(series, bound, probe.stalls(*phase_span["1x"])),
        duplicate_answers=ledger.duplicate_details())
    write_report("soak", report)
    (OUT_DIR / f"soak-1x-series{'-long' if LONG else ''}.json").write_text(json.dumps(
        [(round(at - phase_span["1x"][0], 4), round(ms, 2), work) for at, ms, work in series]))

    assert not total.lost, f"requests without a final answer: {total.lost[:20]}"
    assert not total.unexpected, total.unexpected[:20]
    assert total.unknown == 0, "answers to requests never sent"
    # A reset or a broker restart: at most one duplicate each (docs/mqtt.md, "Delivery
    # guarantees"). A SIGKILL: every request the killed process had answered but not yet
    # acknowledged (ack after answer: the request's PUBACK leaves once the broker has
    # confirmed the answer) is redelivered and answered again by the new process. At 2x
    # that is a few requests, each first answered just before the kill: a duplicate answered
    # long before it, or twice by the new process, would be a lost ack or a dedupe failure.
    killed = [d for d in report["duplicate_answers"] if d["fault"].endswith("daemon-kill")]
    others = total.duplicates - sum(len(d["answers"]) - 1 for d in killed)
    assert others <= sum(1 for s in SCHEDULE if s[2] != "daemon-kill"), (
        total.line(), report["duplicate_answers"])
    for dup in killed:
        start = next(f.start for f in ledger.faults if f.name == dup["fault"])
        first, *again = (start + answer[1] for answer in dup["answers"])
        kill = soak.killed_at[dup["fault"]]
        assert (len(again) == 1
                and kill - KILL_ACK_WINDOW_S <= first <= kill + FORWARDED_S < again[0]), dup
    assert total.cache_hits == 0, "the vision cache made the load trivial"
    assert sum(total.cache_hits_by_fault.values()) <= len(SCHEDULE), total.line()
    assert phases["2x"].busy > 0, f"no busy answers above capacity: {phases['2x'].line()}"
    assert samples >= 10 and growth <= RSS_LIMIT, (
        f"RSS grew {growth / 2**20:.1f} MB ({samples} samples)")
    if LONG:  # in CI (a shared 2-core box) it is measured and reported, not asserted
        assert one.latency_ms["p99"] <= bound, one.line()


def stall_summary(stalls: list[tuple[float, float]]) -> dict[str, Any]:
    """The machine's pauses of one phase (the stall probe's late wake-ups, > 20 ms)."""
    ms = [late for _, late in stalls]
    return {"count": len(ms), "total_ms": round(sum(ms), 1), "max_ms": max(ms, default=0.0)}


def over_bound(series: list[tuple[float, float, float | None]], bound: float,
               stalls: list[tuple[float, float]]) -> dict[str, int]:
    """Requests of the 1x phase slower than the bound, and how many of them were sent while
    the queue left by a machine pause was draining: from 1 s before the pause to its drain
    time at 1x (rho / (1 - rho) times its length) plus 1 s after it."""
    drain = SUSTAINED / (1.0 - SUSTAINED)
    slow = [at for at, ms, _ in series if ms > bound]
    after = [at for at in slow
             if any(s - 1.0 <= at <= s + drain * late / 1e3 + 1.0 for s, late in stalls)]
    return {"requests": len(series), "over_bound": len(slow), "after_a_pause": len(after)}


def summary_dict(s: Summary) -> dict[str, Any]:
    out = dict(s.__dict__)
    out["lost"] = len(s.lost)
    out["unexpected"] = len(s.unexpected)
    return out


def write_report(name: str, report: dict[str, Any]) -> Path:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    path = OUT_DIR / f"{name}{'-long' if LONG else ''}.json"
    path.write_text(json.dumps(report, indent=2, sort_keys=True))
    print(f"\n{name}: {json.dumps(report, sort_keys=True)}\n(written to {path})")
    return path

