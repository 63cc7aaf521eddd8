"""paho's client as the daemon runs it: a PUBLISH paho cannot decode does not cost the
connection (:class:`PahoClient`), and paho's "not connected" chatter is DEBUG (:class:`PahoLog`).
Both lean on paho 2.x internals (``_handle_publish``, ``_in_packet``, ``_packet_queue``);
``tests/reliability/test_hostile_properties.py`` exercises them against the paho in use.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import MQTTErrorCode
from paho.mqtt.exception import MalformedPacket
from paho.mqtt.properties import Properties

from . import fast_properties

log = logging.getLogger("edgevlm.frontdoors.mqtt.client")

UNSPECIFIED_ERROR = 0x80           # the reason code of a PUBACK for a message we dropped


# paho's threaded loop (``loop_forever``) calls its ``_loop`` once more after every failed
# reconnect and after our own DISCONNECT; without a socket that call logs this at ERROR and
# returns MQTT_ERR_NO_CONN, which is how the loop learns to wait and retry (or to end). It is
# the expected state of an offline or stopping client, not an error: what went wrong is said
# once by :mod:`.connect_errors` (a failed attempt) or by ``_on_disconnect`` (a lost link).
_PAHO_NO_CONNECTION = "Client is not connected"


class PahoLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """paho's log lines on ``edgevlm.frontdoors.mqtt.paho``, its MQTT_ERR_NO_CONN line at DEBUG.

    paho calls ``log(level, fmt, *args)`` (``enable_logger``); the level check comes first,
    so the DEBUG lines of every packet cost nothing unless DEBUG is on."""

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if level > logging.DEBUG and isinstance(msg, str) and msg.startswith(
                _PAHO_NO_CONNECTION):
            level = logging.DEBUG
        super().log(level, msg, *args, **kwargs)


def _publish_head(header: int, data: bytes | bytearray) -> tuple[bytes, int, int, int] | None:
    """(topic, QoS, packet id, offset of the properties) of a PUBLISH's body; None when the
    body is too short for them or the QoS is 3."""
    qos = (header & 0x06) >> 1
    if qos == 3 or len(data) < 2:
        return None
    topic_end = 2 + int.from_bytes(data[:2], "big")
    end = topic_end + (2 if qos else 0)
    if len(data) < end:
        return None
    mid = int.from_bytes(data[topic_end:end], "big") if qos else 0
    return bytes(data[2:topic_end]), qos, mid, end


class PahoClient(paho.Client):
    """paho's client, except that a PUBLISH paho cannot decode does not end the connection.

    paho raises ``MalformedPacket`` in its packet handler for a PUBLISH whose properties its
    decoder refuses — also for U+FEFF in a string, which MQTT 5 §1.5.4 allows and Mosquitto
    forwards — and closes the connection; the broker sends the unacknowledged message again
    after the reconnect, and the client loops without ever reading it (issue 20). The packet
    id comes before the properties, so here the message is still handled: its properties are
    read again by the spec (:func:`fast_properties.decode_publish_properties`, whichever
    ``Properties`` class paho uses) and, when that works, delivered as paho would; otherwise
    acknowledged ("Unspecified error", 0x80, on v5) and dropped, and ``on_unreadable(topic,
    qos, reason)`` told. Only a PUBLISH too short for its topic and packet id stays a protocol
    error (the stream itself is broken; nothing can be acknowledged).

    The daemon subscribes at QoS 1, so QoS 2 never arrives; it is handled like paho does.
    """

    on_unreadable: Callable[[str, int, str], None] | None = None

    def _handle_publish(self) -> MQTTErrorCode:
        try:
            return super()._handle_publish()
        except MalformedPacket as exc:  # raised by the decoder, before any callback ran
            return self._handle_refused_publish(exc)

    def _handle_refused_publish(self, exc: MalformedPacket) -> MQTTErrorCode:
        header, data = self._in_packet["command"], self._in_packet["packet"]
        head = _publish_head(header, data)
        if head is None:
            log.warning("the broker sent a PUBLISH too short for its topic and packet id "
                        "(%s); reconnecting", exc)
            return MQTTErrorCode.MQTT_ERR_PROTOCOL
        topic, qos, mid, pos = head
        reason = str(exc) or type(exc).__name__
        if self._protocol == paho.MQTTv5:
            try:
                props, used = fast_properties.decode_publish_properties(memoryview(data)[pos:])
            except MalformedPacket as err:
                reason = str(err)
            else:
                return self._deliver(header, topic, mid, props, bytes(data[pos + used:]))
        callback = self.on_unreadable
        if callback is not None:
            callback(topic.decode("utf-8", "replace")[:200], qos, reason)
        return self._ack_unreadable(mid, qos)

    def _deliver(self, header: int, topic: bytes, mid: int, props: Properties,
                 payload: bytes) -> MQTTErrorCode:
        """The end of paho's ``_handle_publish``, for a message decoded here."""
        message = paho.MQTTMessage(mid=mid, topic=topic)
        message.dup = bool(header & 0x08)
        message.qos = (header & 0x06) >> 1
        message.retain = bool(header & 0x01)
        message.properties = props
        message.payload = payload
        message.timestamp = time.monotonic()
        if message.qos == 2:
            rc = self._send_pubrec(mid)
            message.state = paho.mqtt_ms_wait_for_pubrel
            with self._in_message_mutex:
                self._in_messages[mid] = message
            return rc
        self._handle_on_message(message)
        if message.qos == 1 and not self._manual_ack:
            return self._send_puback(mid)
        return MQTTErrorCode.MQTT_ERR_SUCCESS

    def _ack_unreadable(self, mid: int, qos: int) -> MQTTErrorCode:
        if qos == 0:
            return MQTTErrorCode.MQTT_ERR_SUCCESS
        kind = paho.PUBACK if qos == 1 else paho.PUBREC  # a v5 PUBREC >= 0x80 ends the flow
        if self._protocol == paho.MQTTv5:
            packet = struct.pack("!BBHB", kind, 3, mid, UNSPECIFIED_ERROR)
            return self._packet_queue(kind, packet, mid, 1)
        return self._send_command_with_mid(kind, mid, False)
