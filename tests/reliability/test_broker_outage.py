"""Broker outages of 3 s and 30 s (and 5 min with ``EDGEVLM_LONG=1``).

The daemon (in-process, the demo model, the *default* reconnect settings) runs with a worker
that takes 1 s per job (the test-only ``EDGEVLM_TEST_WORKER_DELAY_MS``), so requests are
still queued in it when the broker (real Mosquitto, persistence on) stops. While the broker is
down nobody can publish; so there are two kinds of requests "published while the daemon was
away":

- *before*: published just before the stop; the daemon holds them (running or queued) and
  answers them during the outage (paho keeps the answers and sends them after the reconnect),
  or ``deadline_exceeded`` when their Message Expiry (1 s) ran out before they could start;
- *after*: published by a client in the seconds between the broker's return and the daemon's
  reconnect (the daemon waits out its back-off); the broker queues them in the daemon's
  persistent session. One with a 2 s expiry may expire in the broker (the documented rule:
  never run, dropped by the broker); the other must be answered.

Asserted: the daemon is back (resubscribed, ``bridge/state = online`` republished) within
10 s of the broker's return, republishes ``bridge/info`` and Home Assistant discovery, and
every request is answered or expired by its deadline, none twice.
"""

from __future__ import annotations

import time

import pytest

from edgevlm.config import MQTTConfig
from edgevlm.service import TEST_DELAY_ENV
from tests.reliability.conftest import (
    BASE,
    LoadClient,
    connect_client,
    request_payload,
)
from tests.reliability.ledger import Ledger
from tests.reliability.profile import LONG
from tests.reliability.test_soak import write_report

OUTAGES_S = (3, 30, 300) if LONG else (3, 30)
BACK_WITHIN_S = 10.0
SHORT_S, LONG_S = 1, 600


def test_the_default_back_off_brings_the_daemon_back_within_10_s():
    """paho doubles the delay up to the cap, and waits the cap between attempts however long
    the outage; the daemon is back at most ``cap`` after the broker (plus the connect)."""
    defaults = MQTTConfig()
    assert defaults.reconnect_min_s <= defaults.reconnect_max_s <= BACK_WITHIN_S / 2


@pytest.mark.parametrize("outage_s", OUTAGES_S)
def test_broker_outage_reconnects_republishes_and_answers(outage_s, broker, make_service,
                                                          mqtt_client, frames, monkeypatch):
    monkeypatch.setenv(TEST_DELAY_ENV, "1000")
    service = make_service(**{"mqtt.node_id": "soak", "homeassistant.discovery": True})
    ledger = Ledger()
    load = LoadClient(broker, ledger)
    watcher = mqtt_client(client_id="outage-watcher", clean=False)
    watcher.sub("homeassistant/#", f"{BASE}/bridge/info")
    phase = f"outage-{outage_s}s"

    for i, expiry in enumerate((LONG_S, LONG_S, SHORT_S, LONG_S)):
        load.send(f"before-{i}", request_payload(f"before-{i}", frames[i]), phase, expiry)
    load.client.loop_stop()  # the load client stays away during the outage (not needed)
    time.sleep(0.3)          # the requests reached the daemon; the first one is running
    fault = ledger.fault(phase)
    load.online.clear()
    broker.stop()
    time.sleep(outage_s)
    broker.start()
    back = time.monotonic()

    early = connect_client(broker.host, broker.port)  # faster than the daemon's back-off
    daemon_away = not service.link.connected
    load.client.loop_start()
    for i, expiry in enumerate((LONG_S, 2)):
        rid = f"after-{i}"
        load.send(rid, request_payload(rid, frames[4 + i]), phase, expiry)
    early.disconnect()

    assert load.online.wait(BACK_WITHIN_S + 5), "bridge/state online not republished"
    fault.end = time.monotonic()
    reconnect_s = fault.end - back
    assert service.link.ready and service.link.connects == 2
    watcher.inbox.wait(f"{BASE}/bridge/info", where=lambda m: not m.retain)
    watcher.inbox.wait("homeassistant/#", where=lambda m: not m.retain)
    deadline = time.monotonic() + 30
    while not ledger.settled() and time.monotonic() < deadline:
        time.sleep(0.2)
    summary = ledger.summary()
    write_report(phase, {"outage_s": outage_s, "reconnect_after_return_s": round(reconnect_s, 2),
                         "daemon_away_when_after_requests_sent": daemon_away,
                         "summary": {**summary.__dict__, "lost": summary.lost}})
    load.close()

    assert reconnect_s <= BACK_WITHIN_S, f"back {reconnect_s:.1f} s after the broker"
    assert not summary.lost and not summary.unexpected, summary.line()
    assert summary.duplicates == 0 and summary.unknown == 0, summary.line()
    first = {rid: f[0] for rid, f in ledger.finals.items()}
    for rid in ("before-0", "before-1", "before-3", "after-0"):
        assert first[rid].status == "ok", (rid, first[rid])
    assert first["before-2"].error_type == "deadline_exceeded", first["before-2"]
    if daemon_away and reconnect_s > 2 + ledger.grace_s:
        assert "after-1" not in first, "expired in the broker: never run"
