"""The daemon against a locked-down Mosquitto: no anonymous login, a password file, a per-client
ACL and TLS (tests/reliability/secure_broker.py).

Good credentials work. Every way of getting it wrong — a wrong password, no user, no TLS, a
CA that did not sign the broker's certificate, a certificate for another host name, an
expired certificate, an ACL that denies the answers — stops the start with exactly one log
line that names the cause and the setting to change (never the password), and exit status
78 for ``edgevlm serve``. Once the daemon has been online, the same failures are retried.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from edgevlm.frontdoors.mqtt.connect_errors import EX_CONFIG
from edgevlm.service import Service, StartupFailure
from tests.helpers import text, user_request
from tests.mqtt.conftest import WAIT_S, Broker, Daemon, close_client, config_for, v5_properties
from tests.reliability.secure_broker import (
    DAEMON_PASSWORD,
    NODE,
    REPLY,
    REPLY_DENIED_ACL,
    SPY_PASSWORD,
    SPY_USER,
    Pki,
    connect_tls_client,
    daemon_mqtt,
    locked_broker,
    pki_fixture,  # noqa: F401  (the fixture `pki`)
)

BASE = f"edgevlm/{NODE}"


@pytest.fixture
def brokers(tmp_path: Path, pki: Pki) -> Iterator[Callable[..., Broker]]:
    """Factory of started locked-down brokers; stopped at teardown."""
    started: list[Broker] = []

    def start(server_cert: str | None = "server", acl: str | None = None) -> Broker:
        kwargs = {} if acl is None else {"acl": acl}
        broker = locked_broker(tmp_path / f"broker{len(started)}", pki, server_cert, **kwargs)
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.stop()


@pytest.fixture
def services(demo_engine: Any, pki: Pki) -> Iterator[Callable[..., Service]]:
    """Factory of (not started) in-process daemons with the demo model; stopped at teardown."""
    made: list[Service] = []

    def make(broker: Broker, **mqtt: Any) -> Service:
        section = daemon_mqtt(broker, pki, **mqtt)
        config = config_for(broker.host, broker.port, {
            **{f"mqtt.{k}": v for k, v in section.items()},
            "homeassistant.discovery": True})
        service = Service(config, engine=demo_engine)
        made.append(service)
        return service

    yield make
    for service in made:
        service.stop("test teardown")


def error_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The daemon's own ERROR lines (paho's socket messages, e.g. "failed to receive on
    socket: Connection reset by peer", are its logger ``edgevlm.frontdoors.mqtt.paho``)."""
    return [r.getMessage() for r in caplog.records
            if r.levelno >= logging.ERROR and r.name != "edgevlm.frontdoors.mqtt.paho"]


def ask(client: Any, rid: str) -> dict[str, Any]:
    client.pub(f"{BASE}/request/describe", user_request(text("Say hi"), id=rid, max_tokens=4),
               properties=v5_properties(REPLY))
    return client.inbox.json(REPLY, where=lambda a: a.get("id") == rid)[0]


def test_good_credentials_over_tls_connect_and_answer(brokers, services, pki):
    broker = brokers()
    service = services(broker)
    service.start(timeout=WAIT_S)
    client = connect_tls_client(broker, pki)
    try:
        client.sub(REPLY)
        answer = ask(client, "secure-1")
        assert answer["status"] == "ok", answer
        assert service.startup_failure is None
    finally:
        close_client(client)


REFUSALS = {  # case: (broker certificate or None: plain TCP, daemon's mqtt settings,
    #                 what the one line must say)
    "wrong_password": ("server", {"password": "not-the-Pa55word"},
                       ["refused the login of user 'edgevlm'", "mqtt.username / mqtt.password"]),
    "no_user": ("server", {"username": None, "password": None},
                ["refused an anonymous login", "set mqtt.username and mqtt.password"]),
    "no_tls": ("server", {"tls": False},
               ["expects TLS, but mqtt.tls is not set", "set mqtt.tls.ca"]),
    "tls_to_a_plain_port": (None, {},
                            ["answers plain MQTT, not TLS", "set mqtt.port", "mqtt.tls off"]),
    "wrong_ca": ("server", {"tls": {"ca": "OTHER_CA"}},
                 ["not signed by a CA in mqtt.tls.ca", "other_ca.crt"]),
    "wrong_hostname": ("other_host", {},
                       ["certificate is for 'other.example', not '127.0.0.1' (mqtt.host)"]),
    "expired_certificate": ("expired", {},
                            ["certificate at mqtts://127.0.0.1", "expired on 2020-01-01 00:00 UTC",
                             "renew"]),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_refused_connection_stops_the_start_with_one_clear_line(case, brokers, services, pki,
                                                                caplog):
    server_cert, mqtt, expected = REFUSALS[case]
    if mqtt.get("tls") == {"ca": "OTHER_CA"}:
        mqtt = {"tls": {"ca": str(pki.cert("other_ca"))}}
    broker = brokers(server_cert)
    service = services(broker, **mqtt)
    caplog.set_level(logging.DEBUG)
    started = time.monotonic()
    with pytest.raises(StartupFailure) as failure:
        service.start(timeout=WAIT_S)
    assert time.monotonic() - started < 10, "a permanent failure ends the start at once"
    lines = error_lines(caplog)
    assert len(lines) == 1, lines
    assert all(part in lines[0] for part in expected), lines[0]
    assert str(failure.value) == lines[0]
    assert failure.value.exit_code == EX_CONFIG
    assert not service.online.is_set()
    every_line = "\n".join(r.getMessage() for r in caplog.records)
    assert DAEMON_PASSWORD not in every_line and "not-the-Pa55word" not in every_line


def test_acl_that_denies_the_answers_is_found_by_the_startup_probe(brokers, services, pki,
                                                                   caplog):
    broker = brokers(acl=REPLY_DENIED_ACL)
    spy = connect_tls_client(broker, pki, SPY_USER, SPY_PASSWORD)
    try:
        spy.sub("edgevlm/#", "homeassistant/#")
        service = services(broker)
        caplog.set_level(logging.INFO)
        with pytest.raises(StartupFailure, match="ACL denies 2 topic"):
            service.start(timeout=WAIT_S)
        lines = error_lines(caplog)
        assert len(lines) == 2, lines
        response, discovery = sorted(lines, key=lambda line: "homeassistant" in line)
        assert f"publish to {BASE}/response/acl_probe (Not authorized)" in response
        assert f"`topic write {BASE}/response/#`" in response
        assert "homeassistant/device/" in discovery and "Home Assistant discovery" in discovery
        # the probe went through where the ACL allows it, and the daemon never said online
        spy.inbox.wait(f"{BASE}/bridge/acl_probe")
        assert not spy.inbox.on(f"{BASE}/response/#")
        assert all(m.payload != b"online" for m in spy.inbox.on(f"{BASE}/bridge/state"))
    finally:
        close_client(spy)


def test_edgevlm_serve_exits_78_on_a_wrong_password(brokers, pki, tmp_path):
    broker = brokers()
    config = tmp_path / "edgevlm.yaml"
    config.write_text(yaml.safe_dump({
        "mqtt": daemon_mqtt(broker, pki, password="wrong-Pa55word"),
        "model": {"threads": 1}, "zeroconf": {"enabled": False}}))
    daemon = Daemon(config, tmp_path / "daemon.log")
    try:
        assert daemon.proc.wait(timeout=WAIT_S * 3) == EX_CONFIG
    finally:
        daemon.close()
    log = (tmp_path / "daemon.log").read_text()
    causes = [line for line in log.splitlines() if "refused the login" in line]
    assert len(causes) == 1, log
    assert "exiting with status 78" in log
    assert "wrong-Pa55word" not in log


def test_a_running_daemon_retries_an_expired_certificate_until_it_is_renewed(
        brokers, services, pki, caplog):
    broker = brokers()
    service = services(broker)
    service.start(timeout=WAIT_S)
    caplog.set_level(logging.INFO)
    conf = broker.conf_path.read_text()
    broker.stop()
    broker.conf_path.write_text(conf.replace("/server.", "/expired."))
    broker.start()
    deadline = time.monotonic() + WAIT_S
    while not any("expired on" in line for line in error_lines(caplog)):
        assert time.monotonic() < deadline, "the expired certificate was not reported"
        time.sleep(0.05)
    time.sleep(2.5)  # a few more retries: reported once, and the daemon does not give up
    assert sum("expired on" in line for line in error_lines(caplog)) == 1
    assert service.startup_failure is None and not service.shutdown_requested.is_set()
    broker.stop()
    broker.conf_path.write_text(conf)
    broker.start()
    client = connect_tls_client(broker, pki)
    try:
        client.sub(REPLY)
        deadline = time.monotonic() + WAIT_S
        while not service.link.ready:
            assert time.monotonic() < deadline, "no reconnect after the certificate was renewed"
            time.sleep(0.05)
        assert ask(client, "after-renewal")["status"] == "ok"
    finally:
        close_client(client)
