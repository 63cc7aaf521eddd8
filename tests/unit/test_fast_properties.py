"""FastProperties behaves exactly like paho's Properties: same attributes, bytes and errors.

Every comparison runs paho's own class and ours side by side on the same input; a difference
in a value, a packed byte, an exception type or an exception message fails. The one intended
difference, a string holding U+FEFF (valid for MQTT 5, refused by paho 2.2), is tested in
tests/reliability/test_hostile_properties.py.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from typing import Any

import pytest
from paho.mqtt import _packet
from paho.mqtt.enums import MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from edgevlm.frontdoors.mqtt.fast_properties import (
    COMPATIBLE,
    FastProperties,
    install,
    publish_properties,
)

PACKET_TYPES = [PacketTypes.CONNECT, PacketTypes.CONNACK, PacketTypes.PUBLISH,
                PacketTypes.PUBACK, PacketTypes.PUBREC, PacketTypes.PUBREL,
                PacketTypes.PUBCOMP, PacketTypes.SUBSCRIBE, PacketTypes.SUBACK,
                PacketTypes.UNSUBSCRIBE, PacketTypes.UNSUBACK, PacketTypes.DISCONNECT,
                PacketTypes.AUTH, PacketTypes.WILLMESSAGE]

# valid values per property type, then values paho refuses for some names
VALUES: dict[str, list[Any]] = {
    "Byte": [0, 1],
    "Two Byte Integer": [1, 300, 65535],
    "Four Byte Integer": [0, 70_000, 2**32 - 1],
    "Variable Byte Integer": [1, 200, 268_435_455],
    "Binary Data": [b"", b"\x00\xff", b"q" * 300],
    "UTF-8 Encoded String": ["", "edgevlm/clients/me/reply", "caf\u00e9 \U0001f600"],
    "UTF-8 String Pair": [("k", "v"), ("", "\u00e9")],
}
OUT_OF_RANGE = [-1, 0, 2, 65_536, 268_435_456]


def outcome(action: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", action()
    except Exception as exc:  # the comparison is the point: any exception, same on both
        return "raised", (type(exc), str(exc))


def state(props: Properties) -> tuple[Any, ...]:
    return (str(props), props.json(), props.isEmpty(), outcome(props.pack))


def both(packet_type: int) -> tuple[Properties, FastProperties]:
    return Properties(packet_type), FastProperties(packet_type)


def type_name(ident: int) -> str:
    template = Properties(PacketTypes.PUBLISH)
    return template.types[template.properties[ident][0]]


def all_names() -> list[tuple[str, int]]:
    return [(name.replace(" ", ""), ident) for name, ident in Properties(1).names.items()]


@pytest.mark.parametrize("packet_type", PACKET_TYPES)
def test_setting_every_property_gives_paho_state_or_paho_error(packet_type: int) -> None:
    for name, ident in all_names():
        for value in VALUES[type_name(ident)] + OUT_OF_RANGE * isinstance(
                VALUES[type_name(ident)][0], int):
            paho_props, fast_props = both(packet_type)
            for spelled in (name, " ".join(name)):  # paho also accepts names with spaces
                got_paho = outcome(lambda p=paho_props, s=spelled, v=value: setattr(p, s, v))
                got_fast = outcome(lambda p=fast_props, s=spelled, v=value: setattr(p, s, v))
                assert got_fast == got_paho, (packet_type, spelled, value)
            assert state(fast_props) == state(paho_props), (packet_type, name, value)


def test_unknown_names_and_repeated_user_properties_behave_like_paho() -> None:
    paho_props, fast_props = both(PacketTypes.PUBLISH)
    for props in (paho_props, fast_props):
        props.UserProperty = ("a", "1")
        props.UserProperty = [("b", "2"), ("c", "3")]
        props.ResponseTopic = "x/y"
        props.ResponseTopic = "x/z"  # replaced, not accumulated
    assert state(fast_props) == state(paho_props)
    assert outcome(lambda: setattr(fast_props, "Colour", 1)) == \
        outcome(lambda: setattr(paho_props, "Colour", 1))
    paho_props.clear()
    fast_props.clear()
    assert state(fast_props) == state(paho_props)
    assert fast_props.isEmpty()


def property_sets() -> list[tuple[int, Properties]]:
    """Packed paho properties: each property alone, and mixed sets."""
    sets: list[tuple[int, Properties]] = []
    for packet_type in PACKET_TYPES:
        mixed = Properties(packet_type)
        for name, ident in all_names():
            if packet_type not in mixed.properties[ident][1]:
                continue
            for value in VALUES[type_name(ident)]:
                single = Properties(packet_type)
                try:
                    setattr(single, name, value)
                    setattr(mixed, name, value)
                except Exception:  # a value paho refuses for this name: not packable
                    continue
                sets.append((packet_type, single))
        sets.append((packet_type, mixed))
    return sets


def unpack_both(packet_type: int, buffer: bytes) -> tuple[Any, Any]:
    def run(cls: type[Properties]) -> Any:
        def go() -> Any:
            props = cls(packet_type)
            _, used = props.unpack(buffer)
            return used, state(props)
        return outcome(go)
    return run(Properties), run(FastProperties)


def test_unpacking_paho_packed_properties_gives_paho_result() -> None:
    for packet_type, props in property_sets():
        packed = props.pack()
        for tail in (b"", b"payload bytes after the properties"):
            got_paho, got_fast = unpack_both(packet_type, packed + tail)
            assert got_paho[0] == "ok"
            assert got_fast == got_paho, (packet_type, str(props))
            assert FastProperties(packet_type).unpack(packed + tail)[0].pack() == packed


def test_unpacking_truncated_and_mutated_buffers_fails_or_succeeds_like_paho() -> None:
    rng = random.Random(5)
    corpus: list[tuple[int, bytes]] = []
    for packet_type, props in property_sets():
        packed = props.pack()
        corpus += [(packet_type, packed[:cut]) for cut in range(len(packed))]
        for _ in range(4):
            mutated = bytearray(packed + b"\x00\x01tail")
            for _ in range(rng.randint(1, 3)):
                mutated[rng.randrange(len(mutated))] = rng.randrange(256)
            corpus.append((packet_type, bytes(mutated)))
    # strings paho refuses (but U+FEFF, see the module docstring), duplicates, and lengths
    # that run past the properties
    bad_strings = [b"\x00", b"\xed\xa0\x80", b"\xff"]
    for raw in bad_strings:
        body = b"\x08" + struct.pack("!H", len(raw)) + raw
        corpus.append((PacketTypes.PUBLISH, bytes([len(body)]) + body))
    twice = b"\x08\x00\x01a\x08\x00\x01b"
    corpus.append((PacketTypes.PUBLISH, bytes([len(twice)]) + twice))
    corpus.append((PacketTypes.PUBLISH, b"\x03\x08\x00\x09abc"))
    corpus.append((PacketTypes.PUBLISH, b"\x02\x02\x00\x00\x00\x07"))  # int runs past
    corpus.append((PacketTypes.PUBLISH, b"\x05\xff\xff\xff\xff\x01"))  # 5-byte identifier
    corpus.append((PacketTypes.PUBACK, b"\x02\x7f\x00"))               # unknown identifier
    for packet_type, buffer in corpus:
        got_paho, got_fast = unpack_both(packet_type, buffer)
        assert got_fast == got_paho, (packet_type, buffer)


def test_installed_decoder_reads_publish_and_puback_properties_like_paho() -> None:
    props = Properties(PacketTypes.PUBLISH)
    props.ResponseTopic = "edgevlm/clients/me/reply"
    props.CorrelationData = b"q1"
    props.MessageExpiryInterval = 30
    topic = b"edgevlm/node1/request/describe"
    packet = struct.pack("!H", len(topic)) + topic + struct.pack("!H", 7) + props.pack() + \
        b'{"v": 1}'
    saved = _packet.Properties
    try:
        _packet.Properties = Properties
        reference = _packet.decode_publish(0x32, packet, MQTTProtocolVersion.MQTTv5)
        assert install()
        assert install()  # idempotent
        decoded = _packet.decode_publish(0x32, packet, MQTTProtocolVersion.MQTTv5)
        puback = _packet.decode_puback(0x40, b"\x00\x07", MQTTProtocolVersion.MQTTv5)
    finally:
        _packet.Properties = saved
    assert isinstance(decoded.properties, FastProperties)
    assert state(decoded.properties) == state(reference.properties)
    assert decoded.payload == reference.payload == b'{"v": 1}'
    assert isinstance(puback.properties, FastProperties) and puback.properties.isEmpty()


def test_the_paho_in_use_is_one_fast_properties_fits() -> None:
    assert COMPATIBLE, "paho's Properties keeps other state now: review fast_properties.py"
    assert isinstance(publish_properties(b"x"), FastProperties)


def test_install_leaves_an_unexpected_decoder_alone() -> None:
    saved = _packet.Properties
    try:
        _packet.Properties = object
        assert not install()
        assert _packet.Properties is object
    finally:
        _packet.Properties = saved


@pytest.mark.parametrize("correlation", [b"", b"q1", bytes(range(256)) * 255 + b"x" * 255])
def test_answer_properties_pack_to_paho_bytes(correlation: bytes) -> None:
    reference = Properties(PacketTypes.PUBLISH)
    reference.ResponseTopic = "edgevlm/clients/me/reply"
    reference.CorrelationData = correlation
    assert publish_properties(correlation, "edgevlm/clients/me/reply").pack() == \
        reference.pack()
    only = Properties(PacketTypes.PUBLISH)
    only.CorrelationData = correlation
    assert publish_properties(correlation).pack() == only.pack()
