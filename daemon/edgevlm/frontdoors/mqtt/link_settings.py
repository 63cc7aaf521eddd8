"""A link's connection settings, and the packet size limits it announces and assumes.

:class:`LinkSettings` is everything :class:`~.client.MqttLink` needs to connect (from the
``mqtt`` section of the configuration: :meth:`LinkSettings.from_config`);
:func:`max_incoming_packet` is the Maximum Packet Size the daemon announces in CONNECT.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...config import MQTTConfig

DEFAULT_MAX_PACKET = 2_000_000     # what we assume when the broker does not say (3.1.1)
PROTOCOL_MAX_PACKET = 268_435_455  # MQTT's own limit (v5 broker without the property)
# Room for what comes with a request's payload: its topic, Response Topic, Correlation Data
# and Content Type or User Properties (each at most 64 KiB), the packet id and fixed header.
INCOMING_HEADROOM = 4 * 65_536


def max_incoming_packet(max_payload_bytes: int) -> int:
    """The Maximum Packet Size the daemon announces in CONNECT (MQTT v5): the largest request
    payload (``limits.max_payload_bytes``) plus :data:`INCOMING_HEADROOM`. A request just
    over the payload limit still arrives and is answered ``payload_too_large``; a larger one
    is dropped by the broker (MQTT 5 §3.1.2.11.4) instead of being buffered whole here."""
    return min(int(max_payload_bytes) + INCOMING_HEADROOM, PROTOCOL_MAX_PACKET)


@dataclass(frozen=True)
class LinkSettings:
    host: str
    port: int
    client_id: str
    protocol5: bool
    keepalive: int
    will_topic: str
    will_payload: bytes = b"offline"
    will_delay_s: int = 5
    username: str | None = None
    password: str | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_insecure: bool = False
    use_tls: bool = False
    clean_start: bool = False
    session_expiry_s: int = 3600
    reconnect_min_s: float = 1.0
    reconnect_max_s: float = 60.0
    max_packet_size: int | None = None  # v5 CONNECT Maximum Packet Size; None: not sent

    @classmethod
    def from_config(cls, mqtt: MQTTConfig, host: str, will_topic: str,
                    max_packet_size: int | None = None) -> LinkSettings:
        tls = mqtt.tls
        return cls(host=host, port=mqtt.port, client_id=mqtt.resolved_client_id(),
                   protocol5=str(mqtt.protocol) == "5", keepalive=mqtt.keepalive,
                   will_topic=will_topic, will_delay_s=mqtt.will_delay_s,
                   username=mqtt.username, password=mqtt.password,
                   use_tls=tls is not None, tls_ca=tls.ca if tls else None,
                   tls_cert=tls.cert if tls else None, tls_key=tls.key if tls else None,
                   tls_insecure=bool(tls and tls.insecure), clean_start=mqtt.clean_start,
                   session_expiry_s=mqtt.session_expiry_s,
                   reconnect_min_s=mqtt.reconnect_min_s, reconnect_max_s=mqtt.reconnect_max_s,
                   max_packet_size=max_packet_size)
