"""Why the connection to the broker failed, said in one line that names what to change.

paho reports a failed connection in three places, none of which says much by itself:

- a CONNACK with a failure reason (a refused login): ``on_connect`` with the reason code;
- an exception while opening the socket or in the TLS handshake (a certificate that is
  expired, for another name or not signed by our CA): ``on_connect_fail``, called inside
  paho's ``except OSError`` block, so the exception is ``sys.exc_info()`` there;
- the broker closing the socket before any CONNACK (a plain-TCP client on a TLS listener):
  ``on_disconnect`` without a CONNACK on that attempt.

:class:`ConnectDiagnosis` turns each into a :class:`ConnectFailure`: the line to log (never
the password) and whether the failure is *permanent* (retrying cannot help until a person
changes the config or the broker) or *transient* (the broker is down or busy: retry). The
line is logged once per distinct cause; the same failure again on the next retry is logged at
DEBUG, so a board retrying for days does not fill its journal.

Measured with Mosquitto 2.0.11: a wrong password and a missing user name both get CONNACK
"Not authorized" (0x87 on v5, 5 on 3.1.1), never "Bad user name or password".
"""

from __future__ import annotations

import logging
import socket
import ssl
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import peer_certificate

if TYPE_CHECKING:
    from .link_settings import LinkSettings as Settings

log = logging.getLogger(__name__)

EX_CONFIG = 78  # sysexits.h: the daemon cannot start with this configuration
TLS_PROBE_TIMEOUT_S = 2.0

# CONNACK reasons (v5 codes; 3.1.1 codes are mapped onto them by paho) that a retry cannot fix
_LOGIN_REFUSED = {0x86, 0x87, 0x8C}          # bad user name or password, not authorized, bad auth
_PERMANENT_REFUSALS = _LOGIN_REFUSED | {0x84, 0x85, 0x8A}  # protocol version, client id, banned
# OpenSSL X509 verify codes
_EXPIRED, _NOT_YET_VALID = 10, 9
_NAME_MISMATCH = {62, 63, 64}  # host name, e-mail, IP address
_DETAILED = {_EXPIRED, _NOT_YET_VALID} | _NAME_MISMATCH  # the message shows the certificate
_UNKNOWN_ISSUER = {18, 19, 20, 21}


@dataclass(frozen=True)
class ConnectFailure:
    """One failed connection attempt."""

    message: str     # one line, naming the cause and the setting to change; no secrets
    permanent: bool  # True: retrying cannot help until someone changes something


def _where(s: Settings) -> str:
    return f"{'mqtts' if s.use_tls else 'mqtt'}://{s.host}:{s.port}"


def _ca_name(s: Settings) -> str:
    return f"mqtt.tls.ca ({s.tls_ca})" if s.tls_ca else "the system CAs (mqtt.tls.ca not set)"


def refused(reason: Any, s: Settings) -> ConnectFailure:
    """A CONNACK with a failure reason code."""
    code = int(getattr(reason, "value", reason))
    if code in _LOGIN_REFUSED:
        who = (f"the login of user '{s.username}'" if s.username is not None
               else "an anonymous login")
        fix = ("check mqtt.username / mqtt.password against the broker's password file"
               if s.username is not None else "set mqtt.username and mqtt.password")
        return ConnectFailure(f"MQTT broker at {_where(s)} refused {who}: {reason} ({fix}, and "
                              "that the broker lets this user connect)", True)
    if code == 0x84:
        ours, other = ("5", '"3.1.1"') if s.protocol5 else ("3.1.1", "5")
        return ConnectFailure(f"MQTT broker at {_where(s)} does not speak MQTT {ours}: "
                              f"{reason} (set mqtt.protocol to {other})", True)
    return ConnectFailure(f"MQTT broker at {_where(s)} refused the connection: {reason}",
                          code in _PERMANENT_REFUSALS)


def from_exception(exc: BaseException | None, s: Settings) -> ConnectFailure:
    """An exception raised while connecting (socket or TLS handshake)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return ConnectFailure(_certificate_message(exc, s), True)
    if s.use_tls and isinstance(exc, ConnectionResetError | ssl.SSLError) and speaks_plain_mqtt(
            s.host, s.port):  # Mosquitto drops a ClientHello on a plain listener
        return ConnectFailure(f"TLS: the broker at {s.host}:{s.port} answers plain MQTT, not "
                              "TLS; set mqtt.port to its TLS listener (often 8883), or turn "
                              "mqtt.tls off", True)
    if isinstance(exc, ssl.SSLEOFError | ssl.SSLZeroReturnError):
        return ConnectFailure(f"TLS: the broker at {_where(s)} closed the connection during "
                              f"the handshake ({exc}); retrying", False)
    if isinstance(exc, ssl.SSLError):
        return ConnectFailure(f"TLS: the handshake with {_where(s)} failed: "
                              f"{exc.reason or exc} (is mqtt.port a TLS listener? does the "
                              "broker want a client certificate, mqtt.tls.cert / "
                              "mqtt.tls.key?)", True)
    if isinstance(exc, socket.gaierror):
        return ConnectFailure(f"cannot resolve the MQTT broker's name '{s.host}' (mqtt.host): "
                              f"{exc.strerror}; retrying", False)
    what = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
    return ConnectFailure(f"cannot reach the MQTT broker at {_where(s)}: {what or 'unknown'}; "
                          "retrying (is it running? mqtt.host / mqtt.port)", False)


def _certificate_message(exc: ssl.SSLCertVerificationError, s: Settings) -> str:
    code = exc.verify_code
    facts = peer_certificate.fetch(s.host, s.port) if code in _DETAILED else None
    if code == _EXPIRED:
        when = f" on {facts.not_after:%Y-%m-%d %H:%M} UTC" if facts else ""
        return (f"TLS: the broker's certificate at {_where(s)} expired{when}; renew the "
                "broker's certificate (its certfile in mosquitto.conf)")
    if code == _NOT_YET_VALID:
        when = f" before {facts.not_before:%Y-%m-%d %H:%M} UTC" if facts else " yet"
        return (f"TLS: the broker's certificate at {_where(s)} is not valid{when}; check the "
                "clocks of the board and the broker")
    if code in _NAME_MISMATCH:
        names = ", ".join(f"'{n}'" for n in facts.names) if facts and facts.names else None
        held = f"is for {names}, not '{s.host}'" if names else f"is not for '{s.host}'"
        return (f"TLS: the broker's certificate {held} (mqtt.host); set mqtt.host to a name "
                "the certificate lists, or reissue it with this name in its subjectAltName")
    if code in _UNKNOWN_ISSUER:
        return (f"TLS: the broker's certificate at {_where(s)} is not signed by a CA in "
                f"{_ca_name(s)}: {exc.verify_message}; point mqtt.tls.ca at the CA that "
                "signed the broker's certificate")
    return f"TLS: the broker's certificate at {_where(s)} was refused: {exc.verify_message}"


def speaks_tls(host: str, port: int, timeout: float = TLS_PROBE_TIMEOUT_S) -> bool:
    """Whether ``host:port`` completes a TLS handshake (certificates not checked)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock, \
                context.wrap_socket(sock, server_hostname=host):
            return True
    except (OSError, ValueError):
        return False


# An MQTT 3.1.1 CONNECT: clean session, keep-alive 60 s, empty client id. Any broker answers it
# with a CONNACK (packet type 2), even when it then refuses the login.
_PLAIN_CONNECT = b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00"


def speaks_plain_mqtt(host: str, port: int, timeout: float = TLS_PROBE_TIMEOUT_S) -> bool:
    """Whether ``host:port`` answers a plain-TCP MQTT CONNECT with a CONNACK."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(_PLAIN_CONNECT)
            return sock.recv(1) == b"\x20"
    except OSError:
        return False


def closed_before_connack(s: Settings) -> ConnectFailure:
    """The broker closed the socket without answering our CONNECT."""
    if not s.use_tls and speaks_tls(s.host, s.port):
        return ConnectFailure(f"MQTT broker at {s.host}:{s.port} expects TLS, but mqtt.tls is "
                              "not set; set mqtt.tls.ca to the CA file that signed the "
                              "broker's certificate (or mqtt.tls: true for a public CA)", True)
    return ConnectFailure(f"MQTT broker at {_where(s)} closed the connection without "
                          "answering; retrying (see the broker's log)", False)


class ConnectDiagnosis:
    """Watches the connection attempts of one paho client and reports each failure once.

    ``on_failure`` (optional) is called on paho's network thread with every failure, after
    it was logged."""

    def __init__(self, settings: Settings,
                 on_failure: Callable[[ConnectFailure], None] | None = None) -> None:
        self.settings = settings
        self.on_failure = on_failure
        self.last: ConnectFailure | None = None
        self._answered = True  # a CONNACK (or an exception) ended the current attempt

    def install(self, client: Any) -> None:
        """Hook the paho callbacks the link does not use itself."""
        client.on_pre_connect = self._on_pre_connect
        client.on_connect_fail = self._on_connect_fail

    def _on_pre_connect(self, client: Any, userdata: Any) -> None:
        self._answered = False

    def _on_connect_fail(self, client: Any, userdata: Any) -> None:
        self._answered = True
        try:  # paho calls this inside its `except OSError:` block
            self.report(from_exception(sys.exc_info()[1], self.settings))
        except Exception:
            log.exception("diagnosing a failed connection failed")

    def connected(self) -> None:
        """A successful CONNACK: the next failure is news again."""
        self._answered = True
        self.last = None

    def refused(self, reason: Any) -> None:
        self._answered = True
        self.report(refused(reason, self.settings))

    def disconnected(self) -> None:
        """A disconnect; a failure only if no CONNACK ended this attempt."""
        if not self._answered:
            self._answered = True
            self.report(closed_before_connack(self.settings))

    def report(self, failure: ConnectFailure) -> None:
        level = logging.DEBUG if failure == self.last else logging.ERROR
        if not failure.permanent and level == logging.ERROR:
            level = logging.WARNING
        log.log(level, "%s", failure.message)
        self.last = failure
        if self.on_failure is not None:
            self.on_failure(failure)
