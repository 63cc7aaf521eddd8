"""A locked-down Mosquitto for the tests: no anonymous login, a password file, a per-client ACL
and TLS with certificates made at test time.

``Pki`` makes a test CA, a second CA nobody trusts, and server certificates signed by the test
CA: ``server`` (127.0.0.1 and localhost), ``other_host`` (other.example only), ``expired``
(valid in 2019 only), plus a client certificate. All with the ``openssl`` command line (EC
P-256 keys: a whole set takes ~0.1 s); the password file is made with ``mosquitto_passwd``,
which ships with Mosquitto. ``locked_broker`` is the ``Broker`` of tests/mqtt with these in its
``extra_conf``.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from tests.mqtt.conftest import WAIT_S, Broker, Inbox, MqttTestClient, mosquitto_binary

# user -> password of the password file (the daemon's user, a client that asks, a watcher)
DAEMON_USER, DAEMON_PASSWORD = "edgevlm", "d43mon-Pa55word!"
CLIENT_USER, CLIENT_PASSWORD = "asker", "asker-Pa55word!"
SPY_USER, SPY_PASSWORD = "spy", "spy-Pa55word!"
NODE = "node1"
REPLY = f"edgevlm/clients/{CLIENT_USER}/reply"

# What the daemon needs (docs/mqtt.md, "A locked-down broker"), per user, and one pattern for
# every client: ask any node, read the own reply tree and the bridge topics.
DAEMON_ACL = f"""\
user {DAEMON_USER}
topic read edgevlm/{NODE}/request/#
topic read edgevlm/{NODE}/camera/#
topic read edgevlm/pool/request/#
topic write edgevlm/{NODE}/#
topic write edgevlm/clients/#
topic read homeassistant/status
topic write homeassistant/#
"""
CLIENTS_ACL = """\
user spy
topic read #
pattern write edgevlm/+/request/#
pattern read edgevlm/clients/%u/#
pattern read edgevlm/+/bridge/#
"""
# The daemon may publish its bridge topics, nothing else: answers cannot get out.
REPLY_DENIED_ACL = f"""\
user {DAEMON_USER}
topic read edgevlm/{NODE}/request/#
topic read edgevlm/pool/request/#
topic write edgevlm/{NODE}/bridge/#
"""


def _tool(name: str) -> str:
    found = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists()
                                   else None)
    if found is None:
        pytest.fail(f"{name} is not installed (scripts/setup-env.sh test installs it)")
    return found


def _run(*args: str, cwd: Path) -> None:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {done.stderr.strip()}")


_CA_CONF = """\
[ca]
default_ca = test
[test]
dir = .
database = index.txt
new_certs_dir = .
serial = serial
default_md = sha256
policy = any
copy_extensions = copy
unique_subject = no
[any]
commonName = supplied
"""


@dataclass(frozen=True)
class Pki:
    """Certificates and keys in ``directory``: ``cert(name)``, ``key(name)``."""

    directory: Path

    def cert(self, name: str) -> Path:
        return self.directory / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.directory / f"{name}.key"

    @classmethod
    def make(cls, directory: Path) -> Pki:
        openssl = _tool("openssl")
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "ca.cnf").write_text(_CA_CONF)
        (directory / "index.txt").write_text("")
        (directory / "serial").write_text("01\n")
        ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
        for ca in ("ca", "other_ca"):
            _run(openssl, "req", "-x509", *ec, "-keyout", f"{ca}.key", "-out", f"{ca}.crt",
                 "-days", "3650", "-subj", f"/CN=edgevlm test {ca}", cwd=directory)
        leaves = {  # name: (subjectAltName, (not before, not after) or None: now + 30 days)
            "server": ("IP:127.0.0.1,DNS:localhost", None),
            "other_host": ("DNS:other.example", None),
            "expired": ("IP:127.0.0.1,DNS:localhost", ("20190101000000Z", "20200101000000Z")),
            "client": ("DNS:edgevlm-client", None),
        }
        for name, (san, window) in leaves.items():
            _run(openssl, "req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", f"/CN={san.split(',')[0].split(':')[1]}",
                 "-addext", f"subjectAltName={san}", cwd=directory)
            dates = (("-startdate", window[0], "-enddate", window[1]) if window
                     else ("-days", "30"))
            _run(openssl, "ca", "-batch", "-notext", "-config", "ca.cnf", "-cert", "ca.crt",
                 "-keyfile", "ca.key", "-in", f"{name}.csr", "-out", f"{name}.crt", *dates,
                 cwd=directory)
        return cls(directory)


@pytest.fixture(scope="module", name="pki")
def pki_fixture(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """The test certificates, made once per test module."""
    return Pki.make(tmp_path_factory.mktemp("pki"))


def password_file(path: Path, users: dict[str, str]) -> Path:
    """A Mosquitto password file (PBKDF2-SHA512 hashes) made by ``mosquitto_passwd``."""
    tool = _tool("mosquitto_passwd")
    path.write_text("")
    for user, password in users.items():
        _run(tool, "-b", str(path), user, password, cwd=path.parent)
    return path


def locked_broker(directory: Path, pki: Pki, server_cert: str | None = "server",
                  acl: str = DAEMON_ACL) -> Broker:
    """A started Mosquitto: TLS only (``server_cert`` from ``pki``; None: plain TCP), no
    anonymous login, the test users' password file and ``acl`` + the clients' ACL."""
    binary = mosquitto_binary()
    if binary is None:
        pytest.fail("mosquitto is not installed (scripts/setup-env.sh test installs it)")
    directory.mkdir(parents=True, exist_ok=True)
    passwords = password_file(directory / "passwd", {
        DAEMON_USER: DAEMON_PASSWORD, CLIENT_USER: CLIENT_PASSWORD, SPY_USER: SPY_PASSWORD})
    (directory / "acl").write_text(acl + CLIENTS_ACL)
    tls = "" if server_cert is None else (f"cafile {pki.cert('ca')}\n"
                                          f"certfile {pki.cert(server_cert)}\n"
                                          f"keyfile {pki.key(server_cert)}\n")
    broker = Broker(directory, binary, extra_conf=(
        "allow_anonymous false\n"  # the later line wins over Broker's "allow_anonymous true"
        f"password_file {passwords}\n"
        f"acl_file {directory / 'acl'}\n" + tls))
    broker.start()
    return broker


def daemon_mqtt(broker: Broker, pki: Pki, **overrides: Any) -> dict[str, Any]:
    """The ``mqtt`` section of a daemon config for ``broker`` (good credentials, TLS)."""
    return {"host": broker.host, "port": broker.port, "node_id": NODE,
            "username": DAEMON_USER, "password": DAEMON_PASSWORD,
            "tls": {"ca": str(pki.cert("ca"))},
            "reconnect_min_s": 0.2, "reconnect_max_s": 1, **overrides}


def connect_tls_client(broker: Broker, pki: Pki, user: str = CLIENT_USER,
                       password: str = CLIENT_PASSWORD) -> MqttTestClient:
    """A connected MQTT v5 test client (TLS, a user of the password file), loop running."""
    client = MqttTestClient(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5)
    client.inbox = Inbox()
    client.on_message = lambda c, u, m: client.inbox.add(m)
    client.username_pw_set(user, password)
    client.tls_set(ca_certs=str(pki.cert("ca")))
    connected = threading.Event()
    client.on_connect = lambda c, u, f, rc, p=None: connected.set() if not rc.is_failure else None
    client.connect(broker.host, broker.port, keepalive=30)
    client.loop_start()
    assert connected.wait(WAIT_S), f"test client {user} did not connect"
    return client
