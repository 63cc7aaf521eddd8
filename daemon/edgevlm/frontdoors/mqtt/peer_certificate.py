"""The broker's certificate, read without trusting it: for error messages only.

When the TLS handshake refuses the broker's certificate, Python says why ("certificate has
expired", "IP address mismatch") but not what the certificate holds. :func:`fetch` gets it again
without verification (``ssl.get_server_certificate``) and reads from its DER the few fields a
message needs: the validity dates and the names (the subjectAltName's DNS names and IP
addresses, else the subject's common name). Nothing here decides whether to trust anything.
"""

from __future__ import annotations

import ipaddress
import ssl
from dataclasses import dataclass
from datetime import UTC, datetime

_UTC_TIME, _GENERALIZED_TIME = 0x17, 0x18
_VERSION, _EXTENSIONS = 0xA0, 0xA3            # [0] and [3] of TBSCertificate
_DNS_NAME, _IP_ADDRESS = 0x82, 0x87           # GeneralName [2] and [7]
_COMMON_NAME = bytes.fromhex("550403")         # 2.5.4.3
_SUBJECT_ALT_NAME = bytes.fromhex("551d11")    # 2.5.29.17


@dataclass(frozen=True)
class CertificateFacts:
    names: tuple[str, ...]
    not_before: datetime
    not_after: datetime


def _items(data: bytes) -> list[tuple[int, bytes]]:
    """The (tag, contents) of each DER element in ``data``."""
    out = []
    pos = 0
    while pos < len(data):
        tag, length = data[pos], data[pos + 1]
        pos += 2
        if length & 0x80:
            count = length & 0x7F
            length = int.from_bytes(data[pos:pos + count], "big")
            pos += count
        if pos + length > len(data):
            raise ValueError("truncated DER")
        out.append((tag, data[pos:pos + length]))
        pos += length
    return out


def _time(tag: int, value: bytes) -> datetime:
    pattern = "%y%m%d%H%M%SZ" if tag == _UTC_TIME else "%Y%m%d%H%M%SZ"
    return datetime.strptime(value.decode("ascii"), pattern).replace(tzinfo=UTC)


def _alt_names(extensions: bytes) -> list[str]:
    names = []
    for _, extension in _items(_items(extensions)[0][1]):
        parts = _items(extension)  # extnID, [critical], extnValue
        if parts[0][1] != _SUBJECT_ALT_NAME:
            continue
        for tag, value in _items(_items(parts[-1][1])[0][1]):
            if tag == _DNS_NAME:
                names.append(value.decode("ascii", "replace"))
            elif tag == _IP_ADDRESS:
                names.append(str(ipaddress.ip_address(value)))
    return names


def _common_names(subject: bytes) -> list[str]:
    return [value[1].decode("utf-8", "replace")
            for _, rdn in _items(subject) for _, pair in _items(rdn)
            for oid, value in [_items(pair)] if oid[1] == _COMMON_NAME]


def parse(der: bytes) -> CertificateFacts:
    """The names and validity of a DER certificate; ValueError/IndexError if malformed."""
    fields = _items(_items(_items(der)[0][1])[0][1])  # Certificate -> TBSCertificate
    if fields[0][0] == _VERSION:
        fields = fields[1:]
    # serial, signature, issuer, validity, subject, subjectPublicKeyInfo, optional [1] [2] [3]
    (before_tag, before), (after_tag, after) = _items(fields[3][1])
    names: list[str] = []
    for tag, value in fields[6:]:
        if tag == _EXTENSIONS:
            names += _alt_names(value)
    return CertificateFacts(tuple(names or _common_names(fields[4][1])),
                            _time(before_tag, before), _time(after_tag, after))


def fetch(host: str, port: int, timeout: float = 2.0) -> CertificateFacts | None:
    """The certificate ``host:port`` presents, or None when it cannot be had."""
    try:
        pem = ssl.get_server_certificate((host, port), timeout=timeout)
        return parse(ssl.PEM_cert_to_DER_cert(pem))
    except (OSError, ValueError, IndexError):
        return None
