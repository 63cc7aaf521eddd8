"""Fixtures for the reliability tests: ~100 KB frames, a load client that keeps a ledger,
a daemon in a child process, and the faults (connection reset, RSS).

The broker and the daemon are the real ones of tests/mqtt (``Broker``, ``Daemon``); the
fixtures of tests/mqtt/conftest.py are re-exported here so the tests in this directory can
use them.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from PIL import Image

from tests.helpers import data_url
from tests.mqtt import conftest as mqtt_fixtures
from tests.mqtt.conftest import Broker, Daemon, MqttTestClient, connect_client, v5_properties
from tests.reliability.ledger import Ledger

# the fixtures of tests/mqtt, for the tests of this directory
broker = mqtt_fixtures.broker
mqtt_client = mqtt_fixtures.mqtt_client
make_config = mqtt_fixtures.make_config
demo_engine = mqtt_fixtures.demo_engine
make_service = mqtt_fixtures.make_service
engine_calls = mqtt_fixtures.engine_calls

FIXTURE_PHOTO = Path(__file__).parent.parent / "fixtures" / "images" / "rgb_640x480.jpg"
FRAME_BYTES = 100_000


# --------------------------------------------------------------------------- frames

@dataclass(frozen=True)
class Frame:
    data: bytes
    mime: str

    @property
    def url(self) -> str:
        return data_url(self.data, self.mime)


def _encode_near(pixels: np.ndarray, fmt: str, target: int) -> bytes:
    """Encode ``pixels`` as ``fmt`` with a size near ``target`` bytes (JPEG: by quality)."""
    image = Image.fromarray(pixels, "RGB")
    best = b""
    for quality in (95, 92, 88, 84, 80, 75, 70) if fmt == "JPEG" else (None,):
        buf = io.BytesIO()
        image.save(buf, fmt, **({"quality": quality} if quality else {"optimize": False}))
        best = buf.getvalue()
        if len(best) <= target * 1.1:
            break
    return best


def make_frames(count: int, seed: int = 7) -> list[Frame]:
    """``count`` different ~100 KB frames (3 of 4 JPEG, 1 of 4 PNG): the fixture photo
    shifted, mirrored and with sensor-like noise, so that no two frames share pixels."""
    photo = np.asarray(Image.open(FIXTURE_PHOTO).convert("RGB"), dtype=np.int16)
    rng = np.random.default_rng(seed)
    frames = []
    for i in range(count):
        shifted = np.roll(photo, (int(rng.integers(0, 480)), int(rng.integers(0, 640))),
                          axis=(0, 1))
        if i % 2:
            shifted = shifted[:, ::-1]
        if i % 4 == 3:  # PNG: a 240x176 crop with noise is about 100 KB
            crop = shifted[:176, :240] + rng.integers(-24, 24, size=(176, 240, 3))
            pixels = np.clip(crop, 0, 255).astype(np.uint8)
            frames.append(Frame(_encode_near(pixels, "PNG", FRAME_BYTES), "image/png"))
            continue
        pixels = np.clip(shifted + rng.integers(-8, 8, size=shifted.shape), 0, 255)
        frames.append(Frame(_encode_near(pixels.astype(np.uint8), "JPEG", FRAME_BYTES),
                            "image/jpeg"))
    return frames


@pytest.fixture(scope="session")
def frames() -> list[Frame]:
    return make_frames(32)


# --------------------------------------------------------------------------- the load client

NODE = "soak"
BASE = f"edgevlm/{NODE}"
REQUEST_TOPIC = f"{BASE}/request/describe"
REPLY = "edgevlm/clients/soak/reply"


def request_payload(rid: str, frame: Frame, max_tokens: int = 4) -> bytes:
    return json.dumps({"v": 1, "id": rid, "max_tokens": max_tokens, "messages": [
        {"role": "user", "content": [{"type": "image", "image": frame.url},
                                     {"type": "text", "text": "What is in the picture?"}]}],
    }).encode()


class LoadClient:
    """A persistent-session v5 client that sends requests and records them in a ledger.

    Answers go to ``reply`` (default ``REPLY``) with the request id as Correlation Data;
    ``online`` is set by a live (not retained) ``bridge/state = online``: the daemon is back."""

    def __init__(self, broker: Broker, ledger: Ledger, name: str = "soak-client",
                 reply: str = REPLY) -> None:
        self.ledger = ledger
        self.reply = reply
        self.client: MqttTestClient = connect_client(broker.host, broker.port,
                                                     client_id=name, clean=False)
        self.online = threading.Event()
        self.replied = threading.Event()
        self.client.on_message = self._on_message
        self.client.sub(reply, f"{BASE}/bridge/state")

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        try:
            if msg.topic == self.reply:
                props = getattr(msg, "properties", None)
                self.ledger.record_reply(msg.payload, getattr(props, "CorrelationData", None),
                                         redelivered=bool(msg.dup))
                self.replied.set()
            elif msg.payload == b"online" and not msg.retain:
                self.online.set()
        except Exception:  # never kill paho's thread; the ledger then shows it as lost
            pass

    def send(self, rid: str, payload: bytes, phase: str, expiry_s: int,
             expect: str = "ok", queued: bool = True) -> None:
        """Publish (QoS 1, not waiting for the PUBACK: paho resends across reconnects);
        ``queued``: the request passes admission (it may also be answered busy)."""
        self.ledger.record_sent(rid, expiry_s, phase, expect, queued)
        self.client.publish(REQUEST_TOPIC, payload, qos=1, properties=v5_properties(
            self.reply, rid.encode(), expiry_s=expiry_s))

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


# --------------------------------------------------------------------------- the daemon

def write_daemon_config(path: Path, broker: Broker, **sections: dict[str, Any]) -> Path:
    """An ``edgevlm serve`` config for ``broker`` (node ``soak``); ``sections`` override."""
    config: dict[str, Any] = {
        "mqtt": {"host": broker.host, "port": broker.port, "node_id": NODE},
        "model": {"threads": 1},
        "homeassistant": {"discovery": False},
        "zeroconf": {"enabled": False},
    }
    for name, values in sections.items():
        config.setdefault(name, {}).update(values)
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def soak_daemon(broker: Broker, tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    """Start ``edgevlm serve`` children (the same config each time); killed at teardown."""
    started: list[Daemon] = []

    def start(**sections: dict[str, Any]) -> Daemon:
        config = write_daemon_config(tmp_path / "edgevlm.yaml", broker, **sections)
        daemon = Daemon(config, tmp_path / "daemon.log")
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        daemon.close()


def rss_bytes(pid: int) -> int:
    """Resident memory of a process (VmRSS in /proc/<pid>/status)."""
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
    assert match, f"no VmRSS for pid {pid}"
    return int(match.group(1)) * 1024


def reset_connection(pid: int, broker_port: int) -> int:
    """Destroy the TCP connection(s) of process ``pid`` to the broker, as a NAT timeout or a
    Wi-Fi drop would (``ss -K``: the socket is aborted, the broker sees a reset). Returns the
    number of connections reset; needs root (or CAP_NET_ADMIN) and INET_DIAG_DESTROY."""
    listing = subprocess.run(["ss", "-tnpH", "state", "established", "dport", "=",
                              f":{broker_port}"], capture_output=True, text=True, check=True)
    ports = [line.split()[2].rsplit(":", 1)[1] for line in listing.stdout.splitlines()
             if f"pid={pid}," in line]
    for port in ports:
        subprocess.run(["ss", "-K", "-tn", "src", "127.0.0.1", "sport", "=", f":{port}",
                        "dst", "127.0.0.1", "dport", "=", f":{broker_port}"],
                       capture_output=True, check=True)
    return len(ports)
