"""Frigate's HTTP API (opt-in ``frigate.url``): an event's own image, and its description back.

The routes (blakeblackshear/frigate, Frigate 0.14-0.18):

- ``GET /api/events/<id>/snapshot.jpg`` (``frigate/api/media.py``, ``event_snapshot``): the
  event's snapshot; query ``bbox``, ``timestamp``, ``crop``, ``height``, ``quality``
  (``MediaEventsSnapshotQueryParams``); an unknown id: 404 ``{"success": false, "message":
  ...}``. Asked with ``bbox=0&timestamp=0&crop=0``: the frame as the camera saw it.
- ``GET /api/events/<id>/thumbnail.jpg`` (``event_thumbnail``): the small best-object crop.
- ``POST /api/events/<id>/description`` ``{"description": text}`` (``frigate/api/event.py``,
  ``set_description``, admin role): 200 ``{"success": true, "message": ...}``; 404 for an
  unknown id. Frigate's UI, search and its Home Assistant integration then show it.
- Auth: port 5000 is unauthenticated (meant for the Docker network); port 8971 wants a JWT:
  ``POST /api/login`` ``{"user", "password"}`` sets the ``frigate_token`` cookie
  (``frigate/api/auth.py``, ``login``), sent back here as ``Authorization: Bearer``.

Every call is bounded: ``timeout_s`` for the whole call (connect to last byte, so a server
that trickles bytes is cut off too) and ``max_bytes`` for an image. Calls run on a small
thread of their own (:class:`FetchThread`), never on the MQTT network thread or the worker.
"""

from __future__ import annotations

import http.client
import json
import logging
import queue
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import quote, urlsplit

from ..config import FrigateConfig

log = logging.getLogger(__name__)

TOKEN_COOKIE = "frigate_token"  # Frigate's auth.cookie_name default (frigate/config/auth.py)
CHUNK = 64 * 1024
JSON_REPLY_BYTES = 64 * 1024


class FrigateAPIError(Exception):
    """An API call failed; ``status`` is the HTTP status (0: no answer)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class FrigateAPI:
    url: str
    username: str | None = None
    password: str | None = None
    tls_verify: bool = True
    ca: str | None = None
    timeout_s: float = 5.0
    fetch: str = "snapshot"
    write_description: bool = True
    max_bytes: int = 8 * 2**20
    fetched: int = 0
    fetch_failed: int = 0
    written: int = 0
    write_failed: int = 0
    _token: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def from_config(cls, cfg: FrigateConfig, max_bytes: int) -> FrigateAPI:
        assert cfg.url is not None
        return cls(cfg.url, cfg.username, cfg.password, cfg.tls_verify, cfg.ca, cfg.timeout_s,
                   cfg.fetch, cfg.write_description, max_bytes)

    # ------------------------------------------------------------------ HTTP

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        parts = urlsplit(self.url)
        if parts.scheme == "https":
            context = ssl.create_default_context(cafile=self.ca)
            if not self.tls_verify:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            return http.client.HTTPSConnection(parts.hostname or "", parts.port,
                                               timeout=timeout, context=context)
        return http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)

    def _path(self, path: str) -> str:
        return urlsplit(self.url).path.rstrip("/") + path

    def request(self, method: str, path: str, body: dict[str, Any] | None = None,
                limit: int = JSON_REPLY_BYTES, auth: bool = True
                ) -> tuple[int, dict[str, str], bytes]:
        """(status, headers, body) of one call, bounded by ``timeout_s`` and ``limit`` bytes;
        logs in first (once, and again after a 401) when a username is configured."""
        if auth and self.username and self._token is None:
            self._login()
        status, headers, data = self._once(method, path, body, limit, auth)
        if status == 401 and auth and self.username:
            self._login()
            status, headers, data = self._once(method, path, body, limit, auth)
        return status, headers, data

    def _once(self, method: str, path: str, body: dict[str, Any] | None, limit: int,
              auth: bool) -> tuple[int, dict[str, str], bytes]:
        deadline = time.monotonic() + self.timeout_s
        conn = self._connection(self.timeout_s)
        headers = {"Accept": "*/*", "User-Agent": "edgevlm"}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if auth and self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        try:
            conn.request(method, self._path(path), body=payload, headers=headers)
            resp = conn.getresponse()
            declared = resp.getheader("Content-Length")
            if declared is not None and declared.isdigit() and int(declared) > limit:
                raise FrigateAPIError(f"{method} {path}: {declared} bytes, more than the "
                                      f"{limit} allowed", resp.status)
            chunks: list[bytes] = []
            size = 0
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise FrigateAPIError(f"{method} {path}: no whole answer within "
                                          f"{self.timeout_s:g} s")
                if conn.sock is not None:
                    conn.sock.settimeout(left)
                chunk = resp.read1(CHUNK) if hasattr(resp, "read1") else resp.read(CHUNK)
                if not chunk:
                    break
                size += len(chunk)
                if size > limit:
                    raise FrigateAPIError(f"{method} {path}: more than the {limit} bytes "
                                          "allowed", resp.status)
                chunks.append(chunk)
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, b"".join(chunks)
        except FrigateAPIError:
            raise
        except (OSError, http.client.HTTPException) as exc:
            raise FrigateAPIError(f"{method} {path}: {type(exc).__name__}: {exc}") from None
        finally:
            conn.close()

    def _login(self) -> None:
        status, headers, _ = self._once("POST", "/api/login", {
            "user": self.username, "password": self.password or ""}, JSON_REPLY_BYTES, False)
        cookie = SimpleCookie()
        cookie.load(headers.get("set-cookie", ""))
        morsel = cookie.get(TOKEN_COOKIE)
        if status != 200 or morsel is None:
            raise FrigateAPIError(f"Frigate refused the login of {self.username!r} "
                                  f"(HTTP {status})", status)
        self._token = morsel.value

    @staticmethod
    def _message(data: bytes) -> str:
        try:
            return str(json.loads(data).get("message", ""))[:200]
        except (ValueError, AttributeError):
            return data[:80].decode("utf-8", "replace")

    # ------------------------------------------------------------------ calls

    def event_image(self, event_id: str) -> bytes:
        """The event's snapshot (or thumbnail) as JPEG bytes; FrigateAPIError if none."""
        quoted = quote(event_id, safe="")
        path = (f"/api/events/{quoted}/snapshot.jpg?bbox=0&timestamp=0&crop=0"
                if self.fetch == "snapshot" else f"/api/events/{quoted}/thumbnail.jpg")
        try:
            status, _, data = self.request("GET", path, limit=self.max_bytes)
            if status != 200:
                raise FrigateAPIError(f"GET {path}: HTTP {status} {self._message(data)}",
                                      status)
            if not data.startswith(b"\xff\xd8\xff"):
                raise FrigateAPIError(f"GET {path}: the answer is not a JPEG", status)
        except FrigateAPIError:
            with self._lock:
                self.fetch_failed += 1
            raise
        with self._lock:
            self.fetched += 1
        return data

    def set_description(self, event_id: str, text: str) -> bool:
        """POST the description; False (logged, counted) when Frigate did not take it."""
        path = f"/api/events/{quote(event_id, safe='')}/description"
        try:
            status, _, data = self.request("POST", path, {"description": text})
            if status != 200:
                raise FrigateAPIError(f"HTTP {status} {self._message(data)}", status)
        except FrigateAPIError as exc:
            with self._lock:
                self.write_failed += 1
            log.warning("frigate event %s: description not written back (%s)", event_id, exc)
            return False
        with self._lock:
            self.written += 1
        return True

    def counts(self) -> dict[str, int]:
        with self._lock:
            return {"fetched": self.fetched, "fetch_failed": self.fetch_failed,
                    "written": self.written, "write_failed": self.write_failed}


class FetchThread:
    """One daemon thread running API calls in order, with a bounded queue: the MQTT network
    thread and the worker only hand calls over. ``submit`` is False when the queue is full."""

    def __init__(self, size: int = 32) -> None:
        self._queue: queue.Queue[Callable[[], object] | None] = queue.Queue(size)
        self._thread = threading.Thread(target=self._run, name="frigate-api", daemon=True)
        self._thread.start()

    def submit(self, call: Callable[[], object]) -> bool:
        try:
            self._queue.put_nowait(call)
            return True
        except queue.Full:
            return False

    def stop(self, timeout: float = 2.0) -> None:
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            return
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            call = self._queue.get()
            if call is None:
                return
            try:
                call()
            except Exception:
                log.exception("a Frigate API call failed")
