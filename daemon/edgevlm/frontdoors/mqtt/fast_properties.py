"""MQTT v5 properties at a fraction of paho's cost, with paho's own tables and semantics.

paho-mqtt's :class:`~paho.mqtt.properties.Properties` rebuilds its three lookup tables
(property names, types, packet types) in ``__init__`` and finds a property by scanning every
name with ``str.replace``. The daemon's network thread pays that for each request received
(its Response Topic and Correlation Data), each answer sent and each PUBACK of an answer (paho
makes an empty ``Properties`` for every PUBACK): measured at 2,000 requests/s it was the
largest single cost of answering (~0.1 ms of ~0.5 ms per refused request).

:class:`FastProperties` is a subclass that *shares* the tables of one paho-made instance (paho
only reads them) and looks names up in dicts built from those tables; every rule of
``__setattr__`` is paho's own (names and packet types are checked here, and names whose values
paho range-checks or accumulates go through paho's ``__setattr__`` unchanged). Packing and
unpacking give the same bytes, attributes and errors as paho (``tests/unit/
test_fast_properties.py`` compares them on a corpus), with one deliberate difference: a
string may hold U+FEFF. MQTT 5 §1.5.4 says a receiver must *not* strip or skip it (it is valid
UTF-8, and Mosquitto forwards it), but paho 2.2 raises ``MalformedPacket`` for it — inside its
packet handler, so the connection drops, the broker redelivers the unacknowledged request
after the reconnect, and the daemon loops (issue 20). Strings are read as §1.5.4 says:
ill-formed UTF-8 (surrogates included) and U+0000 are malformed; U+FEFF, control characters
and non-characters are accepted (the spec leaves the last two to the receiver; paho accepts
them too).

:func:`decode_publish_properties` reads a PUBLISH's properties by the spec alone, without
paho's tables, into whichever class :func:`new_properties` gives; the MQTT link uses it when
paho's own decoder refused a PUBLISH (see ``edgevlm.frontdoors.mqtt.client``), so a U+FEFF is read
the
same with paho's ``Properties`` in use.

:func:`install` makes paho's packet decoder build ``FastProperties`` (one name in paho's
private ``_packet`` module). When that module, or what a paho instance holds, is not as
expected, nothing changes and paho's own class is used (``COMPATIBLE``; a test asserts it for
the paho in use, so an upgrade that breaks the assumption fails in CI instead of slowing down).
"""

from __future__ import annotations

import logging
from typing import Any

from paho.mqtt.exception import MalformedPacket, MQTTException
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties, VariableByteIntegers, readInt16

log = logging.getLogger(__name__)

_TEMPLATE: Any = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
_IDENT: dict[str, int] = {name.replace(" ", ""): ident
                          for name, ident in _TEMPLATE.names.items()}
_NAME: dict[int, str] = {ident: name for name, ident in _TEMPLATE.names.items()}
_ORDER: tuple[tuple[str, int], ...] = tuple(_IDENT.items())  # paho's packing order
_COMPRESSED: dict[int, str] = {ident: name for name, ident in _IDENT.items()}
_MULTIPLE = frozenset({11, 38})  # paho's allowsMultiple: Subscription Identifier, User Property
_UTF8 = _TEMPLATE.types.index("UTF-8 Encoded String")
_UTF8_PAIR = _TEMPLATE.types.index("UTF-8 String Pair")
_PRIVATE = frozenset({"packetType", "types", "names", "properties"})
# paho's instances hold these four attributes and the properties, nothing else; a paho that
# keeps more state per instance is not served by this class (paho's own is used instead)
COMPATIBLE = set(vars(_TEMPLATE)) == _PRIVATE
# Names whose values paho range-checks or accumulates into lists: left to paho's __setattr__.
_PAHO_RULES = frozenset({"ReceiveMaximum", "TopicAlias", "TopicAliasMaximum",
                         "MaximumPacketSize", "SubscriptionIdentifier",
                         "RequestResponseInformation", "RequestProblemInformation",
                         "PayloadFormatIndicator", "UserProperty"})


def read_utf8(buffer: bytes | bytearray | memoryview, maxlen: int) -> tuple[str, int]:
    """A length-prefixed MQTT string at the start of ``buffer`` (at most ``maxlen`` bytes of
    it belong to the properties): (text, bytes used). paho's ``readUTF`` as MQTT 5 §1.5.4 has
    it: ``MalformedPacket`` for a length past ``maxlen`` and for U+0000,
    ``UnicodeDecodeError`` (as paho; its decoder makes both ``MalformedPacket``) for ill-formed
    UTF-8, surrogates included; U+FEFF is text like any other."""
    if maxlen < 2:
        raise MalformedPacket("Not enough data to read string length")
    length: int = readInt16(buffer)  # type: ignore[no-untyped-call]
    if length > maxlen - 2:
        raise MalformedPacket("Length delimited string too long")
    text = bytes(buffer[2:2 + length]).decode("utf-8")  # strict: no surrogates come out
    if "\x00" in text:
        raise MalformedPacket("[MQTT-1.5.4-2] Null found in UTF-8 data")
    return text, length + 2


class FastProperties(Properties):
    """paho's ``Properties`` with shared tables and dict look-ups; same behaviour, but for
    U+FEFF (see the module docstring)."""

    types = _TEMPLATE.types
    names = _TEMPLATE.names
    properties = _TEMPLATE.properties

    def __init__(self, packetType: int) -> None:  # noqa: N803  (paho's signature)
        object.__setattr__(self, "packetType", packetType)

    def getIdentFromName(self, compressedName: str) -> int:  # noqa: N802,N803
        return _IDENT.get(compressedName, -1)

    def getNameFromIdent(self, identifier: int) -> str | None:  # noqa: N802
        return _NAME.get(identifier)

    def __setattr__(self, name: str, value: Any) -> None:
        name = name.replace(" ", "")
        if name in _PRIVATE or name in _PAHO_RULES:
            Properties.__setattr__(self, name, value)  # type: ignore[no-untyped-call]
            return
        ident = _IDENT.get(name)
        if ident is None:
            raise MQTTException(f"Property name must be one of {self.names.keys()}")
        if self.packetType not in self.properties[ident][1]:
            raise MQTTException(f"Property {name} does not apply to packet type "
                                f"{PacketTypes.Names[self.packetType]}")
        object.__setattr__(self, name, value)

    def readProperty(self, buffer: bytes, type: int, propslen: int  # noqa: N802
                     ) -> tuple[Any, int]:
        if type == _UTF8:
            return read_utf8(buffer, propslen)
        if type == _UTF8_PAIR:
            key, used = read_utf8(buffer, propslen)
            value, used_value = read_utf8(buffer[used:], propslen - used)
            return (key, value), used + used_value
        return Properties.readProperty(self, buffer, type, propslen)  # type: ignore[no-untyped-call,no-any-return]

    def unpack(self, buffer: bytes) -> tuple[FastProperties, int]:
        """paho's ``unpack`` reading at offsets: paho slices the rest of the packet (the
        payload too) once or more per property and per length byte."""
        self.clear()
        propslen, vbi_len = VariableByteIntegers.decode(buffer[:4])  # type: ignore[no-untyped-call]
        pos, left = vbi_len, propslen
        present = self.__dict__
        while left > 0:
            identifier, used = VariableByteIntegers.decode(buffer[pos:pos + 4])  # type: ignore[no-untyped-call]
            pos += used
            left -= used
            attr_type = self.properties[identifier][0]
            # at least 4 bytes: paho reads fixed-size values past the properties too
            value, used = self.readProperty(buffer[pos:pos + max(left, 4)], attr_type, left)
            pos += used
            left -= used
            name = _COMPRESSED[identifier]
            if identifier not in _MULTIPLE and name in present:
                raise MQTTException(f"Property '{property}' must not exist more than once")
            setattr(self, name, value)
        return self, propslen + vbi_len

    def isEmpty(self) -> bool:  # noqa: N802
        present = self.__dict__
        return not any(name in present for name in _IDENT)

    def clear(self) -> None:
        present = self.__dict__
        for name in [name for name in present if name in _IDENT]:
            object.__delattr__(self, name)

    def pack(self) -> bytes:
        present = self.__dict__
        buffer = b""
        for name, ident in _ORDER:
            if name not in present:
                continue
            attr_type = self.properties[ident][0]
            if ident in (11, 38):  # allowsMultiple
                for value in present[name]:
                    buffer += self.writeProperty(ident, attr_type, value)  # type: ignore[no-untyped-call]
            else:
                buffer += self.writeProperty(ident, attr_type, present[name])  # type: ignore[no-untyped-call]
        return VariableByteIntegers.encode(len(buffer)) + buffer  # type: ignore[no-untyped-call,no-any-return]


def new_properties(packet_type: int) -> Properties:
    """Empty properties for an outgoing packet: :class:`FastProperties` where it fits paho."""
    cls = FastProperties if COMPATIBLE else Properties
    return cls(packet_type)


def publish_properties(correlation: bytes | None = None, response_topic: str | None = None
                       ) -> Properties:
    """Properties for an outgoing PUBLISH."""
    props = new_properties(PacketTypes.PUBLISH)
    if response_topic is not None:
        props.ResponseTopic = response_topic
    if correlation is not None:
        props.CorrelationData = correlation
    return props


# MQTT 5 §3.3.2.3: the properties a PUBLISH may carry, with paho's names and the spec's types
_PUBLISH_PROPERTIES: dict[int, tuple[str, str]] = {
    0x01: ("PayloadFormatIndicator", "byte"), 0x02: ("MessageExpiryInterval", "int32"),
    0x03: ("ContentType", "utf8"), 0x08: ("ResponseTopic", "utf8"),
    0x09: ("CorrelationData", "binary"), 0x0B: ("SubscriptionIdentifier", "varint"),
    0x23: ("TopicAlias", "int16"), 0x26: ("UserProperty", "pair"),
}


def _varint(view: memoryview, pos: int, end: int) -> tuple[int, int]:
    """The Variable Byte Integer at ``pos`` (before ``end``): (value, position after it)."""
    value, mult = 0, 1
    for _ in range(4):
        if pos >= end:
            raise MalformedPacket("a Variable Byte Integer runs past the properties")
        byte = view[pos]
        pos += 1
        value += (byte & 0x7F) * mult
        if not byte & 0x80:
            return value, pos
        mult *= 128
    raise MalformedPacket("a Variable Byte Integer longer than 4 bytes")


def _fixed(view: memoryview, pos: int, end: int, size: int) -> tuple[int, int]:
    if pos + size > end:
        raise MalformedPacket("a property value runs past the properties")
    return int.from_bytes(view[pos:pos + size], "big"), pos + size


def _read_value(kind: str, view: memoryview, pos: int, end: int) -> tuple[Any, int]:
    if kind == "byte":
        return _fixed(view, pos, end, 1)
    if kind == "int16":
        return _fixed(view, pos, end, 2)
    if kind == "int32":
        return _fixed(view, pos, end, 4)
    if kind == "varint":
        return _varint(view, pos, end)
    if kind == "binary":
        length, start = _fixed(view, pos, end, 2)
        if start + length > end:
            raise MalformedPacket("binary data runs past the properties")
        return bytes(view[start:start + length]), start + length
    text, used = read_utf8(view[pos:end], end - pos)
    if kind == "utf8":
        return text, pos + used
    value, used_value = read_utf8(view[pos + used:end], end - pos - used)
    return (text, value), pos + used + used_value


def decode_publish_properties(buffer: bytes | bytearray | memoryview
                              ) -> tuple[Properties, int]:
    """The properties at the start of ``buffer`` (a PUBLISH after its packet id), read as
    MQTT 5 says and nothing else: (properties, bytes used). ``MalformedPacket`` for what the
    spec calls malformed or a protocol error: a length past the packet, an identifier a
    PUBLISH cannot carry, a property twice that may appear once, ill-formed UTF-8, U+0000, a
    Payload Format Indicator other than 0/1, a zero Topic Alias or Subscription Identifier.
    The payload after the properties is not copied."""
    view = memoryview(buffer)
    length, pos = _varint(view, 0, min(len(view), 4))
    end = pos + length
    if end > len(view):
        raise MalformedPacket("the properties run past the packet")
    props = new_properties(PacketTypes.PUBLISH)
    seen: set[int] = set()
    while pos < end:
        ident, pos = _varint(view, pos, end)
        known = _PUBLISH_PROPERTIES.get(ident)
        if known is None:
            raise MalformedPacket(f"property {ident:#x} cannot be in a PUBLISH")
        name, kind = known
        if ident in seen and ident not in _MULTIPLE:
            raise MalformedPacket(f"{name} more than once")
        seen.add(ident)
        try:
            value, pos = _read_value(kind, view, pos, end)
        except UnicodeDecodeError as exc:
            raise MalformedPacket(f"[MQTT-1.5.4-1] {name} is not UTF-8: {exc.reason}"
                                  ) from None
        if (name == "PayloadFormatIndicator" and value > 1) or (
                name in ("TopicAlias", "SubscriptionIdentifier") and value == 0):
            raise MalformedPacket(f"{name} {value} is not allowed")
        try:
            setattr(props, name, value)
        except MQTTException as exc:  # paho's own range checks
            raise MalformedPacket(str(exc)) from None
    return props, end


def install() -> bool:
    """Make paho's packet decoder use :class:`FastProperties` (idempotent). False when paho's
    private decoder module is not the one this was written against (nothing is changed)."""
    try:
        from paho.mqtt import _packet
    except ImportError:
        log.debug("paho has no _packet module; its own Properties stay in use")
        return False
    current = getattr(_packet, "Properties", None)
    if current is FastProperties:
        return True
    if current is not Properties or not COMPATIBLE:
        log.debug("paho's _packet.Properties is %r; left alone", current)
        return False
    _packet.Properties = FastProperties  # type: ignore[attr-defined]
    return True
