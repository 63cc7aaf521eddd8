"""Faults: a full queue, expired requests, a broker restart and a daemon killed mid-request.

``EDGEVLM_TEST_WORKER_DELAY_MS`` (test-only) makes the worker sleep before each job, which
turns "mid-request" into a window of known length instead of a race.
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
import yaml

from edgevlm.service import TEST_DELAY_ENV
from tests.helpers import text, user_request
from tests.mqtt.conftest import WAIT_S, Daemon, v5_properties, wait_until

BASE = "edgevlm/node1"
REPLY = "edgevlm/clients/faults/reply"


def ask(rid: str, **fields: Any) -> dict[str, Any]:
    return user_request(text(f"question {rid}"), id=rid, max_tokens=4, **fields)


def answers(client: Any, count: int = 1) -> dict[str, dict[str, Any]]:
    return {a["id"]: a for a in client.inbox.json(REPLY, count=count)}


def fill_the_queue(service: Any, mqtt_client: Any) -> tuple[Any, Any]:
    """With ``limits.max_queue: 1`` and a worker delay: "running" on the worker, "queued" in
    the queue, so the next request is answered ``busy``. Returns the client (subscribed to
    REPLY) and the properties that send its answers there."""
    client = mqtt_client()
    client.sub(REPLY)
    props = v5_properties(REPLY)
    client.pub(f"{BASE}/request/describe", ask("running"), properties=props)
    wait_until(lambda: service.metrics.busy, what="the first request to start")
    client.pub(f"{BASE}/request/describe", ask("queued"), properties=props)
    return client, props


def test_full_queue_answers_busy_and_keeps_the_queued_ones(make_service, mqtt_client,
                                                           monkeypatch, engine_calls):
    monkeypatch.setenv(TEST_DELAY_ENV, "1500")
    service = make_service(**{"limits.max_queue": 1})
    client, props = fill_the_queue(service, mqtt_client)
    client.pub(f"{BASE}/request/describe", ask("refused"), properties=props)
    got = answers(client, 3)
    assert got["refused"]["status"] == "error" and got["refused"]["error"]["type"] == "busy"
    assert got["running"]["status"] == "ok" and got["queued"]["status"] == "ok"
    assert engine_calls == ["running", "queued"]
    r = service.metrics.snapshot()["requests"]
    assert (r["received"], r["answered"], r["errored"], r["in_progress"]) == (3, 2, 1, 0)


def test_expired_requests_are_not_run_and_get_deadline_exceeded(make_service, mqtt_client,
                                                                 monkeypatch, engine_calls):
    monkeypatch.setenv(TEST_DELAY_ENV, "2500")
    service = make_service()
    client = mqtt_client()
    client.sub(REPLY)
    client.pub(f"{BASE}/request/describe", ask("first"), properties=v5_properties(REPLY))
    wait_until(lambda: service.metrics.busy, what="the first request to start")
    client.pub(f"{BASE}/request/describe", ask("short-deadline", deadline_ms=200),
               properties=v5_properties(REPLY))
    client.pub(f"{BASE}/request/describe", ask("v5-expiry"),
               properties=v5_properties(REPLY, expiry_s=1))
    got = answers(client, 3)
    assert got["first"]["status"] == "ok"
    for rid in ("short-deadline", "v5-expiry"):
        assert got[rid]["status"] == "error"
        assert got[rid]["error"]["type"] == "deadline_exceeded"
    assert engine_calls == ["first"], "expired requests never reach the engine"


def test_request_in_flight_during_broker_restart_is_answered_after_reconnect(
        broker, make_service, mqtt_client, monkeypatch, engine_calls):
    monkeypatch.setenv(TEST_DELAY_ENV, "2500")
    service = make_service(**{"mqtt.reconnect_min_s": 0.5, "mqtt.reconnect_max_s": 2})
    client = mqtt_client(client_id="fault-client", clean=False)
    client.sub(REPLY)
    client.pub(f"{BASE}/request/describe", ask("across-restart"),
               properties=v5_properties(REPLY, b"restart"))
    wait_until(lambda: service.metrics.busy, what="the request to start")
    broker.restart()
    answer = client.inbox.json(REPLY, timeout=WAIT_S * 2)[0]
    assert answer["id"] == "across-restart" and answer["status"] == "ok"
    assert engine_calls == ["across-restart"], "inferred once, even if redelivered"
    wait_until(lambda: service.metrics.snapshot()["mqtt"]["reconnects"] >= 1,
               what="the reconnect to be counted")
    # the daemon resubscribed and republished its state after the reconnect
    client.pub(f"{BASE}/request/describe", ask("after-restart"), properties=v5_properties(REPLY))
    client.inbox.json(REPLY, where=lambda a: a["id"] == "after-restart")
    watcher = mqtt_client()
    watcher.sub(f"{BASE}/bridge/state")
    assert watcher.inbox.wait(f"{BASE}/bridge/state")[0].payload == b"online"


def test_answer_finished_while_the_broker_is_down_is_sent_after_reconnect(
        broker, make_service, mqtt_client, monkeypatch, engine_calls):
    monkeypatch.setenv(TEST_DELAY_ENV, "1000")
    service = make_service(**{"mqtt.reconnect_min_s": 0.5, "mqtt.reconnect_max_s": 2})
    client = mqtt_client(client_id="outage-client", clean=False)
    client.sub(REPLY)
    client.pub(f"{BASE}/request/describe", ask("during-outage"),
               properties=v5_properties(REPLY, b"outage"))
    wait_until(lambda: service.metrics.busy, what="the request to start")
    broker.stop()
    wait_until(lambda: service.metrics.snapshot()["requests"]["answered"] == 1,
               what="the answer to be ready while the broker is down")
    assert not service.link.connected
    broker.start()
    answer = client.inbox.json(REPLY, timeout=WAIT_S * 2)[0]
    assert answer["id"] == "during-outage" and answer["status"] == "ok"
    assert engine_calls == ["during-outage"]
    wait_until(lambda: service.replier.outstanding == 0,
               what="the request to be acknowledged after the answer was confirmed")


def test_requests_redelivered_after_lost_acks_are_acknowledged_not_answered_again(
        make_service, mqtt_client, monkeypatch, engine_calls):
    """A connection reset loses the acks the broker had not read yet, and it redelivers those
    requests (DUP) after the reconnect. Each was answered once, and its copy is only
    acknowledged: an answer, a ``busy`` and a refusal alike (the last two are not remembered
    for a client's retry, yet a redelivered copy is no retry)."""
    monkeypatch.setenv(TEST_DELAY_ENV, "1000")
    session = {"mqtt.client_id": "edgevlm-lost-acks", "limits.max_queue": 1,
               "mqtt.reconnect_min_s": 0.2, "mqtt.reconnect_max_s": 1}
    service = make_service(**session)
    held: list[int] = []
    real_ack = service.link.ack
    monkeypatch.setattr(service.link, "ack", lambda mid, qos: held.append(mid))
    client, props = fill_the_queue(service, mqtt_client)
    client.pub(f"{BASE}/request/describe", ask("busy"), properties=props)
    client.pub(f"{BASE}/request/describe", {"v": 1, "id": "bad", "messages": []},
               properties=props)
    got = answers(client, 4)
    assert {rid: a.get("error", {}).get("type", a["status"]) for rid, a in got.items()} == {
        "running": "ok", "queued": "ok", "busy": "busy", "bad": "invalid_request"}
    wait_until(lambda: len(held) == 4, what="the four acks (held back: lost in the reset)")
    deduplicated = service.metrics.snapshot()["requests"]["deduplicated"]

    monkeypatch.setattr(service.link, "ack", real_ack)
    service.link._client.socket().shutdown(socket.SHUT_RDWR)   # the connection drops
    wait_until(lambda: service.metrics.snapshot()["requests"]["deduplicated"]
               == deduplicated + 4, what="the four redelivered copies")
    wait_until(lambda: service.replier.outstanding == 0, what="the copies to be acknowledged")
    time.sleep(0.5)
    assert len(client.inbox.on(REPLY)) == 4, "a redelivered copy was answered again"
    assert engine_calls == ["running", "queued"]
    service.stop("restart on the same session")
    again = make_service(**session)
    time.sleep(1.0)  # a request still unacknowledged would be redelivered right away
    assert again.metrics.snapshot()["requests"]["received"] == 0, "a copy was not acked"


# --------------------------------------------------------------------------- subprocess daemon

@pytest.fixture
def daemon_config(broker, tmp_path: Path) -> Path:
    path = tmp_path / "edgevlm.yaml"
    path.write_text(yaml.safe_dump({
        "mqtt": {"host": broker.host, "port": broker.port, "node_id": "node1",
                 "reconnect_min_s": 0.5, "reconnect_max_s": 2},
        "model": {"threads": 1},
        "homeassistant": {"discovery": False},
        "zeroconf": {"enabled": False},
    }))
    return path


@pytest.fixture
def daemons(daemon_config: Path, tmp_path: Path) -> Iterator[Any]:
    started: list[Daemon] = []

    def start(delay_ms: int = 0, env: dict[str, str] | None = None) -> Daemon:
        daemon = Daemon(daemon_config, tmp_path / "daemon.log", delay_ms, env)
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        daemon.close()


def test_request_of_a_daemon_killed_mid_request_is_answered_by_the_restarted_daemon(
        mqtt_client, daemons, tmp_path):
    client = mqtt_client()
    client.sub(REPLY, f"{BASE}/bridge/state", f"{BASE}/bridge/busy")
    first = daemons(delay_ms=5000)
    client.inbox.wait(f"{BASE}/bridge/state", where=lambda m: m.payload == b"online",
                      timeout=WAIT_S * 2)
    client.pub(f"{BASE}/request/describe", ask("survives-kill"),
               properties=v5_properties(REPLY, b"kill"))
    client.inbox.wait(f"{BASE}/bridge/busy", where=lambda m: m.payload == b"ON")
    first.kill()
    assert not client.inbox.on(REPLY), "killed before answering"
    second = daemons()
    message = client.inbox.wait(REPLY, timeout=WAIT_S * 2)[0]
    answer = json.loads(message.payload)
    assert answer["id"] == "survives-kill" and answer["status"] == "ok", answer
    assert message.properties.CorrelationData == b"kill"
    # SIGTERM: graceful stop, "offline" published, exit code 0
    assert second.terminate() == 0, (tmp_path / "daemon.log").read_text()
    client.inbox.wait(f"{BASE}/bridge/state", where=lambda m: m.payload == b"offline")


def test_systemd_notify_ready_watchdog_and_stopping(daemons, tmp_path):
    path = str(tmp_path / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.settimeout(WAIT_S)
        daemon = daemons(env={"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "300000"})
        seen: list[str] = []
        while not any(m.startswith("WATCHDOG=1") for m in seen):
            seen.append(sock.recv(4096).decode())
        assert seen[0].startswith("READY=1\nSTATUS=serving qwen3vl-demo")
        assert daemon.terminate() == 0
        while "STOPPING=1" not in seen:
            seen.append(sock.recv(4096).decode())


def test_sigterm_finishes_the_running_request_and_refuses_queued_ones(
        make_service, mqtt_client, monkeypatch, engine_calls):
    monkeypatch.setenv(TEST_DELAY_ENV, "1500")
    service = make_service()
    client = mqtt_client()
    client.sub(REPLY, f"{BASE}/bridge/state")
    client.pub(f"{BASE}/request/describe", ask("running"), properties=v5_properties(REPLY))
    wait_until(lambda: service.metrics.busy, what="the request to start")
    client.pub(f"{BASE}/request/describe", ask("waiting"), properties=v5_properties(REPLY))
    wait_until(lambda: len(service.queue) == 1, what="the second request to queue")
    service.stop("SIGTERM")
    got = answers(client, 2)
    assert got["running"]["status"] == "ok"
    assert got["waiting"]["error"]["type"] == "busy"
    assert "stopping" in got["waiting"]["error"]["message"]
    client.inbox.wait(f"{BASE}/bridge/state", where=lambda m: m.payload == b"offline")
    assert engine_calls == ["running"]


# --------------------------------------------------------------------------- internal errors


def test_exceptions_in_admission_and_engine_become_internal_answers(
        make_service, mqtt_client, monkeypatch, demo_engine):
    import dataclasses

    from edgevlm import verbs

    service = make_service()
    real_admit = verbs.REGISTRY["describe"].admit
    original = demo_engine.generate_prepared

    def admit(payload: bytes, side: Any) -> Any:
        if b"admit-bug" in payload:
            raise RuntimeError("a bug in admission")
        return real_admit(payload, side)

    def generate(request: Any, *args: Any, **kwargs: Any) -> Any:
        if request.id == "engine-bug":
            raise RuntimeError("a bug in the engine")
        return original(request, *args, **kwargs)

    monkeypatch.setitem(verbs.REGISTRY, "describe",
                        dataclasses.replace(verbs.REGISTRY["describe"], admit=admit))
    monkeypatch.setattr(demo_engine, "generate_prepared", generate)
    client = mqtt_client()
    client.sub(REPLY)
    for rid in ("admit-bug", "engine-bug", "fine"):
        client.pub(f"{BASE}/request/describe", ask(rid), properties=v5_properties(REPLY))
    got = answers(client, 3)
    assert got["fine"]["status"] == "ok"
    for rid in ("admit-bug", "engine-bug"):
        assert got[rid]["error"]["type"] == "internal"
        assert "RuntimeError" in got[rid]["error"]["message"]
    assert service.worker.alive and service.link.network_thread_alive()
    r = service.metrics.snapshot()["requests"]
    assert r["received"] == r["answered"] + r["errored"] + r["in_progress"]
    assert r["errors_by_type"] == {"internal": 2}


def test_watchdog_exits_the_process_when_the_network_thread_dies(broker):
    from edgevlm.frontdoors.mqtt.client import WATCHDOG_EXIT_CODE, LinkSettings, MqttLink

    exits: list[int] = []
    ready = threading.Event()
    link = MqttLink(LinkSettings(host=broker.host, port=broker.port, client_id="watched",
                                 protocol5=True, keepalive=30, will_topic="edgevlm/w/state"),
                    on_message=lambda m: None, on_ready=lambda present: ready.set(),
                    exit_process=exits.append)
    link.start()
    try:
        assert ready.wait(WAIT_S)
        assert link.network_thread_alive()
        link._client.loop_stop()  # the network thread ends without stop(): a dead thread
        wait_until(lambda: exits, what="the watchdog")
        assert exits == [WATCHDOG_EXIT_CODE]
    finally:
        link.stop()


def test_messages_over_the_brokers_maximum_packet_size_are_not_sent(
        tmp_path, demo_engine, monkeypatch):
    """Mosquitto announces max_packet_size in CONNACK; paho alone would send, be
    disconnected and reconnect in a loop. An answer too big becomes payload_too_large."""
    from dataclasses import replace

    from edgevlm.frontdoors.mqtt.client import PacketTooLarge, publish_packet_size
    from edgevlm.service import Service
    from tests.mqtt.conftest import (
        Broker,
        close_client,
        config_for,
        connect_client,
        mosquitto_binary,
    )

    directory = tmp_path / "small-broker"
    directory.mkdir()
    binary = mosquitto_binary()
    assert binary is not None
    broker = Broker(directory, binary, extra_conf="max_packet_size 2048\n")
    broker.start()
    original = demo_engine.generate_prepared

    def long_answer(request: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(request, *args, **kwargs)
        return replace(result, text="word " * 1000) if request.id == "huge" else result

    monkeypatch.setattr(demo_engine, "generate_prepared", long_answer)
    service = Service(config_for(broker.host, broker.port, {
        "homeassistant.discovery": False}), engine=demo_engine)
    client = connect_client(broker.host, broker.port)
    try:
        service.start(timeout=WAIT_S)
        assert service.link.max_packet_size == 2048
        big = "edgevlm/node1/big"
        client.sub(REPLY, big)
        n = next(n for n in range(2048, 0, -1)
                 if publish_packet_size(big, b"x" * n, 1, None, True) <= 2048)
        assert publish_packet_size(big, b"x" * n, 1, None, True) == 2048
        service.link.publish(big, b"x" * n)  # exactly the limit: the broker takes it
        assert len(client.inbox.wait(big)[0].payload) == n
        with pytest.raises(PacketTooLarge):
            service.link.publish(big, b"x" * (n + 1))
        for rid in ("huge", "small"):
            client.pub(f"{BASE}/request/describe", ask(rid), properties=v5_properties(REPLY))
        got = answers(client, 2)
        assert got["huge"]["error"]["type"] == "payload_too_large"
        assert got["small"]["status"] == "ok"
        assert service.link.connects == 1, "never disconnected for an oversize packet"
    finally:
        close_client(client)
        service.stop("test teardown")
        broker.stop()
