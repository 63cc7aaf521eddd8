"""Fixtures for the MQTT tests: a real Mosquitto broker, configs that point at it, clients.

Never a mock broker: ``broker`` starts ``/usr/sbin/mosquitto`` (or the one on PATH) as a child
process on 127.0.0.1, a free port and its own directory, with persistence on, so
``broker.restart()`` keeps persistent sessions and queued QoS 1 messages.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from edgevlm.config import Config, validate_config
from edgevlm.service import TEST_DELAY_ENV

WAIT_S = 20.0  # generous: the machine is shared with a CPU-heavy job


def mosquitto_binary() -> str | None:
    found = shutil.which("mosquitto")
    if found:
        return found
    return "/usr/sbin/mosquitto" if Path("/usr/sbin/mosquitto").exists() else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(predicate: Callable[[], Any], timeout: float = WAIT_S, interval: float = 0.02,
               what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy; fail the test on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


class Broker:
    """A real mosquitto child process on 127.0.0.1 with persistence in ``data_dir``."""

    def __init__(self, directory: Path, binary: str, extra_conf: str = "") -> None:
        self.host = "127.0.0.1"
        self.port = free_port()
        self.data_dir = directory
        self.binary = binary
        self.log_path = directory / "mosquitto.log"
        self.conf_path = directory / "mosquitto.conf"
        self.proc: subprocess.Popen[bytes] | None = None
        self.conf_path.write_text(
            f"user {pwd.getpwuid(os.getuid()).pw_name}\n"  # as root it would drop to "mosquitto"
            f"listener {self.port} 127.0.0.1\n"
            "allow_anonymous true\n"
            "persistence true\n"
            f"persistence_location {directory}/\n"
            "autosave_interval 1\n"
            "set_tcp_nodelay true\n"
            "max_queued_messages 1000\n"
            f"log_dest file {self.log_path}\n"
            "log_type error\nlog_type warning\nlog_type notice\nlog_type information\n"
            + extra_conf)

    def start(self) -> None:
        assert self.proc is None, "broker already running"
        deadline = time.monotonic() + WAIT_S
        while True:  # the port may linger in TIME_WAIT right after a stop
            self.proc = subprocess.Popen([self.binary, "-c", str(self.conf_path)],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            if self._wait_listening(deadline):
                return
            err = self._reap()
            if time.monotonic() > deadline:
                raise RuntimeError(f"mosquitto did not start on port {self.port}: {err}")
            time.sleep(0.2)

    def _wait_listening(self, deadline: float) -> bool:
        assert self.proc is not None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            with contextlib.suppress(OSError), socket.create_connection(
                    (self.host, self.port), timeout=0.5):
                return True
            time.sleep(0.05)
        return False

    def _reap(self) -> str:
        if self.proc is None:
            return ""
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        _, err = self.proc.communicate(timeout=10)
        self.proc = None
        return err.decode(errors="replace").strip()

    def stop(self) -> None:
        """SIGTERM: mosquitto writes its persistence file and exits."""
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    binary = mosquitto_binary()
    if binary is None:
        pytest.fail("mosquitto is not installed (apt-get install mosquitto; .ci/run does this)")
    directory = tmp_path / "broker"
    directory.mkdir()
    b = Broker(directory, binary)
    b.start()
    try:
        yield b
    finally:
        b.stop()


def nested(overrides: dict[str, Any]) -> dict[str, Any]:
    """{"mqtt.node_id": "n1"} -> {"mqtt": {"node_id": "n1"}}."""
    out: dict[str, Any] = {}
    for dotted, value in overrides.items():
        *path, last = dotted.split(".")
        node = out
        for key in path:
            node = node.setdefault(key, {})
        node[last] = value
    return out


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def config_for(host: str, port: int, overrides: dict[str, Any] | None = None) -> Config:
    """A Config for tests: the broker, node ``node1``, one engine thread, no zeroconf."""
    base = nested({"mqtt.host": host, "mqtt.port": port, "mqtt.node_id": "node1",
                   "model.threads": 1, "zeroconf.enabled": False})
    return validate_config(_merge(base, nested(overrides or {})), "test config")


@pytest.fixture
def make_config(broker: Broker, tmp_path: Path) -> Callable[..., Config]:
    """A Config pointing at ``broker``; keyword/dotted overrides, e.g.
    ``make_config(**{"mqtt.node_id": "n1", "limits.max_queue": 2})``."""

    def make(overrides: dict[str, Any] | None = None, **kwargs: Any) -> Config:
        return config_for(broker.host, broker.port, {**(overrides or {}), **kwargs})

    return make


class Inbox:
    """Messages received by a test client, waitable by topic."""

    def __init__(self) -> None:
        self.messages: list[paho.MQTTMessage] = []
        self._cond = threading.Condition()

    def add(self, message: paho.MQTTMessage) -> None:
        with self._cond:
            self.messages.append(message)
            self._cond.notify_all()

    def on(self, topic: str) -> list[paho.MQTTMessage]:
        with self._cond:
            return [m for m in self.messages if paho.topic_matches_sub(topic, m.topic)]

    def wait(self, topic: str, count: int = 1, timeout: float = WAIT_S,
             where: Callable[[paho.MQTTMessage], bool] | None = None) -> list[paho.MQTTMessage]:
        """At least ``count`` messages on ``topic`` (a filter) matching ``where``."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = [m for m in self.messages if paho.topic_matches_sub(topic, m.topic)
                         and (where is None or where(m))]
                if len(found) >= count:
                    return found
                left = deadline - time.monotonic()
                if left <= 0:
                    seen = sorted({m.topic for m in self.messages})
                    pytest.fail(f"timed out waiting for {count} message(s) on {topic}; "
                                f"got {len(found)}; topics seen: {seen}")
                self._cond.wait(left)

    def json(self, topic: str, count: int = 1, timeout: float = WAIT_S,
             where: Callable[[dict[str, Any]], bool] | None = None) -> list[dict[str, Any]]:
        """JSON payloads on ``topic``; ``where`` filters the decoded objects."""

        def match(m: paho.MQTTMessage) -> bool:
            try:
                obj = json.loads(m.payload)
            except ValueError:
                return False
            return isinstance(obj, dict) and (where is None or where(obj))

        return [json.loads(m.payload) for m in self.wait(topic, count, timeout, match)]


class MqttTestClient(paho.Client):
    """A paho client with an ``inbox`` of everything it receives."""

    inbox: Inbox

    def sub(self, *topics: str, qos: int = 1) -> None:
        """Subscribe and wait for the SUBACK."""
        acked: set[int] = set()
        cond = threading.Condition()

        def on_subscribe(client: Any, userdata: Any, mid: int, *rest: Any) -> None:
            with cond:  # the SUBACK may arrive before subscribe() returns its mid
                acked.add(mid)
                cond.notify_all()

        self.on_subscribe = on_subscribe
        result, mid = self.subscribe([(t, qos) for t in topics])
        assert result == paho.MQTT_ERR_SUCCESS
        with cond:
            assert cond.wait_for(lambda: mid in acked, WAIT_S), f"no SUBACK for {topics}"

    def pub(self, topic: str, payload: bytes | str | dict[str, Any], qos: int = 1,
            retain: bool = False, properties: Properties | None = None) -> None:
        """Publish and wait until the broker confirmed it (QoS 1)."""
        if isinstance(payload, dict):
            payload = json.dumps(payload)
        info = self.publish(topic, payload, qos=qos, retain=retain, properties=properties)
        info.wait_for_publish(WAIT_S)
        assert info.is_published(), f"publish to {topic} not confirmed"


def v5_properties(response_topic: str | None = None, correlation: bytes | None = None,
                  expiry_s: int | None = None) -> Properties:
    props = Properties(PacketTypes.PUBLISH)
    if response_topic is not None:
        props.ResponseTopic = response_topic
    if correlation is not None:
        props.CorrelationData = correlation
    if expiry_s is not None:
        props.MessageExpiryInterval = expiry_s
    return props


def connect_client(host: str, port: int, client_id: str = "", protocol: str = "5",
                   clean: bool = True) -> MqttTestClient:
    """A connected test client with its network loop running (v5 unless "3.1.1"); with
    ``clean=False`` the session persists (v5: Session Expiry 1 h)."""
    version = paho.MQTTv5 if protocol == "5" else paho.MQTTv311
    kwargs: dict[str, Any] = {} if version == paho.MQTTv5 else {"clean_session": clean}
    client = MqttTestClient(CallbackAPIVersion.VERSION2, client_id=client_id,
                            protocol=version, **kwargs)
    client.inbox = Inbox()
    client.on_message = lambda c, u, m: client.inbox.add(m)
    connected = threading.Event()
    client.on_connect = lambda c, u, f, rc, p=None: connected.set()
    client.on_socket_open = lambda c, u, sock: sock.setsockopt(
        socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    client.reconnect_delay_set(1, 2)
    if version == paho.MQTTv5:
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = 0 if clean else 3600
        client.connect(host, port, keepalive=30, clean_start=clean, properties=props)
    else:
        client.connect(host, port, keepalive=30)
    client.loop_start()
    assert connected.wait(WAIT_S), "test client did not connect"
    return client


def close_client(client: paho.Client) -> None:
    with contextlib.suppress(Exception):
        client.disconnect()
        client.loop_stop()


@pytest.fixture
def mqtt_client(broker: Broker) -> Iterator[Callable[..., MqttTestClient]]:
    """Factory of connected test clients: ``mqtt_client(client_id="", protocol="5",
    clean=True)``; disconnected at teardown."""
    clients: list[MqttTestClient] = []

    def make(client_id: str = "", protocol: str = "5", clean: bool = True) -> MqttTestClient:
        client = connect_client(broker.host, broker.port, client_id, protocol, clean)
        clients.append(client)
        return client

    yield make
    for client in clients:
        close_client(client)


@pytest.fixture(scope="session")
def demo_engine() -> Any:
    """The bundled demo model, loaded once per session (threads=1, with a vision cache)."""
    from edgevlm.engine import Engine
    from edgevlm.models import demo_model_dir
    from edgevlm.pipeline.cache import VisionCache

    return Engine.load(demo_model_dir(), threads=1, context=int(
        os.environ.get("EDGEVLM_TEST_CONTEXT", "4096")), cache=VisionCache(64 * 2**20))


@pytest.fixture
def engine_calls(demo_engine: Any, monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """Request ids in the order the engine ran them."""
    calls: list[str | None] = []
    lock = threading.Lock()
    original = demo_engine.generate_prepared

    def counting(request: Any, *args: Any, **kwargs: Any) -> Any:
        with lock:
            calls.append(request.id)
        return original(request, *args, **kwargs)

    monkeypatch.setattr(demo_engine, "generate_prepared", counting)
    return calls


@pytest.fixture
def make_service(make_config: Callable[..., Config], demo_engine: Any
                 ) -> Iterator[Callable[..., Any]]:
    """Factory of started in-process Services on ``broker`` with the shared demo engine;
    keyword arguments are dotted config overrides (``liveness``: a LivenessPolicy). Stopped
    at teardown."""
    from edgevlm.service import Service

    services: list[Any] = []

    def make(overrides: dict[str, Any] | None = None, start: bool = True,
             liveness: Any = None, **kwargs: Any) -> Any:
        config = make_config(overrides, **kwargs)
        service = Service(config, engine=demo_engine, liveness=liveness)
        services.append(service)
        if start:
            service.start(timeout=WAIT_S)
        return service

    yield make
    for service in reversed(services):
        service.stop("test teardown")


class Daemon:
    """``edgevlm serve`` in a child process (``delay_ms``: the test-only worker delay)."""

    def __init__(self, config: Path, log: Path, delay_ms: int = 0,
                 env: dict[str, str] | None = None) -> None:
        base = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET",
                                                                  "WATCHDOG_USEC")}
        env = {**base, TEST_DELAY_ENV: str(delay_ms), **(env or {})}
        self.log = log
        self._log_file = log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "edgevlm", "serve", "-c", str(config), "--log-level", "info"],
            env=env, stdout=self._log_file, stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=WAIT_S)

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=WAIT_S * 2)
        finally:
            self._log_file.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=WAIT_S)
        self._log_file.close()
