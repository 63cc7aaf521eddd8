"""The client side of the describe verb: build a request, send it over MQTT, wait for the answer.

Used by ``edgevlm ask`` and ``edgevlm demo``. With MQTT v5 (the default) a request carries a
Response Topic (``<base>/clients/<user or client id>/reply/<token>``: under the daemon's
``mqtt.reply_prefix``, in the tree the broker's ACL lets this client read) and Correlation
Data, and answers are matched by correlation; with MQTT 3.1.1 answers come on
``<base>/<node>/response/describe`` and are matched by the ``transaction`` echoed in the
payload. Streamed partial chunks go to a callback.

A pooled request is sent again when the pool goes silent about it: :class:`PoolRetry`, in
:mod:`edgevlm.ask_retry`.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import mimetypes
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from .ask_retry import Chunk as Chunk  # re-exported: callers import them from here
from .ask_retry import PoolRetry as PoolRetry
from .ask_retry import Resender, Waiter
from .frontdoors.mqtt.topics import Topics

log = logging.getLogger(__name__)

DEFAULT_PORT = 1883


class TLSSettings(Protocol):
    """What the client reads of ``config.TLSConfig``."""

    @property
    def ca(self) -> str | None: ...
    @property
    def cert(self) -> str | None: ...
    @property
    def key(self) -> str | None: ...
    @property
    def insecure(self) -> bool: ...


class BrokerUnavailable(Exception):
    """The broker could not be reached or refused the connection."""


class NoAnswer(Exception):
    """No final answer arrived within the timeout."""


def parse_broker(text: str) -> tuple[str, int]:
    """``host``, ``host:port`` or ``[v6addr]:port`` -> (host, port)."""
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":")
    elif text.count(":") == 1:
        host, port = text.split(":")
    else:
        host, port = text, ""
    if not host:
        raise ValueError(f"{text!r}: no host; write HOST or HOST:PORT")
    try:
        number = int(port) if port else DEFAULT_PORT
    except ValueError:
        raise ValueError(f"{text!r}: the port must be a number") from None
    if not 1 <= number <= 65535:
        raise ValueError(f"{text!r}: the port must be 1..65535")
    return host, number


def default_broker(env: Mapping[str, str] = os.environ) -> tuple[str, int]:
    """The broker of ``EDGEVLM_MQTT__HOST``/``EDGEVLM_MQTT__PORT``, else localhost:1883."""
    host = env.get("EDGEVLM_MQTT__HOST") or "localhost"
    return host, int(env.get("EDGEVLM_MQTT__PORT") or DEFAULT_PORT)


def image_part(data: bytes, mime: str | None = None) -> dict[str, Any]:
    source: dict[str, Any] = {"b64": base64.b64encode(data).decode()}
    if mime:
        source["mime"] = mime
    return {"type": "image", "image": source}


def image_file_part(path: str | Path) -> dict[str, Any]:
    mime = mimetypes.guess_type(str(path))[0]
    return image_part(Path(path).read_bytes(), mime)


def vision_tokens_part(path: str | Path) -> dict[str, Any]:
    """A ``vision_tokens`` part from a file written by ``edgevlm encode`` (the payload object,
    or a whole part)."""
    obj = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: not a JSON object")
    if obj.get("type") == "vision_tokens":
        return obj
    if "tokens_b64" not in obj or "grid" not in obj:
        raise ValueError(f"{path}: not a vision_tokens payload (no grid / tokens_b64); make "
                         "one with `edgevlm encode`")
    return {"type": "vision_tokens", "vision_tokens": obj}


def describe_request(prompt: str, parts: Sequence[dict[str, Any]] = (), *,
                     request_id: str | None = None, max_tokens: int | None = None,
                     stream: bool = False, **fields: Any) -> dict[str, Any]:
    """A describe request: the media parts in order, then the prompt, in one user message."""
    body: dict[str, Any] = {"v": 1, "id": request_id or uuid.uuid4().hex[:16], "messages": [
        {"role": "user", "content": [*parts, {"type": "text", "text": prompt}]}]}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if stream:
        body["stream"] = True
    body.update(fields)
    return body


class DescribeClient:
    """One MQTT connection that sends describe requests and waits for their answers."""

    def __init__(self, host: str, port: int = DEFAULT_PORT, *, base_topic: str = "edgevlm",
                 protocol: str = "5", username: str | None = None,
                 password: str | None = None, tls: TLSSettings | None = None,
                 client_id: str | None = None, reply_prefix: str | None = None) -> None:
        self.host, self.port, self.base = host, port, base_topic
        self.v5 = protocol != "3.1.1"
        self.token = uuid.uuid4().hex[:12]
        self.client_id = client_id or f"edgevlm-ask-{self.token}"
        # replies go to this client's own tree: its user's (an ACL such as
        # `pattern read edgevlm/clients/%u/#`), else its client id's
        self.reply_prefix = reply_prefix or f"{base_topic}/clients/"
        self.owner = username if username and _topic_level(username) else self.client_id
        self._client = paho.Client(CallbackAPIVersion.VERSION2, client_id=self.client_id,
                                   protocol=paho.MQTTv5 if self.v5 else paho.MQTTv311)
        if username is not None:
            self._client.username_pw_set(username, password)
        if tls is not None:
            self._client.tls_set(ca_certs=tls.ca, certfile=tls.cert, keyfile=tls.key)
            self._client.tls_insecure_set(tls.insecure)
        self._client.on_socket_open = _nodelay
        self._client.on_message = self._on_message
        self._lock = threading.Lock()
        self._waiters: dict[str, Waiter] = {}       # by request id (= correlation data)
        self._subscribed: set[str] = set()
        self._connected = threading.Event()
        self._refused: str | None = None
        self._retained_states: dict[str, str] = {}
        self._watches: dict[str, Callable[[paho.MQTTMessage], None]] = {}
        self._resender = Resender(base_topic, self._lock, self._waiters, self._publish)

    # ------------------------------------------------------------------ connection

    def set_max_inflight(self, count: int) -> None:
        """QoS 1 messages in flight at once (paho's default 20; 0: no limit)."""
        self._client.max_inflight_messages_set(count)

    def connect(self, timeout: float = 10.0) -> None:
        def on_connect(client: Any, userdata: Any, flags: Any, reason: Any,
                       props: Any = None) -> None:
            if getattr(reason, "is_failure", False):
                self._refused = str(reason)
            self._connected.set()

        self._client.on_connect = on_connect
        try:
            self._client.connect(self.host, self.port, keepalive=30)
        except (OSError, ValueError) as exc:
            raise BrokerUnavailable(f"cannot reach the broker at {self.host}:{self.port}: "
                                    f"{exc}") from None
        self._client.loop_start()
        if not self._connected.wait(timeout) or self._refused:
            self.close()
            raise BrokerUnavailable(f"the broker at {self.host}:{self.port} did not accept "
                                    f"the connection: {self._refused or 'no answer'}")

    def close(self) -> None:
        self._resender.stop()
        try:
            self._client.disconnect()
        finally:
            self._client.loop_stop()

    def __enter__(self) -> DescribeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _subscribe(self, topic: str, timeout: float) -> None:
        if topic in self._subscribed:
            return
        done = threading.Event()
        self._client.on_subscribe = lambda *args: done.set()
        self._client.subscribe(topic, qos=1)
        if not done.wait(timeout):
            raise NoAnswer(f"the broker did not confirm the subscription to {topic}")
        self._subscribed.add(topic)

    def watch(self, topic: str, callback: Callable[[paho.MQTTMessage], None],
              timeout: float = 10.0) -> None:
        """Subscribe to ``topic`` (no wildcards) and call ``callback`` with each message."""
        with self._lock:
            self._watches[topic] = callback
        self._subscribe(topic, timeout)

    def publish(self, topic: str, payload: bytes, retain: bool = False) -> None:
        """Publish raw bytes at QoS 1 (e.g. a frame on a camera topic)."""
        self._client.publish(topic, payload, qos=1, retain=retain)

    # ------------------------------------------------------------------ discovery

    def online_nodes(self, wait_s: float = 1.5) -> list[str]:
        """Nodes whose retained ``bridge/state`` is ``online``."""
        self._subscribe(f"{self.base}/+/bridge/state", wait_s + 5)
        time.sleep(wait_s)
        with self._lock:
            return sorted(n for n, s in self._retained_states.items() if s == "online")

    # ------------------------------------------------------------------ requests

    def reply_topic(self) -> str:
        """This client's Response Topic: ``<reply prefix><user or client id>/reply/<token>``."""
        return f"{self.reply_prefix}{self.owner}/reply/{self.token}"

    def send(self, request: dict[str, Any], node: str | None,
             on_chunk: Chunk | None = None, subscribe_timeout: float = 10.0,
             properties: Properties | None = None, retry: PoolRetry | None = None
             ) -> Waiter:
        """Publish ``request`` to ``node`` (None: the shared pool); returns its waiter. With
        ``retry`` the request asks for ``working`` messages and is published again by the
        rule of :class:`PoolRetry` until :meth:`wait` returns."""
        if retry is not None:
            request = {**request, "progress_s": request.get("progress_s", retry.progress_s)}
        topics = Topics(self.base, node or "pool")
        topic = topics.request("describe") if node else topics.pool_request("describe")
        request_id = str(request["id"])
        waiter = Waiter(request_id, on_chunk, retry=retry, topic=topic,
                        payload=json.dumps(request).encode(), pooled=node is None)
        props = properties
        if self.v5:
            self._subscribe(self.reply_topic(), subscribe_timeout)
            props = props or Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
            props.ResponseTopic = self.reply_topic()
            props.CorrelationData = request_id.encode()
        else:
            if node is None:
                raise ValueError("MQTT 3.1.1 cannot use the pool: there is no response topic")
            self._subscribe(topics.response("describe"), subscribe_timeout)
        waiter.properties = props
        with self._lock:
            self._waiters[request_id] = waiter
        self._publish(waiter)
        if retry is not None:
            self._resender.start()
        return waiter

    def _publish(self, waiter: Waiter, topic: str | None = None) -> None:
        with self._lock:
            waiter.attempts += 1
            waiter.published_at = time.monotonic()
            waiter.heard_at = waiter.again_at = None
        info = self._client.publish(topic or waiter.topic, waiter.payload, qos=1,
                                    properties=waiter.properties)
        if info.rc not in (paho.MQTT_ERR_SUCCESS, paho.MQTT_ERR_NO_CONN):  # paho resends
            raise BrokerUnavailable(f"publish failed: {paho.error_string(info.rc)}")

    def wait(self, waiter: Waiter, timeout: float) -> dict[str, Any]:
        try:
            if not waiter.done.wait(timeout) or waiter.answer is None:
                if waiter.busy is not None:
                    return waiter.busy
                raise NoAnswer(f"no answer to {waiter.request_id} within {timeout:g} s")
            return waiter.answer
        finally:
            with self._lock:
                self._waiters.pop(waiter.request_id, None)

    def ask(self, request: dict[str, Any], node: str | None, timeout: float = 60.0,
            on_chunk: Chunk | None = None, retry: PoolRetry | None = None) -> dict[str, Any]:
        """Send ``request`` and return the final answer (``status`` ok or error)."""
        deadline = time.monotonic() + timeout
        waiter = self.send(request, node, on_chunk, subscribe_timeout=timeout, retry=retry)
        return self.wait(waiter, max(deadline - time.monotonic(), 0.0))

    def _on_message(self, client: Any, userdata: Any, msg: paho.MQTTMessage) -> None:
        try:
            self._route(msg)
        except Exception:  # a paho callback must never raise
            log.exception("could not handle a message on %s", msg.topic)

    def _route(self, msg: paho.MQTTMessage) -> None:
        now = time.monotonic()
        with self._lock:
            watch = self._watches.get(msg.topic)
        if watch is not None:
            watch(msg)
            return
        if msg.topic.endswith("/bridge/state"):
            node = msg.topic.split("/")[-3]
            with self._lock:
                self._retained_states[node] = msg.payload.decode("utf-8", "replace")
            return
        try:
            body = json.loads(msg.payload)
        except ValueError:
            log.warning("non-JSON answer on %s ignored", msg.topic)
            return
        if not isinstance(body, dict):
            return
        correlation = getattr(msg.properties, "CorrelationData", None) if msg.properties else None
        key = correlation.decode("utf-8", "replace") if isinstance(correlation, bytes) else None
        with self._lock:
            waiter = self._waiters.get(key or "") or self._waiters.get(
                str(body.get("transaction") or body.get("id") or ""))
        if waiter is None:
            return
        status = body.get("status")
        with self._lock:
            waiter.heard_at = now
            board = body.get("node")
            if status == "working" and isinstance(board, str) and _topic_level(board):
                waiter.node = board
                self._resender.heard_working(board, now)
            if (status == "error" and waiter.retry is not None
                    and (body.get("error") or {}).get("type") == "busy"):
                waiter.busy = body
                waiter.again_at = now + waiter.retry.busy_pause_s
                return
        if status == "working":
            return
        if status == "partial":
            if waiter.on_chunk is not None:
                waiter.on_chunk(body)
            return
        with self._lock:
            if waiter.done.is_set():  # a later copy (a retry answered twice): the first counts
                return
            waiter.answer, waiter.received_at = body, now
            waiter.done.set()


def _topic_level(name: str) -> bool:
    """Whether ``name`` can be one topic level (no separators or wildcards)."""
    return not any(c in name for c in "/+#\0")


def _nodelay(client: Any, userdata: Any, sock: Any) -> None:
    with contextlib.suppress(OSError, AttributeError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def metrics_line(answer: Mapping[str, Any]) -> str:
    """``[stop] qwen3vl-demo · 12 tokens · ttft 20 ms · total 35 ms`` for an ok answer."""
    data = answer.get("data") or {}
    metrics = data.get("metrics") or {}
    usage = data.get("usage") or {}
    parts = [f"[{data.get('finish_reason', '?')}] {data.get('model', '?')}",
             f"{usage.get('completion_tokens', '?')} tokens"]
    for key, label in (("ttft_ms", "ttft"), ("total_ms", "total"), ("queue_ms", "queue")):
        if key in metrics:
            parts.append(f"{label} {metrics[key]:.0f} ms")
    cache = data.get("cache") or []
    if cache:
        parts.append("cache " + ",".join("hit" if c.get("hit") else "miss" for c in cache))
    return " · ".join(parts)
