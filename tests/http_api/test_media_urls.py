"""Image URLs over HTTP: refused before any fetch when the request cannot fit, fetched only
from allowed hosts, with size, time and redirect limits, never redirected to a private
address (the SSRF guards of issue 24). A real HTTP server on loopback serves the images and
counts every connection."""

from __future__ import annotations

import http.server
import time
from collections.abc import Iterator
from typing import Any

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
