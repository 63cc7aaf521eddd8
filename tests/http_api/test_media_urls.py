"""Image URLs over HTTP: refused before any fetch when the request cannot fit, fetched only
from allowed hosts, with size, time and redirect limits, never redirected to a private
address (the SSRF guards of issue 24). A real HTTP server on loopback serves the images and
counts every connection."""

from __future__ import annotations

import http.server
import ipaddress
import socket
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, unquote

import openai
import pytest

from tests.helpers import image_bytes, serving

JPEG = image_bytes(64, 48, seed=9)


class ImageServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.paths: list[str] = []  # every request that reached the server

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(http.server.BaseHTTPRequestHandler):
    server: ImageServer

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.server.paths.append(self.path)
        port = self.server.server_address[1]
        if self.path == "/ok.jpg":
            self._send(200, JPEG, "image/jpeg")
        elif self.path == "/big.jpg":
            self._send(200, b"\xff" * 300_000, "image/jpeg")
        elif self.path == "/hang":
            time.sleep(10)
        elif self.path == "/to-loopback-literal":
            self._redirect(f"http://127.0.0.1:{port}/ok.jpg")
        elif self.path == "/to-localhost":
            self._redirect(f"http://localhost:{port}/ok.jpg")
        elif self.path == "/to-elsewhere":
            self._redirect("http://images.example.invalid/ok.jpg")
        elif self.path.startswith("/redirect?to="):
            self._redirect(unquote(self.path.removeprefix("/redirect?to=")))
        else:
            self._send(404, b"", "text/plain")

    def _send(self, status: int, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _redirect(self, location: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def images() -> Iterator[ImageServer]:
    with serving(ImageServer()) as server:
        yield server


ALLOWED = {"http.allowed_media_domains": ["127.0.0.1", "localhost"],
           "http.media_fetch_timeout_s": 2, "limits.max_part_bytes": 200_000}


def ask(service: Any, *urls: str, **extra: Any) -> Any:
    api = openai.OpenAI(base_url=service.http_url + "/v1", api_key="x", max_retries=0,
                        timeout=60)
    content: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": u}}
                                     for u in urls]
    content.append({"type": "text", "text": "What is in the picture?"})
    return api.chat.completions.create(model="m", messages=[{"role": "user",
                                                             "content": content}], **extra)


def error_of(service: Any, *urls: str, **extra: Any) -> dict[str, Any]:
    with pytest.raises(openai.APIStatusError) as info:
        ask(service, *urls, **extra)
    return {"status": info.value.status_code, **info.value.body}  # type: ignore[dict-item]


def test_an_allowed_url_is_fetched_and_answered(http_service: Any, images: ImageServer
                                                ) -> None:
    service = http_service(ALLOWED)
    answer = ask(service, images.base + "/ok.jpg", max_tokens=4)
    assert answer.choices[0].message.content is not None
    assert answer.model_extra["edgevlm"]["vision_tokens"] > 0  # type: ignore[index]
    assert images.paths == ["/ok.jpg"]


def test_counts_and_budget_are_refused_before_any_fetch(http_service: Any,
                                                        images: ImageServer) -> None:
    service = http_service({**ALLOWED, "limits.limit_mm_per_prompt": {"image": 1}})
    hanging = images.base + "/hang"
    too_many = error_of(service, hanging, hanging + "?2")
    assert too_many["type"] == "mm_limit_exceeded"
    too_long = error_of(service, hanging, max_tokens=service.engine.context)
    assert too_long["type"] == "context_length_exceeded"
    assert images.paths == []  # the URL was never fetched


def test_a_host_not_allowed_is_refused_by_name(http_service: Any, images: ImageServer) -> None:
    service = http_service({"http.allowed_media_domains": ["frigate.lan"]})
    err = error_of(service, images.base + "/ok.jpg")
    assert err["status"] == 400 and "http.allowed_media_domains" in err["message"]
    assert images.paths == []


def test_redirects_into_private_addresses_are_refused(http_service: Any,
                                                      images: ImageServer) -> None:
    service = http_service(ALLOWED)
    for path in ("/to-loopback-literal", "/to-localhost"):
        err = error_of(service, images.base + path)
        assert err["type"] == "unsupported_media", err
        assert "private or local address" in err["message"], err
    assert "/ok.jpg" not in images.paths  # no redirect was followed into loopback
    err = error_of(service, images.base + "/to-elsewhere")
    assert "http.allowed_media_domains" in err["message"]


def test_size_and_time_limits(http_service: Any, images: ImageServer) -> None:
    service = http_service(ALLOWED)
    big = error_of(service, images.base + "/big.jpg")
    assert big["status"] == 413 and "limits.max_part_bytes" in big["message"]
    started = time.monotonic()
    slow = error_of(service, images.base + "/hang")
    assert "http.media_fetch_timeout_s" in slow["message"]
    assert time.monotonic() - started < 8


# ---------------------------------------------------------------- SSRF: private address ranges

# One address of each range a fetch must never be redirected into (issue 24, "Security").
PRIVATE = [
    "10.0.0.1", "10.255.255.254",                      # 10.0.0.0/8
    "172.16.0.1", "172.31.255.254",                    # 172.16.0.0/12
    "192.168.0.1", "192.168.255.254",                  # 192.168.0.0/16
    "169.254.169.254",                                 # cloud metadata (link-local)
    "127.0.0.2", "127.255.255.254",                    # 127.0.0.0/8 beyond 127.0.0.1
    "0.0.0.0",                                         # "this host"
    "::1",                                             # IPv6 loopback
    "fc00::1", "fd00:ec2::254",                        # fc00::/7 (ULA; AWS's IPv6 metadata)
    "fe80::1", "febf::1",                              # fe80::/10 (link-local)
    "::ffff:10.0.0.1", "::ffff:127.0.0.1",             # IPv4-mapped IPv6
    "::ffff:169.254.169.254",
    "64:ff9b::a00:1", "2002:a00:1::1", "::10.0.0.1",   # NAT64, 6to4, IPv4-compatible of 10/8
]
PUBLIC_DECOY = "93.184.216.34"  # a global address: with a private one, still refused


def host_in_url(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def name_for(address: str) -> str:
    """The DNS name the tests' resolver maps to ``address``."""
    return "a-" + ipaddress.ip_address(address).exploded.replace(":", "-").replace(".", "-") \
        + ".ssrf.test"


class Guard:
    """Every ``connect`` to a guarded address is recorded and refused: a test's proof that
    no connection was even attempted (nothing real is ever reached)."""

    def __init__(self, addresses: list[str]) -> None:
        self.guarded = {ipaddress.ip_address(a) for a in addresses}
        self.attempts: list[str] = []


@pytest.fixture
def connect_guard(monkeypatch: pytest.MonkeyPatch) -> Guard:
    guard = Guard([*PRIVATE, PUBLIC_DECOY])
    original = socket.socket.connect

    def connect(sock: socket.socket, address: Any) -> Any:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and isinstance(address, tuple):
            try:
                target = ipaddress.ip_address(str(address[0]).split("%")[0])
            except ValueError:
                target = None
            if target in guard.guarded:
                guard.attempts.append(str(target))
                raise ConnectionRefusedError(f"test guard: no connection to {target}")
        return original(sock, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    return guard


@pytest.fixture
def fake_dns(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """``*.ssrf.test`` names resolve to the addresses the test puts in the returned mapping
    (the system resolver, the one aiohttp's resolvers call, without any network); any other
    name resolves as usual."""
    table: dict[str, list[str]] = {}
    original = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, family: int = 0, type: int = 0, proto: int = 0,
                    flags: int = 0) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        if isinstance(name, str) and name.endswith(".ssrf.test"):
            if name not in table:
                raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
            out: list[Any] = []
            for address in table[name]:
                ip = ipaddress.ip_address(address)
                if ip.version == 6:
                    out.append((socket.AF_INET6, socket.SOCK_STREAM, 6, "",
                                (address, int(port or 0), 0, 0)))
                else:
                    out.append((socket.AF_INET, socket.SOCK_STREAM, 6, "",
                                (address, int(port or 0))))
            return out
        return original(host, port, family, type, proto, flags)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return table


@pytest.mark.parametrize("address", PRIVATE)
def test_the_address_check_refuses_every_private_range(address: str) -> None:
    """The two checks a redirect passes: an IP literal in the URL (which no resolver sees)
    and the addresses a name resolves to (PublicOnlyResolver)."""
    import asyncio

    from edgevlm.frontdoors.http import media_fetch
    from edgevlm.wire.errors import UnsupportedMedia

    with pytest.raises(UnsupportedMedia, match="private or local address"):
        media_fetch._check_literal_public(f"http://{host_in_url(address)}:8080/x.jpg")

    class Answers:
        async def resolve(self, host: str, port: int = 0, family: int = 0) -> list[Any]:
            return [{"hostname": host, "host": a, "port": port, "family": family, "proto": 0,
                     "flags": 0} for a in (PUBLIC_DECOY, address)]

        async def close(self) -> None:
            pass

    async def resolve() -> Any:
        resolver = media_fetch.PublicOnlyResolver()
        resolver._inner = Answers()  # type: ignore[assignment]
        return await resolver.resolve("images.example.com", 80)

    with pytest.raises(UnsupportedMedia, match="private or local address"):
        asyncio.run(resolve())


def test_the_address_check_lets_a_public_address_through() -> None:
    from edgevlm.frontdoors.http import media_fetch

    media_fetch._check_literal_public(f"http://{PUBLIC_DECOY}/x.jpg")
    media_fetch._check_literal_public("http://[2606:4700::1111]/x.jpg")
    media_fetch._check_literal_public("http://[64:ff9b::808:808]/x.jpg")  # NAT64 of 8.8.8.8
    media_fetch._check_literal_public("http://[2002:808:808::1]/x.jpg")   # 6to4 of 8.8.8.8


def _redirect_refused(service: Any, images: ImageServer, target: str) -> None:
    err = error_of(service, images.base + "/redirect?to=" + quote(target, safe=""))
    assert err["type"] == "unsupported_media", err
    assert "private or local address" in err["message"], err


def test_redirects_to_private_ip_literals_are_refused_without_a_connection(
        http_service: Any, images: ImageServer, connect_guard: Guard) -> None:
    """Each literal is on the allow list, so only the private-address rule stands between
    the redirect and the connection."""
    service = http_service({**ALLOWED, "http.allowed_media_domains": [
        "127.0.0.1", *PRIVATE]})
    for address in PRIVATE:
        _redirect_refused(service, images, f"http://{host_in_url(address)}:80/ok.jpg")
    assert connect_guard.attempts == []
    assert len(images.paths) == len(PRIVATE) and "/ok.jpg" not in images.paths


def test_redirects_to_allowed_names_resolving_private_are_refused_without_a_connection(
        http_service: Any, images: ImageServer, connect_guard: Guard,
        fake_dns: dict[str, list[str]]) -> None:
    """An allowed DNS name whose answer is a private address (DNS rebinding), alone or beside
    a public one: refused by the resolver the connection uses, before any connect."""
    names = []
    for address in PRIVATE:
        fake_dns[name_for(address)] = [address]
        names.append(name_for(address))
    mixed = "mixed.ssrf.test"
    fake_dns[mixed] = [PUBLIC_DECOY, "10.0.0.1"]
    service = http_service({**ALLOWED, "http.allowed_media_domains": [
        "127.0.0.1", *names, mixed]})
    for name in [*names, mixed]:
        _redirect_refused(service, images, f"http://{name}:{images.server_address[1]}/ok.jpg")
    assert connect_guard.attempts == []
    assert "/ok.jpg" not in images.paths


def test_redirects_to_other_spellings_of_loopback_are_refused(http_service: Any,
                                                              images: ImageServer) -> None:
    """Hosts that are not IP literals to Python but that the system resolver reads as
    127.0.0.1 (a decimal, a short and a hexadecimal spelling) and the mapped form of the
    image server's own address: none reaches the image server."""
    port = images.server_address[1]
    spellings = ["2130706433", "127.1", "0x7f000001", "[::ffff:127.0.0.1]"]
    service = http_service({**ALLOWED, "http.allowed_media_domains": [
        "127.0.0.1", "2130706433", "127.1", "0x7f000001", "::ffff:127.0.0.1"]})
    for host in spellings:
        err = error_of(service, images.base + "/redirect?to="
                       + quote(f"http://{host}:{port}/ok.jpg", safe=""))
        assert err["status"] == 400 and err["type"] == "unsupported_media", err
    assert "/ok.jpg" not in images.paths  # nothing reached the server through a redirect


def test_a_redirect_to_a_loopback_listener_never_connects(http_service: Any,
                                                          images: ImageServer,
                                                          fake_dns: dict[str, list[str]]
                                                          ) -> None:
    """A real listener on 127.0.0.2 that must not be contacted, named by literal and by an
    allowed DNS name."""
    listener = socket.socket()
    listener.bind(("127.0.0.2", 0))
    listener.listen()
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    fake_dns["loopback.ssrf.test"] = ["127.0.0.2"]
    service = http_service({**ALLOWED, "http.allowed_media_domains": [
        "127.0.0.1", "127.0.0.2", "loopback.ssrf.test"]})
    try:
        for host in ("127.0.0.2", "loopback.ssrf.test"):
            _redirect_refused(service, images, f"http://{host}:{port}/ok.jpg")
        with pytest.raises(TimeoutError):
            listener.accept()  # nobody came
    finally:
        listener.close()
