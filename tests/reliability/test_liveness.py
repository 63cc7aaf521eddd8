"""A daemon that cannot serve says so: ``bridge/state`` offline, ``bridge/health`` serving
false with the problem, no systemd watchdog pings; and it says so no longer once it serves.

The rule (:mod:`edgevlm.liveness`) on a fake clock first, then three real cases: a reconnect
loop (a client that takes over the daemon's client id, again and again, against a real
Mosquitto and ``edgevlm serve`` with a systemd notify socket), a stuck worker and a failing
engine (in-process services with short bounds).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from edgevlm.liveness import Liveness, LivenessPolicy
from edgevlm.metrics import Metrics
from edgevlm.service import TEST_DELAY_ENV
from tests.helpers import text, user_request
from tests.mqtt.conftest import WAIT_S, v5_properties, wait_until
from tests.reliability import raw_mqtt5 as raw
from tests.reliability.conftest import BASE, Daemon, write_daemon_config

REPLY = "edgevlm/clients/liveness/reply"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def watch(liveness: Liveness) -> list[tuple[bool, str | None]]:
    changes: list[tuple[bool, str | None]] = []
    liveness.add_listener(lambda serving, problem: changes.append((serving, problem)))
    return changes


# --------------------------------------------------------------------------- the rule

def test_three_connection_losses_within_a_minute_are_a_reconnect_loop(clock):
    liveness = Liveness(clock=clock)
    changes = watch(liveness)
    for _ in range(2):
        liveness.connection(True)
        clock.now += 1
        liveness.connection(False)
        assert liveness.check()
    liveness.connection(True)
    clock.now += 1
    liveness.connection(False)
    assert not liveness.check()
    assert "reconnect loop" in (liveness.problem or "") and "3 times within 60 s" in (
        liveness.problem or "")
    liveness.connection(True)
    clock.now += 9.9
    assert not liveness.check(), "a connection held for less than stable_s ends nothing"
    clock.now += 0.2
    assert liveness.check() and liveness.problem is None
    assert [serving for serving, _ in changes] == [False, True]


def test_losses_far_apart_and_an_outage_are_not_a_loop(clock):
    liveness = Liveness(clock=clock)
    for _ in range(5):  # one loss every 31 s: at most 2 in any minute
        liveness.connection(True)
        clock.now += 31
        liveness.connection(False)
        assert liveness.check()
    clock.now += 3600  # the broker is away an hour: failed attempts are no losses
    assert liveness.check()


def test_a_loop_without_a_connection_lasts_until_one_holds(clock):
    liveness = Liveness(clock=clock)
    for _ in range(3):
        liveness.connection(True)
        liveness.connection(False)
    clock.now += 600  # the broker went away during the loop: still not serving
    assert not liveness.check()
    liveness.connection(True)
    clock.now += 10
    assert liveness.check()


def test_a_job_running_past_the_bound_is_a_stuck_worker(clock):
    started: list[float | None] = [None]
    liveness = Liveness(LivenessPolicy(stuck_s=600), clock=clock,
                        job_started=lambda: started[0])
    started[0] = clock.now
    clock.now += 600
    assert liveness.check()
    clock.now += 1
    assert not liveness.check() and "stuck worker" in (liveness.problem or "")
    started[0] = None
    assert liveness.check()


def test_five_internal_errors_in_a_row_are_a_failing_engine(clock):
    metrics = Metrics()
    liveness = Liveness(clock=clock, failures_in_a_row=metrics.failures_in_a_row)
    for _ in range(4):
        metrics.received()
        metrics.finished("internal")
    metrics.received()
    metrics.finished("invalid_request")  # a client's error neither counts nor resets
    assert liveness.check()
    metrics.received()
    metrics.finished("internal")
    assert not liveness.check() and "failing engine" in (liveness.problem or "")
    metrics.received()
    metrics.finished(None)
    assert liveness.check()


def test_a_failing_listener_does_not_stop_the_others(clock):
    liveness = Liveness(LivenessPolicy(losses=1), clock=clock)

    def broken(serving: bool, problem: str | None) -> None:
        raise RuntimeError("listener bug")

    liveness.add_listener(broken)
    changes = watch(liveness)
    liveness.connection(True)
    liveness.connection(False)
    assert not liveness.check()
    assert changes == [(False, liveness.problem)]


# --------------------------------------------------------------------------- a reconnect loop

class Notifications:
    """A systemd notify socket: every datagram with its arrival time."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0.2)
        self.seen: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            self.seen.append((time.monotonic(), data.decode()))

    def pings(self, since: float, until: float | None = None) -> int:
        return sum(1 for at, msg in list(self.seen) if msg == "WATCHDOG=1" and at >= since
                   and (until is None or at <= until))

    def status(self, fragment: str) -> bool:
        return any(msg.startswith("STATUS=") and fragment in msg for _, msg in list(self.seen))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()


@pytest.fixture
def notifications(tmp_path: Path) -> Iterator[Notifications]:
    n = Notifications(tmp_path / "notify.sock")
    yield n
    n.close()


def test_a_reconnect_loop_turns_the_daemon_offline_and_stops_the_watchdog_until_it_ends(
        broker, mqtt_client, notifications, tmp_path):
    client = mqtt_client()
    client.sub(f"{BASE}/bridge/state", f"{BASE}/bridge/health")
    config = write_daemon_config(tmp_path / "edgevlm.yaml", broker,
                                 mqtt={"reconnect_min_s": 0.2, "reconnect_max_s": 0.5})
    daemon = Daemon(config, tmp_path / "daemon.log", env={
        "NOTIFY_SOCKET": notifications.path, "WATCHDOG_USEC": "1000000"})  # pings every 0.5 s
    try:
        state = f"{BASE}/bridge/state"
        client.inbox.wait(state, where=lambda m: m.payload == b"online" and not m.retain,
                          timeout=WAIT_S * 3)
        wait_until(lambda: notifications.pings(0) >= 2, what="watchdog pings")
        # another client takes the daemon's client id over, three times: three losses
        for _ in range(3):
            before = len(client.inbox.on(state))
            kicker = raw.RawClient.connect(broker.host, broker.port, "edgevlm-soak",
                                           clean_start=False, session_expiry=3600)
            kicker.disconnect()
            wait_until(lambda b=before: len(client.inbox.on(state)) > b,
                       what="the daemon to reconnect")
        health = client.inbox.json(f"{BASE}/bridge/health",
                                   where=lambda h: h.get("serving") is False)[-1]
        assert "reconnect loop" in health["problem"], health
        wait_until(lambda: client.inbox.on(state)[-1].payload == b"offline",
                   what="bridge/state offline")
        offline_at = time.monotonic()
        wait_until(lambda: notifications.status("cannot serve: reconnect loop"),
                   what="STATUS=cannot serve")
        time.sleep(3.0)
        assert notifications.pings(offline_at + 0.6) == 0, "watchdog pings went on"
        # left alone, the connection holds: serving again after stable_s (10 s)
        client.inbox.wait(state, where=lambda m: m.payload == b"online" and not m.retain
                          and m.timestamp > offline_at, timeout=WAIT_S)
        back = time.monotonic()
        assert client.inbox.on(state)[-1].payload == b"online"
        health = client.inbox.json(f"{BASE}/bridge/health",
                                   where=lambda h: h.get("serving") is True)[-1]
        assert health["problem"] is None and health["mqtt"]["connected"] is True
        wait_until(lambda: notifications.pings(back) >= 2, what="watchdog pings again")
        assert notifications.status("serving qwen3vl-demo as soak")
    finally:
        daemon.close()


# --------------------------------------------------------------------------- worker and engine

def ask(rid: str) -> str:
    return json.dumps(user_request(text(f"question {rid}"), id=rid, max_tokens=4))


def state_after(client: Any, payload: bytes, after: float) -> None:
    client.inbox.wait("edgevlm/node1/bridge/state", where=lambda m: m.payload == payload
                      and not m.retain and m.timestamp > after)


def test_a_stuck_worker_turns_the_daemon_offline_until_the_job_ends(
        make_service, mqtt_client, monkeypatch):
    monkeypatch.setenv(TEST_DELAY_ENV, "3000")
    service = make_service(liveness=LivenessPolicy(stuck_s=1.0, check_interval_s=0.2))
    client = mqtt_client()
    client.sub(REPLY, "edgevlm/node1/bridge/state", "edgevlm/node1/bridge/health")
    start = time.monotonic()
    client.pub("edgevlm/node1/request/describe", ask("slow"), properties=v5_properties(REPLY))
    state_after(client, b"offline", start)
    assert not service.healthy()
    health = client.inbox.json("edgevlm/node1/bridge/health",
                               where=lambda h: h.get("serving") is False)[-1]
    assert "stuck worker" in health["problem"]
    client.inbox.wait(REPLY)
    state_after(client, b"online", start)
    wait_until(service.healthy, what="healthy again")


def test_a_failing_engine_turns_the_daemon_offline_until_it_answers(
        make_service, mqtt_client, demo_engine, monkeypatch):
    service = make_service(liveness=LivenessPolicy(failures=2, check_interval_s=0.2))
    client = mqtt_client()
    client.sub(REPLY, "edgevlm/node1/bridge/state", "edgevlm/node1/bridge/health")
    original = demo_engine.generate_prepared

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the engine lost its device")

    monkeypatch.setattr(demo_engine, "generate_prepared", broken)
    start = time.monotonic()
    for rid in ("f1", "f2"):
        client.pub("edgevlm/node1/request/describe", ask(rid), properties=v5_properties(REPLY))
    assert all(a["error"]["type"] == "internal" for a in client.inbox.json(REPLY, count=2))
    state_after(client, b"offline", start)
    assert not service.healthy()
    assert "failing engine" in (service.liveness.problem or "")
    monkeypatch.setattr(demo_engine, "generate_prepared", original)
    client.pub("edgevlm/node1/request/describe", ask("ok"), properties=v5_properties(REPLY))
    state_after(client, b"online", start)
    assert service.healthy()
