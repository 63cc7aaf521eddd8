"""Image URLs of an HTTP request: checked before anything is fetched, then fetched with limits.

``http(s)`` URLs are fetched only from hosts in ``http.allowed_media_domains`` (exact names).
Before any fetch, the request is admitted once with every URL standing for the smallest image
(:func:`with_placeholders`): a request whose item counts, text or ``max_tokens`` cannot fit is
refused without a connection. Then each URL is fetched:

- at most ``limits.max_part_bytes`` (the declared length is checked first, then the bytes as
  they arrive), within ``http.media_fetch_timeout_s`` for the whole fetch;
- redirects followed by hand, at most :data:`MAX_REDIRECTS`: each must stay on an allowed
  host, and its address must not be private, loopback, link-local or otherwise non-global —
  checked by the resolver the connection uses, so a DNS answer cannot change between the check
  and the connect. The first hop may be private: the operator allowed that host (a Frigate on
  the LAN).

The fetched bytes replace the URL as a data URL, and the request goes through the normal
admission with its real sizes.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import socket
import time
from typing import Any
from urllib.parse import urljoin, urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from ...wire.errors import InvalidRequest, PayloadTooLarge, UnsupportedMedia

MAX_REDIRECTS = 3
# the smallest valid picture (a 1x1 PNG): an image URL's lower bound at the first admission
PLACEHOLDER = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4"
               "nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC")


def remote_urls(request: dict[str, Any]) -> list[str]:
    """The http(s) image URLs of a protocol-form request, in order."""
    return [url for part in _image_url_parts(request)
            if (url := _url_of(part)).startswith(("http://", "https://"))]


def _image_url_parts(request: dict[str, Any]) -> list[dict[str, Any]]:
    parts = []
    for message in request.get("messages", []):
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            parts += [p for p in content if isinstance(p, dict) and p.get("type") == "image_url"]
    return parts


def _url_of(part: dict[str, Any]) -> str:
    value = part.get("image_url")
    url = value.get("url") if isinstance(value, dict) else value
    return url if isinstance(url, str) else ""


def substituted(request: dict[str, Any], fetched: dict[str, str]) -> dict[str, Any]:
    """``request`` with each remote URL replaced by ``fetched[url]`` (a data URL)."""
    out = {**request, "messages": []}
    for message in request.get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            content = [{"type": "image_url", "image_url": {"url": fetched[_url_of(p)]}}
                       if isinstance(p, dict) and p.get("type") == "image_url"
                       and _url_of(p) in fetched else p for p in content]
        out["messages"].append({**message, "content": content})
    return out


def with_placeholders(request: dict[str, Any]) -> dict[str, Any]:
    """``request`` with every remote URL standing for the smallest image."""
    return substituted(request, dict.fromkeys(remote_urls(request), PLACEHOLDER))


def check_allowed(url: str, allowed: list[str]) -> None:
    """InvalidRequest unless ``url`` is http(s) on an allowed host."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidRequest(f"image URL {url[:200]!r} is not an http(s) URL")
    if parts.hostname.lower() not in allowed:
        raise InvalidRequest(
            f"image URL host {parts.hostname!r} is not in http.allowed_media_domains "
            f"({', '.join(allowed) or 'empty: only data: URLs'}); send the image as a data: "
            "URL, or add the host to http.allowed_media_domains")


# IPv6 prefixes that carry an IPv4 address which a translating network reaches: NAT64's
# well-known prefix (RFC 6052) and the deprecated IPv4-compatible form (::a.b.c.d); 6to4
# (2002::/16) is handled by ipaddress's ``sixtofour``. Python counts them as global whatever
# the IPv4 address inside.
_EMBEDS_IPV4 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("::/96"))


def _global(address: str) -> bool:
    """A public unicast address, and so is any IPv4 address it carries."""
    ip = ipaddress.ip_address(address.split("%")[0])
    if not ip.is_global or ip.is_multicast:
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        inner = ip.ipv4_mapped or ip.sixtofour
        if inner is None and any(ip in net for net in _EMBEDS_IPV4):
            inner = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if inner is not None:
            return _global(str(inner))
    return True


def _check_literal_public(url: str) -> None:
    """A redirect to an IP literal (which no resolver sees) must be a global address."""
    host = urlsplit(url).hostname or ""
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        return
    if not _global(str(literal)):
        raise UnsupportedMedia(f"an image URL redirected to {host}, a private or local "
                               "address; redirects may not leave the public network")


class PublicOnlyResolver(AbstractResolver):
    """Resolves like the system, but refuses names whose addresses are not all global."""

    def __init__(self) -> None:
        self._inner = aiohttp.ThreadedResolver()

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        found = await self._inner.resolve(host, port, family)
        private = [r["host"] for r in found if not _global(r["host"])]
        if private:
            raise UnsupportedMedia(f"an image URL redirected to {host} ({private[0]}), a "
                                   "private or local address; redirects may not leave the "
                                   "public network")
        return found

    async def close(self) -> None:
        await self._inner.close()


class MediaFetcher:
    """Fetches the allowed image URLs of requests (on the HTTP server's event loop)."""

    def __init__(self, allowed: list[str], max_bytes: int, timeout_s: float) -> None:
        self.allowed = [h.lower() for h in allowed]
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    def check(self, request: dict[str, Any]) -> list[str]:
        """The remote URLs of ``request``, each on an allowed host (else InvalidRequest)."""
        urls = remote_urls(request)
        for url in urls:
            check_allowed(url, self.allowed)
        return urls

    async def fetch_all(self, urls: list[str]) -> dict[str, str]:
        """Each URL's bytes as a data URL."""
        unique = list(dict.fromkeys(urls))
        bodies = await asyncio.gather(*(self.fetch(url) for url in unique))
        return dict(zip(unique, bodies, strict=True))

    async def fetch(self, url: str) -> str:
        deadline = time.monotonic() + self.timeout_s
        first = aiohttp.TCPConnector(resolver=aiohttp.ThreadedResolver(), force_close=True)
        later = aiohttp.TCPConnector(resolver=PublicOnlyResolver(), force_close=True)
        async with aiohttp.ClientSession(connector=first) as direct, \
                aiohttp.ClientSession(connector=later) as redirected:
            session = direct
            for _ in range(MAX_REDIRECTS + 1):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    async with session.get(url, allow_redirects=False,
                                           timeout=aiohttp.ClientTimeout(total=left)) as reply:
                        if reply.status in (301, 302, 303, 307, 308):
                            target = urljoin(url, reply.headers.get("Location", ""))
                            check_allowed(target, self.allowed)
                            _check_literal_public(target)  # a name: PublicOnlyResolver
                            url, session = target, redirected
                            continue
                        if reply.status != 200:
                            raise UnsupportedMedia(f"image URL {url[:200]!r} answered HTTP "
                                                   f"{reply.status}")
                        data = await self._read(reply, url)
                        kind = reply.headers.get("Content-Type", "application/octet-stream")
                        return f"data:{kind.split(';')[0]};base64,{base64.b64encode(data).decode()}"
                except TimeoutError:  # aiohttp's timeouts are TimeoutErrors (and ClientErrors)
                    break
                except (aiohttp.ClientError, OSError) as exc:
                    raise UnsupportedMedia(f"image URL {url[:200]!r} could not be fetched: "
                                           f"{exc}") from None
            else:
                raise UnsupportedMedia(f"image URL redirected more than {MAX_REDIRECTS} times")
        raise UnsupportedMedia(f"image URL {url[:200]!r} took longer than "
                               f"{self.timeout_s:g} s (http.media_fetch_timeout_s)")

    async def _read(self, reply: aiohttp.ClientResponse, url: str) -> bytes:
        if reply.content_length is not None and reply.content_length > self.max_bytes:
            raise self._too_large(url, reply.content_length)
        data = bytearray()
        async for block in reply.content.iter_chunked(64 * 1024):
            data += block
            if len(data) > self.max_bytes:
                raise self._too_large(url, len(data))
        return bytes(data)

    def _too_large(self, url: str, size: int) -> PayloadTooLarge:
        return PayloadTooLarge(f"image URL {url[:200]!r} is over {self.max_bytes} bytes "
                               f"({size}+; limits.max_part_bytes)")
