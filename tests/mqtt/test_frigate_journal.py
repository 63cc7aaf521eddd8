"""Issue 21: no Frigate event is lost across a daemon SIGKILL + restart (``cache.dir``).

Frigate publishes ``frigate/events`` at QoS 0 (its ``mqtt.qos`` default), so the broker keeps
nothing for a killed daemon: the daemon's journal (:mod:`edgevlm.sources.event_journal`) must.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from edgevlm.sources.event_journal import JOURNAL_FILE, read_journal
from tests.helpers import image_bytes
from tests.mqtt.conftest import WAIT_S, Daemon, MqttTestClient, wait_until
from tests.mqtt.frigate_shapes import frigate_event

ROOT = "edgevlm/node1/camera"
CAMERAS = ["cam0", "cam1", "cam2"]
EVENTS = 50


@pytest.fixture
def daemons(broker: Any, tmp_path: Path) -> Iterator[Any]:
    config = tmp_path / "edgevlm.yaml"
    config.write_text(yaml.safe_dump({
        "mqtt": {"host": broker.host, "port": broker.port, "node_id": "node1",
                 "reconnect_min_s": 0.5, "reconnect_max_s": 2},
        "model": {"threads": 1},
        "cache": {"dir": str(tmp_path / "cache")},
        "homeassistant": {"discovery": False},
        "zeroconf": {"enabled": False},
        "cameras": {c: {"frigate": True, "frigate_events": ["end"], "max_tokens": 4}
                    for c in CAMERAS},
    }))
    started: list[Daemon] = []

    def start(delay_ms: int = 0) -> Daemon:
        daemon = Daemon(config, tmp_path / "daemon.log", delay_ms)
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        daemon.close()


def journaled(path: Path) -> set[str]:
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return set()
    out = set()
    for line in lines:
        with contextlib.suppress(ValueError, KeyError, TypeError):
            out.add(json.loads(line)["id"])
    return out


def test_a_burst_of_events_survives_a_sigkill_each_event_gets_exactly_one_record(
        daemons: Any, mqtt_client: Any, tmp_path: Path) -> None:
    """50 end events on 3 cameras while the model is slow, SIGKILL mid-burst, restart: every
    event id gets exactly one record across both processes; those the killed daemon held get
    ``skipped``/``restarted``."""
    watcher: MqttTestClient = mqtt_client()
    watcher.sub(f"{ROOT}/+/description", "edgevlm/node1/bridge/state")
    first = daemons(delay_ms=1500)
    watcher.inbox.wait("edgevlm/node1/bridge/state", where=lambda m: m.payload == b"online",
                       timeout=WAIT_S * 2)
    frigate = mqtt_client()
    ids = [f"ev{i}" for i in range(EVENTS)]
    for i, event_id in enumerate(ids):
        camera = CAMERAS[i % 3]
        frigate.pub(f"frigate/{camera}/person/snapshot", image_bytes(64, 48, seed=i),
                    qos=0, retain=True)
        frigate.pub("frigate/events", frigate_event("end", event_id, camera, "person",
                                                    best=time.time()), qos=0)
    journal = tmp_path / "cache" / JOURNAL_FILE
    wait_until(lambda: journaled(journal) >= set(ids), what="every event journaled")
    watcher.inbox.json(f"{ROOT}/+/description", where=lambda b: b.get("type") == "description",
                       timeout=WAIT_S * 2)  # the model is mid-queue: one described, more wait
    time.sleep(0.5)  # mid-job, not in the milliseconds between a record and its journal line
    first.kill()
    before = len(watcher.inbox.json(f"{ROOT}/+/description", count=0))
    assert before < EVENTS, "every event had its record before the kill: nothing to test"
    daemons()

    def records() -> dict[str, list[dict[str, Any]]] | None:
        out: dict[str, list[dict[str, Any]]] = {}
        for body in watcher.inbox.json(f"{ROOT}/+/description", count=0):
            out.setdefault(body["id"], []).append(body)
        return out if len(out) >= EVENTS else None

    wait_until(records, timeout=120, what="a record of every event")
    time.sleep(1.0)  # a second record would arrive now
    got = records()
    assert got is not None and sorted(got) == sorted(ids)
    assert all(len(v) == 1 for v in got.values()), {k: v for k, v in got.items() if len(v) > 1}
    reasons = {v[0].get("reason") for v in got.values()}
    assert "restarted" in reasons, reasons
    assert any(v[0].get("type") == "description" for v in got.values())
    wait_until(lambda: not read_journal(journal), what="no open event in the journal")
