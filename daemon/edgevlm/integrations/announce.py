"""Zeroconf: announce the daemon as ``_edgevlm._tcp.local.`` and find an MQTT broker.

The service has no socket of its own: its SRV record carries the MQTT broker's port and the
TXT record says where to talk to it: ``id`` (node id), ``ver`` (daemon version), ``api``
(protocol version), ``base`` (base topic), ``model`` and ``mqtt`` (``host:port`` of the
broker; a loopback broker is shown as this board's primary address); with the HTTP front door,
``http`` (its port) and ``http_key`` (``1``: it needs an API key). Every non-loopback
address is announced, the primary one (the one with the default route) first.

A name already taken on the network gets a number appended (``edgevlm garage (2)``, RFC 6762
section 9). zeroconf's own probing (``allow_name_change``) is not enough for that: its probes
are "QU" questions, which a responder that announced recently answers by unicast only, to the
prober's address and port 5353. On one host several responders hold port 5353 (SO_REUSEPORT)
and the kernel hands a unicast datagram to just one of those sockets, often the defender's
own, so a second daemon on the same machine never hears the defence (zeroconf 0.131 and
0.154 alike). So before registering, :class:`Announcer` browses the service type with
multicast ("QM") questions, whose answers reach every socket, and picks the first free name
itself; ``allow_name_change`` stays on for conflicts that appear while zeroconf probes.

Nothing here may stop the daemon: :class:`Announcer` logs failures and carries on, and
:func:`browse_mqtt_broker` returns None when nothing answers.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import socket
import threading
import time

import ifaddr
from zeroconf import (
    DNSQuestionType,
    IPVersion,
    ServiceBrowser,
    ServiceInfo,
    ServiceStateChange,
    Zeroconf,
)

from ..wire.protocol import PROTOCOL_VERSION

log = logging.getLogger(__name__)

SERVICE_TYPE = "_edgevlm._tcp.local."
MQTT_SERVICE_TYPE = "_mqtt._tcp.local."
LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "::1"}
# mDNS over IPv4 multicast; the records still carry the IPv6 addresses (IPv6 multicast on
# hosts without an IPv6 route only fills the log with "Network is unreachable").
IP_VERSION = IPVersion.V4Only
# How long to listen for instances already on the network before choosing a name. A responder
# that multicast its records within the last second delays its answer by a second (RFC 6762
# section 14; python-zeroconf: 1 s + 20-120 ms + up to 200 ms aggregation).
NAME_PROBE_S = 2.0
INSTANCE_LABEL_MAX = 63  # bytes (RFC 6763 section 4.1.1)


def primary_address() -> str | None:
    """The address this machine uses for its default route (no packet is sent)."""
    for family, target in ((socket.AF_INET, "192.0.2.1"), (socket.AF_INET6, "2001:db8::1")):
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as s:
                s.connect((target, 9))
                address = str(s.getsockname()[0])
        except OSError:
            continue
        if not ipaddress.ip_address(address).is_loopback:
            return address
    return None


def local_addresses() -> list[str]:
    """Every non-loopback, non-link-local-v6 address of this machine, the primary first."""
    found: list[str] = []
    for adapter in ifaddr.get_adapters():
        for ip in adapter.ips:
            text = ip.ip if isinstance(ip.ip, str) else ip.ip[0]
            address = ipaddress.ip_address(text.split("%")[0])
            if address.is_loopback or (address.version == 6 and address.is_link_local):
                continue
            if str(address) not in found:
                found.append(str(address))
    primary = primary_address()
    if primary in found:
        found.remove(primary)
        found.insert(0, primary)
    return found


def _fit(label: str, suffix: str = "") -> str:
    """``label + suffix`` cut (in ``label``, on a character boundary) to at most 63 bytes."""
    room = INSTANCE_LABEL_MAX - len(suffix.encode())
    return label.encode()[:room].decode(errors="ignore") + suffix


def instance_name(node_id: str) -> str:
    """A DNS-SD instance label (at most 63 bytes): ``edgevlm garage``."""
    return _fit(f"edgevlm {node_id}")


def free_instance_name(node_id: str, taken: set[str]) -> str:
    """The first of ``edgevlm garage``, ``edgevlm garage (2)``, ... whose service name is not
    in ``taken`` (full service names, compared case-insensitively as DNS does)."""
    taken = {name.lower() for name in taken}
    base = instance_name(node_id)
    label, number = base, 1
    while f"{label}.{SERVICE_TYPE}".lower() in taken:
        number += 1
        label = _fit(base, f" ({number})")
    return label


def names_on_network(zc: Zeroconf, service_type: str, wait_s: float) -> set[str]:
    """Instance names of ``service_type`` that answer multicast ("QM") queries within
    ``wait_s``; multicast answers also reach a prober on the responder's own host."""
    found: set[str] = set()

    def on_change(zeroconf: Zeroconf, service_type: str, name: str,
                  state_change: ServiceStateChange) -> None:
        if state_change is not ServiceStateChange.Removed:
            found.add(name)

    browser = ServiceBrowser(zc, service_type, handlers=[on_change],
                             question_type=DNSQuestionType.QM)
    try:
        time.sleep(wait_s)
    finally:
        browser.cancel()
    return set(found)


def host_label() -> str:
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname().split(".")[0]).strip("-") or "edgevlm"


def service_info(node_id: str, version: str, base_topic: str, model_name: str, broker: str,
                 port: int, addresses: list[str] | None = None,
                 http: tuple[int, bool] | None = None) -> ServiceInfo:
    """The ServiceInfo that :class:`Announcer` registers."""
    addresses = local_addresses() if addresses is None else addresses
    shown_broker = broker
    if broker in LOOPBACK_HOSTS and addresses:
        shown_broker = addresses[0]
    host = f"[{shown_broker}]" if ":" in shown_broker else shown_broker
    properties = {"id": node_id, "ver": version, "api": str(PROTOCOL_VERSION),
                  "base": base_topic, "model": model_name[:64], "mqtt": f"{host}:{port}"}
    if http is not None:  # (port, a key is needed)
        properties |= {"http": str(http[0]), "http_key": "1" if http[1] else "0"}
    return ServiceInfo(SERVICE_TYPE, f"{instance_name(node_id)}.{SERVICE_TYPE}",
                       port=port, properties=properties, server=f"{host_label()}.local.",
                       parsed_addresses=addresses)


class Announcer:
    """Registers the service in a background thread on start(); unregisters on stop()."""

    def __init__(self, node_id: str, version: str, base_topic: str, model_name: str,
                 broker: str, port: int, http: tuple[int, bool] | None = None) -> None:
        self._args = (node_id, version, base_topic, model_name, broker, port)
        self._http = http
        self._zeroconf: Zeroconf | None = None
        self._info: ServiceInfo | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.registered = threading.Event()

    @property
    def info(self) -> ServiceInfo | None:
        """What was registered (its name may have a number appended)."""
        return self._info

    def start(self) -> None:
        """Register in the background (probing takes a few seconds); never raises."""
        try:
            self._thread = threading.Thread(target=self._register, name="zeroconf-announce",
                                            daemon=True)
            self._thread.start()
        except Exception:
            log.exception("zeroconf: could not start the announcement")

    def _register(self) -> None:
        try:
            info = service_info(*self._args, http=self._http)
            if not info.parsed_addresses():
                log.warning("zeroconf: no non-loopback address; not announcing")
                return
            zc = Zeroconf(ip_version=IP_VERSION)
            with self._lock:
                self._zeroconf = zc
            try:
                taken = names_on_network(zc, SERVICE_TYPE, NAME_PROBE_S)
            except Exception:
                log.warning("zeroconf: could not look for names already taken", exc_info=True)
                taken = set()
            info.name = f"{free_instance_name(self._args[0], taken)}.{SERVICE_TYPE}"
            zc.register_service(info, allow_name_change=True)
            with self._lock:
                self._info = info
            self.registered.set()
            log.info("zeroconf: announced %s on %s", info.name,
                     ", ".join(info.parsed_addresses()))
        except Exception:
            log.exception("zeroconf: announcement failed (the daemon carries on without it)")

    def stop(self) -> None:
        """Unregister and close; never raises."""
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self._lock:
            zc, info = self._zeroconf, self._info
            self._zeroconf = self._info = None
        if zc is None:
            return
        try:
            if info is not None:
                zc.unregister_service(info)
        except Exception:
            log.exception("zeroconf: unregistering failed")
        finally:
            try:
                zc.close()
            except Exception:
                log.exception("zeroconf: closing failed")
        self.registered.clear()


def browse(service_type: str, timeout_s: float) -> list[ServiceInfo]:
    """Services of ``service_type`` that answer within ``timeout_s`` (resolved)."""
    found: list[str] = []
    seen = threading.Event()

    def on_change(zeroconf: Zeroconf, service_type: str, name: str,
                  state_change: ServiceStateChange) -> None:
        if state_change is ServiceStateChange.Added and name not in found:
            found.append(name)
            seen.set()

    zc = Zeroconf(ip_version=IP_VERSION)
    try:
        browser = ServiceBrowser(zc, service_type, handlers=[on_change])
        seen.wait(timeout_s)
        browser.cancel()
        infos = []
        for name in list(found):
            info = zc.get_service_info(service_type, name, timeout=int(timeout_s * 1000))
            if info is not None and info.parsed_addresses():
                infos.append(info)
        return infos
    finally:
        zc.close()


def browse_mqtt_broker(timeout_s: float = 3.0) -> tuple[str, int] | None:
    """The first ``_mqtt._tcp`` broker on the network (IPv4 preferred), or None."""
    try:
        infos = browse(MQTT_SERVICE_TYPE, timeout_s)
    except Exception:
        log.exception("zeroconf: browsing for an MQTT broker failed")
        return None
    for info in infos:
        addresses = sorted(info.parsed_addresses(), key=lambda a: ":" in a)
        if addresses and info.port:
            log.info("zeroconf: found MQTT broker %s at %s:%d", info.name, addresses[0],
                     info.port)
            return addresses[0], int(info.port)
    return None
