"""What travels on a link: a received message (:class:`Incoming`, read from paho's by
:func:`incoming_of`), the size of a PUBLISH we send (:func:`publish_packet_size`;
:class:`PacketTooLarge` when the broker would refuse it) and the broker's confirmation of one
(:func:`wait_confirmed`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import paho.mqtt.client as paho
from paho.mqtt.properties import Properties

from . import fast_properties

if TYPE_CHECKING:
    from .client import MqttLink


class PacketTooLarge(Exception):
    """An outgoing message is bigger than the broker accepts."""


@dataclass(frozen=True)
class Incoming:
    """A received message, decoupled from paho's objects."""

    topic: str
    payload: bytes
    qos: int
    mid: int
    dup: bool
    retain: bool
    received: float                      # time.monotonic() on arrival
    response_topic: str | None = None    # v5 Response Topic
    correlation: bytes | None = None     # v5 Correlation Data
    expiry_s: int | None = None          # v5 Message Expiry Interval left on arrival
    link: MqttLink | None = field(default=None, compare=False, repr=False)  # it came on


def incoming_of(message: paho.MQTTMessage, topic: str, received: float,
                link: MqttLink) -> Incoming:
    """paho's ``message`` (its ``topic`` already decoded) with its v5 properties."""
    props = getattr(message, "properties", None)
    response_topic = correlation = expiry = None
    if props is not None:
        response_topic = getattr(props, "ResponseTopic", None)
        correlation = getattr(props, "CorrelationData", None)
        expiry = getattr(props, "MessageExpiryInterval", None)
    return Incoming(topic=topic, payload=bytes(message.payload), qos=message.qos,
                    mid=message.mid, dup=bool(message.dup), retain=bool(message.retain),
                    received=received, response_topic=response_topic,
                    correlation=bytes(correlation) if correlation is not None else None,
                    expiry_s=int(expiry) if expiry is not None else None, link=link)


# More than the properties edgevlm puts on a PUBLISH can take (a response topic and
# correlation data of at most 64 KiB each, a message expiry) plus the fixed header.
PROPERTIES_BOUND = 3 * 65_536


def new_properties(packet_type: int) -> Properties:
    return fast_properties.new_properties(packet_type)


def _varint_len(n: int) -> int:
    size = 1
    while n >= 128:
        n //= 128
        size += 1
    return size


def publish_packet_size(topic: str, payload: bytes, qos: int, properties: Properties | None,
                        protocol5: bool) -> int:
    """Bytes of the PUBLISH packet paho will send."""
    remaining = 2 + len(topic.encode()) + (2 if qos else 0) + len(payload)
    if protocol5:
        remaining += len(properties.pack()) if properties is not None else 1  # type: ignore[no-untyped-call]
    return 1 + _varint_len(remaining) + remaining


def wait_confirmed(info: paho.MQTTMessageInfo, timeout: float) -> bool:
    """Wait until the broker confirmed a QoS 1 publish (PUBACK), also across reconnects.

    paho's ``wait_for_publish`` raises at once for a message published while disconnected,
    although paho resends it after the reconnect; this waits for the PUBACK itself."""
    condition: threading.Condition = info._condition
    with condition:
        return bool(condition.wait_for(lambda: info._published, timeout))

