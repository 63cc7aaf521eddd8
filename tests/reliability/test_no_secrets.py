"""No secret leaves the daemon: not in its log, not on MQTT, not in zeroconf.

``edgevlm serve`` runs against the locked-down broker with a password and a client key path
from ``!secret`` and a client certificate; it starts, answers, refuses a bad request,
reconnects after a broker restart, answers again and stops. Then every output is searched for
the secrets — the password, the key path, the key's own bytes — as they are and base64-encoded
(at every alignment, and as ``user:password``):

- the whole log at DEBUG (paho's packet log included), stdout and stderr;
- every message the daemon published, retained or not: ``bridge/info``, ``bridge/health``
  (the metrics), state, answers, Home Assistant discovery, camera topics, the probe;
- the zeroconf TXT record, browsed back from the network;
- ``edgevlm check-config --json``.

``test_the_secret_finder_finds_planted_secrets`` proves the search itself finds them.
"""

from __future__ import annotations

import base64
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers import text, user_request
from tests.mqtt.conftest import WAIT_S, close_client, v5_properties
from tests.reliability.secure_broker import (
    DAEMON_PASSWORD,
    DAEMON_USER,
    NODE,
    REPLY,
    SPY_PASSWORD,
    SPY_USER,
    Pki,
    connect_tls_client,
    locked_broker,
    pki_fixture,  # noqa: F401  (the fixture `pki`)
)
from tests.unit.test_announce import find, txt

BASE = f"edgevlm/{NODE}"
HTTP_KEY = "h77p-Api-K3y-0123456789abcdef"


def secret_forms(secret: bytes, user: bytes | None = None) -> list[bytes]:
    """``secret`` and its base64 at each of the 3 alignments (the part of the encoding that
    does not depend on the neighbouring bytes), also of ``user:secret``."""
    forms = [secret]
    for plain in [secret] + ([user + b":" + secret] if user else []):
        for offset in range(3):
            for encode in (base64.b64encode, base64.urlsafe_b64encode):
                encoded = encode(b"\0" * offset + plain)
                core = encoded[(offset * 4 + 2) // 3:len(encoded) - 4]
                if len(core) >= 8:
                    forms.append(core)
    return forms


def find_secrets(data: bytes | str, secrets: dict[str, list[bytes]]) -> list[str]:
    """Names of the secrets found in ``data`` (any of their forms)."""
    blob = data.encode() if isinstance(data, str) else data
    return [name for name, forms in secrets.items() if any(f in blob for f in forms)]


def test_the_secret_finder_finds_planted_secrets():
    secrets = {"password": secret_forms(b"hunter2-Pa55word", b"edgevlm")}
    for offset in range(3):
        blob = base64.b64encode(b"x" * offset + b"...hunter2-Pa55word...").decode()
        assert find_secrets(json.dumps({"image": "data:;base64," + blob}), secrets)
    basic = base64.b64encode(b"edgevlm:hunter2-Pa55word").decode()
    assert find_secrets(f"Authorization: Basic {basic}", secrets) == ["password"]
    assert find_secrets("the password is hunter2-Pa55word", secrets) == ["password"]
    assert find_secrets(b'{"password": "***"}', secrets) == []


def test_no_secret_in_logs_mqtt_messages_metrics_or_zeroconf(pki: Pki, tmp_path: Path):
    broker = locked_broker(tmp_path / "broker", pki)
    key_pem = pki.key("client").read_text()
    key_body = "".join(line for line in key_pem.splitlines() if "-----" not in line)
    secrets = {
        "mqtt password": secret_forms(DAEMON_PASSWORD.encode(), DAEMON_USER.encode()),
        "client key path": [str(pki.key("client")).encode()],
        "client key": [chunk.encode() for chunk in re.findall(r".{16}", key_body)],
        "http api key": secret_forms(HTTP_KEY.encode()),
    }
    (tmp_path / "secrets.yaml").write_text(
        f"mqtt_password: {json.dumps(DAEMON_PASSWORD)}\n"
        f"client_key: {json.dumps(str(pki.key('client')))}\n"
        f"http_key: {json.dumps(HTTP_KEY)}\n")
    config = tmp_path / "edgevlm.yaml"
    config.write_text(f"""\
mqtt:
  host: {broker.host}
  port: {broker.port}
  node_id: {NODE}
  username: {DAEMON_USER}
  password: !secret mqtt_password
  tls:
    ca: {pki.cert('ca')}
    cert: {pki.cert('client')}
    key: !secret client_key
  reconnect_min_s: 0.2
  reconnect_max_s: 1
  health_interval_s: 0.5
model: {{threads: 1}}
homeassistant: {{discovery: true}}
zeroconf: {{enabled: true, browse_broker: false}}
http: {{enabled: true, port: 0, api_key: !secret http_key}}
cameras:
  porch: {{prompt: "Who is at the {{camera}} door?"}}
""")
    log_path = tmp_path / "daemon.log"
    spies = [connect_tls_client(broker, pki, SPY_USER, SPY_PASSWORD)]
    asker = None
    with log_path.open("wb") as log_file:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "edgevlm", "-v", "serve", "-c", str(config),
             "--log-level", "debug"], stdout=log_file, stderr=subprocess.STDOUT)
    try:
        spies[0].sub("#")
        spies[0].inbox.wait(f"{BASE}/bridge/state", where=lambda m: m.payload == b"online",
                            timeout=WAIT_S * 2)
        asker = connect_tls_client(broker, pki)
        asker.sub(REPLY)
        ask(asker, "before-restart", ok=True)
        use_http(log_path)
        asker.pub(f"{BASE}/request/describe", b"{not json", properties=v5_properties(REPLY))
        asker.inbox.json(REPLY, where=lambda a: a.get("status") == "error")
        announced = find(NODE)
        assert announced is not None, "the daemon's zeroconf announcement was not found"
        close_client(asker)
        broker.restart()  # the daemon reconnects, resubscribes, publishes its state again
        spies.append(connect_tls_client(broker, pki, SPY_USER, SPY_PASSWORD))
        spies[1].sub("#")
        spies[1].inbox.json(f"{BASE}/bridge/health",
                            where=lambda h: h["mqtt"]["reconnects"] >= 1, timeout=WAIT_S * 2)
        asker = connect_tls_client(broker, pki)
        asker.sub(REPLY)
        ask(asker, "after-restart", ok=True)
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=WAIT_S * 2) == 0
        time.sleep(0.2)  # the spies' last messages (offline)
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait(timeout=WAIT_S)
        for client in [*spies, *([asker] if asker else [])]:
            close_client(client)
        broker.stop()
    check_config = subprocess.run(
        [sys.executable, "-m", "edgevlm", "check-config", "--json", str(config)],
        capture_output=True, timeout=WAIT_S * 3)
    assert check_config.returncode == 0, check_config.stderr

    messages = [m for spy in spies for m in spy.inbox.messages]
    published = {m.topic for m in messages}
    # the outputs are really there: nothing to grep would pass vacuously
    info = json.loads(next(m.payload for m in messages if m.topic == f"{BASE}/bridge/info"))
    assert info["config"]["mqtt"]["password"] == "***"
    assert info["config"]["mqtt"]["tls"]["key"] == "***"
    assert any(t.startswith("homeassistant/") for t in published), published
    assert f"{BASE}/bridge/health" in published and f"{BASE}/camera/porch/state" in published
    assert txt(announced)["id"] == NODE and txt(announced)["http_key"] == "1"
    assert info["config"]["http"]["api_key"] == "***"
    log = log_path.read_text(errors="replace")
    assert "Sending CONNECT" in log, "the log is at DEBUG, paho's packets included"

    leaks = {
        "the daemon's log": find_secrets(log, secrets),
        "check-config --json": find_secrets(check_config.stdout + check_config.stderr, secrets),
        "the zeroconf TXT record": find_secrets(announced.text or b"", secrets),
    }
    for message in messages:
        found = find_secrets(message.topic.encode() + b" " + message.payload, secrets)
        if found:
            leaks[f"MQTT {message.topic}"] = found
    assert not any(leaks.values()), {where: names for where, names in leaks.items() if names}


def use_http(log_path: Path) -> None:
    """A request with the API key and one with a wrong key, on the port the log names."""
    import urllib.error
    import urllib.request

    port = int(re.search(rb"OpenAI and Ollama APIs on http://[^:]+:(\d+)",
                         log_path.read_bytes()).group(1))  # type: ignore[union-attr]
    url = f"http://127.0.0.1:{port}/v1/models"
    good = urllib.request.Request(url, headers={"Authorization": f"Bearer {HTTP_KEY}"})
    with urllib.request.urlopen(good, timeout=WAIT_S) as response:
        assert response.status == 200
    bad = urllib.request.Request(url, headers={"Authorization": "Bearer wrong-key-0123456789"})
    try:
        urllib.request.urlopen(bad, timeout=WAIT_S)
        raise AssertionError("a wrong key was accepted")
    except urllib.error.HTTPError as err:
        assert err.code == 401


def ask(client, rid: str, ok: bool) -> None:
    client.pub(f"{BASE}/request/describe", user_request(text("Say hi"), id=rid, max_tokens=4),
               properties=v5_properties(REPLY))
    answer = client.inbox.json(REPLY, where=lambda a: a.get("id") == rid)[0]
    assert (answer["status"] == "ok") == ok, answer
