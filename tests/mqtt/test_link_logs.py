"""What the MQTT link logs offline and at a stop: one WARNING per cause, never paho's ERROR.

paho's threaded loop logs "Client is not connected" at ERROR after every failed reconnect and
after our own DISCONNECT (issue 19); the daemon treats that as the expected state of an
offline or stopping client.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from edgevlm.frontdoors.mqtt.client import LinkSettings, MqttLink
from tests.mqtt.conftest import WAIT_S, Broker, Daemon, MqttTestClient, free_port, wait_until

LEVEL = re.compile(r"^\S+ \S+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) ", re.MULTILINE)


def levels(log: str, *wanted: str) -> list[str]:
    """The lines of ``log`` at one of the ``wanted`` levels."""
    return [line for line in log.splitlines()
            if (m := LEVEL.match(line)) is not None and m.group(1) in wanted]


def test_serve_without_a_broker_warns_once_and_repeats_at_debug(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    log_path = tmp_path / "serve.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGEVLM_")}
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "edgevlm", "serve", "--mqtt-host", "127.0.0.1",
             "--mqtt-port", str(port), "--no-zeroconf", "--no-discovery", "--threads", "1",
             "--set", "mqtt.reconnect_min_s=0.2", "--set", "mqtt.reconnect_max_s=0.3",
             "--log-level", "debug"], stdout=subprocess.DEVNULL, stderr=log_file, env=env)
        try:
            wait_until(lambda: log_path.read_text().count("cannot reach the MQTT broker") >= 5,
                       what="five failed connection attempts")
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(WAIT_S) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(WAIT_S)
    log = log_path.read_text()
    warnings = levels(log, "WARNING")
    assert len(warnings) == 1 and "cannot reach the MQTT broker" in warnings[0], log[-3000:]
    assert levels(log, "ERROR", "CRITICAL") == [], log[-3000:]
    repeats = [line for line in levels(log, "DEBUG") if "cannot reach the MQTT broker" in line]
    assert len(repeats) >= 4


def test_sigterm_of_a_serving_daemon_logs_no_error(
        broker: Broker, mqtt_client: Callable[..., MqttTestClient], tmp_path: Path) -> None:
    config = tmp_path / "edgevlm.yaml"
    config.write_text(yaml.safe_dump({
        "mqtt": {"host": broker.host, "port": broker.port, "node_id": "node1"},
        "model": {"threads": 1}, "homeassistant": {"discovery": False},
        "zeroconf": {"enabled": False}}))
    watcher = mqtt_client()
    watcher.sub("edgevlm/node1/bridge/state")
    daemon = Daemon(config, tmp_path / "daemon.log")
    try:
        watcher.inbox.wait("edgevlm/node1/bridge/state", where=lambda m: m.payload == b"online")
        assert daemon.terminate() == 0
    finally:
        daemon.close()
    log = daemon.log.read_text()
    assert "stopping (signal)" in log
    assert levels(log, "ERROR", "CRITICAL") == [], log[-3000:]
    watcher.inbox.wait("edgevlm/node1/bridge/state", where=lambda m: m.payload == b"offline")


def test_a_link_stops_without_an_error(broker: Broker, caplog: pytest.LogCaptureFixture
                                       ) -> None:
    """The race of a stop (our DISCONNECT against paho's next loop turn), repeated."""
    caplog.set_level(logging.DEBUG)
    settings = LinkSettings(host=broker.host, port=broker.port, client_id="link-stop",
                            protocol5=True, keepalive=30, will_topic="test/link/state",
                            clean_start=True, session_expiry_s=0)
    for _ in range(5):
        ready = threading.Event()
        link = MqttLink(settings, on_message=lambda msg: None,
                        on_ready=lambda present, ready=ready: ready.set())
        link.set_subscriptions(["test/link/in"])
        link.start()
        assert ready.wait(WAIT_S)
        link.publish("test/link/out", b"x", qos=1)
        link.stop()
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert errors == [], [r.getMessage() for r in errors]
