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
test_fast_properties.py`` compares them on a corpus).

:func:`install` makes paho's packet decoder build ``FastProperties`` (one name in paho's
private ``_packet`` module). When that module, or what a paho instance holds, is not as
expected, nothing changes and paho's own class is used (``COMPATIBLE``; a test asserts it for
the paho in use, so an upgrade that breaks the assumption fails in CI instead of slowing down).
"""

from __future__ import annotations

import logging
from typing import Any

from paho.mqtt.exception import MQTTException
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties, VariableByteIntegers, readInt16, readUTF

log = logging.getLogger(__name__)

_TEMPLATE: Any = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
_IDENT: dict[str, int] = {name.replace(" ", ""): ident
                          for name, ident in _TEMPLATE.names.items()}
_NAME: dict[int, str] = {ident: name for name, ident in _TEMPLATE.names.items()}
_ORDER: tuple[tuple[str, int], ...] = tuple(_IDENT.items())  # paho's packing order
_COMPRESSED: dict[int, str] = {ident: name for name, ident in _IDENT.items()}
_MULTIPLE = frozenset({11, 38})  # paho's allowsMultiple: Subscription Identifier, User Property
_UTF8 = _TEMPLATE.types.index("UTF-8 Encoded String")
_PRIVATE = frozenset({"packetType", "types", "names", "properties"})
# paho's instances hold these four attributes and the properties, nothing else; a paho that
# keeps more state per instance is not served by this class (paho's own is used instead)
COMPATIBLE = set(vars(_TEMPLATE)) == _PRIVATE
# Names whose values paho range-checks or accumulates into lists: left to paho's __setattr__.
_PAHO_RULES = frozenset({"ReceiveMaximum", "TopicAlias", "TopicAliasMaximum",
                         "MaximumPacketSize", "SubscriptionIdentifier",
                         "RequestResponseInformation", "RequestProblemInformation",
                         "PayloadFormatIndicator", "UserProperty"})


class FastProperties(Properties):
    """paho's ``Properties`` with shared tables and dict look-ups; same behaviour."""

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
        if type != _UTF8:
            return Properties.readProperty(self, buffer, type, propslen)  # type: ignore[no-untyped-call,no-any-return]
        # paho's readUTF, with its character checks done by `in` instead of a Python loop
        if propslen < 2 or readInt16(buffer) > propslen - 2:  # type: ignore[no-untyped-call]
            return readUTF(buffer, propslen), 0  # type: ignore[no-untyped-call]  # raises
        length = readInt16(buffer)  # type: ignore[no-untyped-call]
        text = buffer[2:2 + length].decode("utf-8")  # strict: no surrogates can come out
        if "\x00" in text or "\ufeff" in text:
            readUTF(buffer, propslen)  # type: ignore[no-untyped-call]  # raises paho's error
        return text, length + 2

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
