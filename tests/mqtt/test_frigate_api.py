"""Issue 21: with ``frigate.url``, a Frigate event is described from the image Frigate's API
gives for it, and the description is written back to the event.

The fake Frigate below implements exactly the routes the daemon calls, with the payloads of
blakeblackshear/frigate (0.18.0, commit e3fa701):

- ``GET /api/events/{event_id}/snapshot.jpg`` (frigate/api/media.py:782, query params
  ``download, timestamp, bbox, crop, height, quality``: MediaEventsSnapshotQueryParams,
  frigate/api/defs/query/media_query_parameters.py:31): ``image/jpeg`` with ``X-Frame-Time``
  (media.py:860); an id neither in the database nor tracked: 404 ``{"success": false,
  "message": "Live frame not available"}`` (media.py:853).
- ``GET /api/events/{event_id}/thumbnail.{extension}`` (media.py:874): 404 ``{"success":
  false, "message": "Event not found"}`` (media.py:915).
- ``POST /api/events/{event_id}/description`` body ``{"description": str | None}``
  (EventsDescriptionBody, frigate/api/defs/request/events_body.py:30; set_description,
  frigate/api/event.py:1514-1570): 200 ``{"success": true, "message": "Event <id> description
  set to <text>"}`` (event.py:1558), unknown id 404 ``{"success": false, "message": "Event
  <id> not found"}`` (event.py:1532).
- ``POST /api/login`` ``{"user", "password"}`` (frigate/api/auth.py:842-890): 200, empty
  body, the JWT in the ``frigate_token`` cookie (frigate/config/auth.py:20), then accepted as
  ``Authorization: Bearer`` (auth.py:691-694); a wrong password: 401 ``{"message": "Login
  failed"}``. Port 8971 authenticates, port 5000 does not
  (docs/docs/configuration/authentication.md:20-21).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from edgevlm.service import Service
from edgevlm.sources.frigate_api import FrigateAPI, FrigateAPIError
from tests.helpers import image_bytes, serving
from tests.mqtt.conftest import MqttTestClient, wait_until
from tests.mqtt.frigate_shapes import frigate_event

ROOT = "edgevlm/node1/camera"
CAMERA = {"frigate": True, "frigate_events": ["end"], "max_tokens": 4}
TOKEN = "eyJhbGciOiJIUzI1NiJ9.test.token"


class FakeFrigate(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.events: dict[str, bytes] = {}          # event id -> its snapshot JPEG
        self.descriptions: dict[str, str | None] = {}
        self.requests: list[tuple[str, str, bytes, dict[str, str]]] = []
        self.users: dict[str, str] | None = None     # set: the authenticated port 8971
        self.slow: set[str] = set()                  # ids answered one byte every 0.2 s
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def seen(self, method: str) -> list[tuple[str, bytes]]:
        with self.lock:
            return [(p, b) for m, p, b, _ in self.requests if m == method]


class Handler(BaseHTTPRequestHandler):
    server: FakeFrigate

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _record(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        with self.server.lock:
            self.server.requests.append((self.command, self.path, body, dict(self.headers)))
        return body

    def _authorised(self) -> bool:
        if self.server.users is None or self.headers.get("Authorization") == f"Bearer {TOKEN}":
            return True
        self._json(401, {"message": "Unauthorized"})
        return False

    def do_GET(self) -> None:
        self._record()
        if not self._authorised():
            return
        path = self.path.split("?")[0]
        parts = path.split("/")  # '', 'api', 'events', id, file
        if len(parts) != 5 or parts[:3] != ["", "api", "events"]:
            self._json(404, {"detail": "Not Found"})
            return
        event_id, name = parts[3], parts[4]
        image = self.server.events.get(event_id)
        if name == "snapshot.jpg":
            if image is None:
                self._json(404, {"success": False, "message": "Live frame not available"})
                return
            self.send_response(200)
            self.send_header("Content-Type", "image/jpeg")
            self.send_header("Cache-Control", "private, max-age=31536000")
            self.send_header("X-Frame-Time", str(time.time()))
            if event_id in self.server.slow:  # trickles, and never says how long
                self.end_headers()
                try:
                    for byte in image:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(0.2)
                except OSError:
                    pass
                return
            self.send_header("Content-Length", str(len(image)))
            self.end_headers()
            self.wfile.write(image)
        elif name.startswith("thumbnail."):
            self._json(404, {"success": False, "message": "Event not found"})
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        body = self._record()
        if self.path == "/api/login":
            creds = json.loads(body)
            users = self.server.users or {}
            if users.get(creds.get("user")) != creds.get("password"):
                self._json(401, {"message": "Login failed"})
                return
            self.send_response(200)
            self.send_header("Set-Cookie", f"frigate_token={TOKEN}; HttpOnly; Path=/; "
                             "Max-Age=86400")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if not self._authorised():
            return
        parts = self.path.split("/")
        if len(parts) != 5 or parts[4] != "description":
            self._json(404, {"detail": "Not Found"})
            return
        event_id = parts[3]
        if event_id not in self.server.events:
            self._json(404, {"success": False, "message": "Event " + event_id + " not found"})
            return
        text = json.loads(body)["description"]
        self.server.descriptions[event_id] = text
        message = (f"Event {event_id} description is now blank" if not text
                   else f"Event {event_id} description set to {text}")
        self._json(200, {"success": True, "message": message})


@pytest.fixture
def frigate() -> Iterator[FakeFrigate]:
    with serving(FakeFrigate()) as server:
        yield server


def api_service(make_service: Callable[..., Service], frigate: FakeFrigate, **extra: Any
                ) -> Service:
    return make_service(cameras={"front_door": CAMERA},
                        frigate={"url": frigate.url, "timeout_s": 2, **extra})


def test_an_end_event_is_described_from_frigates_snapshot_and_written_back(
        make_service: Callable[..., Service], mqtt_client: Callable[..., MqttTestClient],
        frigate: FakeFrigate) -> None:
    frigate.events["1718000000.1-abc"] = image_bytes(96, 64, seed=3)
    service = api_service(make_service, frigate)
    publisher, watcher = mqtt_client(), mqtt_client()
    watcher.sub(f"{ROOT}/+/description")
    # no MQTT snapshot at all: the image comes from the API
    publisher.pub("frigate/events", frigate_event("end", "1718000000.1-abc", best=time.time()))
    (body,) = watcher.inbox.json(f"{ROOT}/front_door/description",
                                 where=lambda b: b.get("id") == "1718000000.1-abc")
    assert body["type"] == "description" and body["text"]
    assert frigate.seen("GET")[0][0] == (
        "/api/events/1718000000.1-abc/snapshot.jpg?bbox=0&timestamp=0&crop=0")
    wait_until(lambda: frigate.seen("POST"), what="the description POSTed back")
    ((path, posted),) = frigate.seen("POST")
    assert path == "/api/events/1718000000.1-abc/description"
    assert json.loads(posted) == {"description": body["text"]}
    assert frigate.descriptions["1718000000.1-abc"] == body["text"]
    assert service.cameras.frigate_api is not None
    api = service.cameras.frigate_api  # the count follows Frigate's answer to the POST
    wait_until(lambda: api.counts() == {"fetched": 1, "fetch_failed": 0, "written": 1,
                                        "write_failed": 0}, what="the write-back counted")


def test_an_unknown_event_falls_back_to_its_mqtt_snapshot_or_is_skipped(
        make_service: Callable[..., Service], mqtt_client: Callable[..., MqttTestClient],
        frigate: FakeFrigate) -> None:
    """404 from Frigate: with the event's MQTT snapshot -> described from it; without ->
    ``skipped`` / ``fetch_failed``. Neither is written back (Frigate does not know them)."""
    service = api_service(make_service, frigate, write_description=False)
    publisher, watcher = mqtt_client(), mqtt_client()
    watcher.sub(f"{ROOT}/+/description")
    publisher.pub("frigate/events", frigate_event("end", "gone", best=time.time()))
    (gone,) = watcher.inbox.json(f"{ROOT}/front_door/description",
                                 where=lambda b: b.get("id") == "gone")
    assert (gone["status"], gone["reason"], gone["text"]) == ("skipped", "fetch_failed", None)
    assert "Live frame not available" in gone["detail"]
    best = time.time()
    publisher.pub("frigate/front_door/person/snapshot", image_bytes(96, 64, seed=4))
    time.sleep(0.3)
    publisher.pub("frigate/events", frigate_event("end", "mqtt-only", best=best))
    (kept,) = watcher.inbox.json(f"{ROOT}/front_door/description",
                                 where=lambda b: b.get("id") == "mqtt-only")
    assert kept["type"] == "description" and kept["text"]
    assert not frigate.seen("POST")
    api = service.cameras.frigate_api
    assert api is not None and api.counts()["fetch_failed"] == 2


def test_a_slow_or_huge_answer_is_cut_off() -> None:
    """Bounded in time (the whole call, not per read) and in bytes, before the body is read
    when Content-Length says so, while reading when it does not."""
    server = FakeFrigate()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        server.events["slow"] = image_bytes(64, 64, seed=5)
        server.slow.add("slow")
        server.events["huge"] = b"\xff\xd8\xff" + bytes(3 * 2**20)
        api = FrigateAPI(server.url, timeout_s=1.0, max_bytes=2**20)
        start = time.monotonic()
        with pytest.raises(FrigateAPIError, match="within 1 s"):
            api.event_image("slow")
        assert time.monotonic() - start < 2.0
        with pytest.raises(FrigateAPIError, match="more than the 1048576 "):
            api.event_image("huge")
        server.slow.add("huge")  # no Content-Length: cut off while reading
        api = FrigateAPI(server.url, timeout_s=10.0, max_bytes=4)
        with pytest.raises(FrigateAPIError, match="more than the 4 bytes"):
            api.event_image("huge")
        assert api.counts()["fetch_failed"] == 1
    finally:
        server.shutdown()
        server.server_close()


def test_the_authenticated_port_logs_in_and_sends_the_token(frigate: FakeFrigate) -> None:
    frigate.users = {"edgevlm": "s3cret"}
    frigate.events["e1"] = image_bytes(32, 32, seed=6)
    api = FrigateAPI(frigate.url, username="edgevlm", password="s3cret", timeout_s=2)
    assert api.event_image("e1") == frigate.events["e1"]
    assert api.set_description("e1", "a person") is True
    assert api.set_description("nope", "x") is False  # 404: logged, counted, not raised
    with frigate.lock:
        sent = [(m, p, h.get("Authorization")) for m, p, _, h in frigate.requests]
    assert sent[0] == ("POST", "/api/login", None)
    assert all(auth == f"Bearer {TOKEN}" for _, _, auth in sent[1:])
    assert sum(1 for _, p, _ in sent if p == "/api/login") == 1
    wrong = FrigateAPI(frigate.url, username="edgevlm", password="bad", timeout_s=2)
    with pytest.raises(FrigateAPIError, match="refused the login"):
        wrong.event_image("e1")
