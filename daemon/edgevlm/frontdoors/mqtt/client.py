"""The paho-mqtt 2.x adapter: one connection with the habits MQTT daemons need.

- ``CallbackAPIVersion.VERSION2``; MQTT v5 (or 3.1.1 when configured);
- TCP_NODELAY on the socket (``on_socket_open``): a QoS 1 round trip on loopback drops from
  ~88 ms to well under 1 ms;
- a persistent session (v5: clean start off + Session Expiry; 3.1.1: clean session off) and
  ``manual_ack``: the owner acks a message when it is done with it, so unacked requests are
  redelivered after a crash;
- the last will ``offline`` on the state topic (v5: with a Will Delay Interval so a quick
  restart does not flap);
- reconnect with capped exponential back-off, resubscribe on every connect, and ``on_ready``
  once the broker confirmed the subscriptions (SUBACK);
- outgoing sizes checked against the broker's Maximum Packet Size (v5 CONNACK; 2,000,000 bytes
  when unknown on 3.1.1) — paho itself would send and be disconnected in a loop; and our own
  Maximum Packet Size in CONNECT (v5: the largest request plus room for its topic and
  properties), so the broker drops a bigger message instead of the daemon buffering it whole;
- a PUBLISH whose properties paho cannot decode never costs the connection
  (:class:`~.paho_client.PahoClient`):
  what MQTT 5 allows (U+FEFF) is read and delivered, the rest acknowledged and dropped;
- callbacks that never raise (an exception there silently kills paho's network thread), and a
  watchdog that exits the process if that thread dies anyway, for systemd to restart us;
- a failed connection explained in one log line that names what to change
  (:mod:`.connect_errors`), and the reason codes of refused subscriptions and publishes kept
  for the start-up ACL probe (:mod:`.probe`).

The settings and packet size limits: :mod:`.link_settings`; a received message and the size
of an outgoing one: :mod:`.messages`.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from . import fast_properties
from .connect_errors import ConnectDiagnosis, ConnectFailure
from .link_settings import (
    DEFAULT_MAX_PACKET,
    PROTOCOL_MAX_PACKET,
    LinkSettings,
    max_incoming_packet,
)
from .messages import (
    PROPERTIES_BOUND,
    Incoming,
    PacketTooLarge,
    incoming_of,
    new_properties,
    publish_packet_size,
    wait_confirmed,
)
from .paho_client import PahoClient, PahoLog

# Incoming, LinkSettings and the packet helpers live in .messages and .link_settings;
# importable from here too, as before.
__all__ = ["WATCHDOG_EXIT_CODE", "Incoming", "LinkSettings", "MqttLink", "PacketTooLarge",
           "max_incoming_packet", "never_raises", "new_properties", "publish_packet_size",
           "wait_confirmed"]

log = logging.getLogger(__name__)

WATCHDOG_EXIT_CODE = 70            # EX_SOFTWARE
UNREADABLE_LOG_LIMIT = 10          # unreadable messages logged one by one per minute

F = TypeVar("F", bound=Callable[..., Any])


def never_raises(func: F) -> F:
    """Wrap a paho callback so an exception is logged instead of killing the network thread."""

    @functools.wraps(func)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except Exception:
            log.exception("error in MQTT callback %s (the connection carries on)",
                          func.__name__)
            return None

    return guarded  # type: ignore[return-value]


class MqttLink:
    """One persistent MQTT connection; thread-safe publish/ack; callbacks never raise."""

    def __init__(self, settings: LinkSettings, *, on_message: Callable[[Incoming], None],
                 on_ready: Callable[[bool], None],
                 on_connection: Callable[[bool], None] | None = None,
                 exit_process: Callable[[int], Any] = os._exit,
                 on_failure: Callable[[ConnectFailure], None] | None = None,
                 role: str | None = None) -> None:
        self.settings = settings
        self.role = role  # None: the node's connection; else what this one is for ("pool")
        self._on_message_cb = on_message
        self._on_ready_cb = on_ready
        self._on_connection_cb = on_connection
        self._on_published_cb: Callable[[int], None] | None = None
        self._exit_process = exit_process
        self._filters: list[str] = []
        self._stale_filters: list[str] = []
        self._sub_mid: int | None = None
        self._session_present = False
        self._lock = threading.Lock()
        self._connected = False
        self._ready = False
        self._stopping = threading.Event()
        self._started = False
        self.connects = 0
        self.max_packet_size = (PROTOCOL_MAX_PACKET if settings.protocol5
                                else DEFAULT_MAX_PACKET)
        self._watchdog: threading.Thread | None = None
        fast_properties.install()  # paho's decoder: same properties, a fraction of the cost
        self.diagnosis = ConnectDiagnosis(settings, on_failure)  # why connecting fails
        self.refused_subscriptions: list[tuple[str, str]] = []  # (filter, reason), last SUBACK
        self.on_publish_refused: Callable[[int, Any], None] | None = None  # (mid, reason)
        self.unreadable = 0  # messages acked and dropped: their properties cannot be read
        self._unreadable_window = (-60.0, 0)  # (start, logged in it)
        self._client = self._make_client()

    # ------------------------------------------------------------------ setup

    def _make_client(self) -> paho.Client:
        s = self.settings
        protocol = paho.MQTTv5 if s.protocol5 else paho.MQTTv311
        kwargs: dict[str, Any] = {} if s.protocol5 else {"clean_session": s.clean_start}
        client = PahoClient(CallbackAPIVersion.VERSION2, client_id=s.client_id,
                            protocol=protocol, manual_ack=True, **kwargs)
        client.on_unreadable = self._on_unreadable
        if s.username is not None:
            client.username_pw_set(s.username, s.password)
        if s.use_tls:
            client.tls_set(ca_certs=s.tls_ca, certfile=s.tls_cert, keyfile=s.tls_key,
                           cert_reqs=ssl.CERT_NONE if s.tls_insecure else ssl.CERT_REQUIRED)
            if s.tls_insecure:
                client.tls_insecure_set(True)
        will_props = None
        if s.protocol5 and s.will_delay_s > 0:
            will_props = new_properties(PacketTypes.WILLMESSAGE)
            will_props.WillDelayInterval = s.will_delay_s
        client.will_set(s.will_topic, s.will_payload, qos=1, retain=True,
                        properties=will_props)
        client.reconnect_delay_set(s.reconnect_min_s,  # type: ignore[arg-type]  # floats work
                                   max(s.reconnect_min_s, s.reconnect_max_s))  # type: ignore[arg-type]
        client.on_socket_open = self._on_socket_open
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_subscribe = self._on_subscribe
        client.on_message = self._on_message
        client.on_publish = self._on_publish
        client.enable_logger(PahoLog(logging.getLogger("edgevlm.frontdoors.mqtt.paho")))  # type: ignore[arg-type]
        self.diagnosis.install(client)
        return client

    def set_subscriptions(self, filters: list[str]) -> None:
        """Topic filters (QoS 1) subscribed on every connect."""
        with self._lock:
            self._filters = list(dict.fromkeys(filters))

    def set_stale_subscriptions(self, filters: list[str]) -> None:
        """Topic filters a persistent session may still hold from an earlier version (the
        shared pool's, which now has a connection of its own): unsubscribed whenever the
        broker resumes a session."""
        with self._lock:
            self._stale_filters = list(dict.fromkeys(filters))

    @property
    def connected(self) -> bool:
        return self._connected

    @property
    def ready(self) -> bool:
        """Connected and the subscriptions confirmed."""
        return self._connected and self._ready

    def network_thread_alive(self) -> bool:
        thread: threading.Thread | None = self._client._thread
        return thread is not None and thread.is_alive()

    def on_network_thread(self) -> bool:
        """Whether the caller runs on paho's network thread (inside a callback)."""
        return threading.current_thread() is self._client._thread

    def set_on_published(self, callback: Callable[[int], None] | None) -> None:
        """Call ``callback(mid)`` on the network thread when the broker confirmed one of our
        QoS 1 publishes (PUBACK; also for messages re-sent after a reconnect)."""
        self._on_published_cb = callback

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Connect in the background; paho retries with capped back-off until it works."""
        s = self.settings
        props = None
        if s.protocol5:
            props = new_properties(PacketTypes.CONNECT)
            props.SessionExpiryInterval = 0 if s.clean_start else s.session_expiry_s
            if s.max_packet_size is not None:
                props.MaximumPacketSize = s.max_packet_size
            self._client.connect_async(s.host, s.port, s.keepalive, clean_start=s.clean_start,
                                       properties=props)
        else:
            self._client.connect_async(s.host, s.port, s.keepalive)
        self._client.loop_start()
        self._started = True
        self._watchdog = threading.Thread(target=self._watch, name="edgevlm-mqtt-watchdog",
                                          daemon=True)
        self._watchdog.start()
        log.info("connecting to mqtt://%s:%d as %s (MQTT %s)", s.host, s.port, s.client_id,
                 "5" if s.protocol5 else "3.1.1")

    def stop(self) -> None:
        """Disconnect cleanly (no last will) and stop the network thread."""
        self._stopping.set()
        if not self._started:
            return
        try:
            self._client.disconnect()
        except Exception:  # already gone: nothing to say goodbye to
            log.debug("disconnect failed", exc_info=True)
        self._client.loop_stop()
        self._connected = False

    def _watch(self) -> None:
        while not self._stopping.wait(1.0):
            if not self.network_thread_alive() and not self._stopping.is_set():
                log.critical("the MQTT network thread has died; exiting so that the service "
                             "manager restarts edgevlm")
                self._exit_process(WATCHDOG_EXIT_CODE)
                return

    # ------------------------------------------------------------------ outgoing

    def publish(self, topic: str, payload: bytes | str, qos: int = 1, retain: bool = False,
                properties: Properties | None = None) -> paho.MQTTMessageInfo:
        """Publish (thread-safe); raises :class:`PacketTooLarge` instead of sending a packet
        the broker would refuse. While disconnected paho keeps QoS 1 messages and sends them
        after the reconnect."""
        data = payload.encode() if isinstance(payload, str) else payload
        if self._surely_fits(topic, data):
            return self._client.publish(topic, data, qos=qos, retain=retain,
                                        properties=properties)
        size = publish_packet_size(topic, data, qos, properties, self.settings.protocol5)
        if size > self.max_packet_size:
            raise PacketTooLarge(f"a {size}-byte message to {topic} exceeds the broker's "
                                 f"maximum packet size of {self.max_packet_size} bytes")
        return self._client.publish(topic, data, qos=qos, retain=retain, properties=properties)

    def _surely_fits(self, topic: str, payload: bytes) -> bool:
        """A cheap upper bound: the exact size packs the v5 properties in Python (paho packs
        them again to send), a third of the cost of a small answer; only messages near the
        limit need it."""
        return len(payload) + 4 * len(topic) + PROPERTIES_BOUND <= self.max_packet_size

    def fits(self, topic: str, payload: bytes, qos: int = 1,
             properties: Properties | None = None) -> bool:
        if self._surely_fits(topic, payload):
            return True
        size = publish_packet_size(topic, payload, qos, properties, self.settings.protocol5)
        return size <= self.max_packet_size

    def ack(self, mid: int, qos: int) -> None:
        """Acknowledge a received message (PUBACK); QoS 0 needs none."""
        if qos > 0:
            self._client.ack(mid, qos)

    # ------------------------------------------------------------------ callbacks

    @never_raises
    def _on_socket_open(self, client: paho.Client, userdata: Any, sock: Any) -> None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except (OSError, AttributeError):
            log.debug("TCP_NODELAY not set on %r", sock)

    @never_raises
    def _on_connect(self, client: paho.Client, userdata: Any, flags: Any, reason: Any,
                    properties: Any) -> None:
        if getattr(reason, "is_failure", False):
            self.diagnosis.refused(reason)
            return
        self.diagnosis.connected()
        limit = getattr(properties, "MaximumPacketSize", None) if properties else None
        self.max_packet_size = int(limit) if limit else (
            PROTOCOL_MAX_PACKET if self.settings.protocol5 else DEFAULT_MAX_PACKET)
        self._connected = True
        self._ready = False
        self.connects += 1
        self._session_present = bool(getattr(flags, "session_present", False))
        if self.role is None:
            log.info("connected to the broker (session present: %s, max packet %d bytes)",
                     self._session_present, self.max_packet_size)
        else:
            log.info("the %s connection is up", self.role)
        if self._on_connection_cb is not None:
            self._on_connection_cb(True)
        with self._lock:
            filters, stale = list(self._filters), list(self._stale_filters)
        if stale and self._session_present:
            client.unsubscribe(stale)
        if not filters:
            self._ready = True
            self._on_ready_cb(self._session_present)
            return
        result, mid = client.subscribe([(f, 1) for f in filters])
        if result != paho.MQTT_ERR_SUCCESS:
            log.error("subscribing failed: %s", paho.error_string(result))
            return
        self._sub_mid = mid

    @never_raises
    def _on_subscribe(self, client: paho.Client, userdata: Any, mid: int, reasons: Any,
                      properties: Any) -> None:
        if mid != self._sub_mid:
            return
        with self._lock:
            filters = list(self._filters)
        self.refused_subscriptions = [
            (topic, str(reason)) for topic, reason in zip(filters, reasons or [], strict=False)
            if getattr(reason, "is_failure", False) or (isinstance(reason, int)
                                                         and reason >= 0x80)]
        for topic, reason in self.refused_subscriptions:
            log.error("the broker refused the subscription to %s: %s (its ACL must let this "
                      "user read it: `topic read %s` in Mosquitto's acl_file)", topic, reason,
                      topic)
        self._ready = True
        self._on_ready_cb(self._session_present)

    @never_raises
    def _on_disconnect(self, client: paho.Client, userdata: Any, flags: Any, reason: Any,
                       properties: Any) -> None:
        was = self._connected
        if not self._stopping.is_set():
            self.diagnosis.disconnected()
        self._connected = False
        self._ready = False
        if was and not self._stopping.is_set():  # a failed attempt: the diagnosis said why
            if self.role is None:
                log.warning("disconnected from the broker (%s); reconnecting", reason)
            else:
                log.warning("the %s connection was lost (%s)", self.role, reason)
        if was and self._on_connection_cb is not None:
            self._on_connection_cb(False)

    @never_raises
    def _on_publish(self, client: paho.Client, userdata: Any, mid: int, reason: Any,
                    properties: Any) -> None:
        refused = self.on_publish_refused
        if refused is not None and getattr(reason, "is_failure", False):
            refused(mid, reason)
        callback = self._on_published_cb
        if callback is not None:
            callback(mid)

    @never_raises
    def _on_unreadable(self, topic: str, qos: int, reason: str) -> None:
        """A message whose properties cannot be read, acknowledged and dropped (network
        thread): counted, logged (the first few per minute at WARNING)."""
        self.unreadable += 1
        now = time.monotonic()
        start, logged = self._unreadable_window
        if now - start >= 60.0:
            start, logged = now, 0
        self._unreadable_window = (start, logged + 1)
        log.log(logging.WARNING if logged < UNREADABLE_LOG_LIMIT else logging.DEBUG,
                "dropped a QoS %d message on %s: its MQTT properties cannot be read (%s); "
                "acknowledged, so the broker does not send it again", qos, topic, reason)

    @never_raises
    def _on_message(self, client: paho.Client, userdata: Any, message: paho.MQTTMessage
                    ) -> None:
        received = time.monotonic()
        try:
            topic = message.topic
        except UnicodeDecodeError:
            log.warning("dropping a message whose topic is not UTF-8")
            self.ack(message.mid, message.qos)
            return
        incoming = incoming_of(message, topic, received, self)
        try:
            self._on_message_cb(incoming)
        except Exception:
            log.exception("error handling a message on %s; acknowledged and dropped", topic)
            self.ack(message.mid, message.qos)
