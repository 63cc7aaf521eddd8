"""A small MQTT broker in pure Python, for ``edgevlm demo`` on machines without Mosquitto.

MQTT 3.1.1 and 5.0 on one listener: CONNECT/CONNACK, SUBSCRIBE with ``+``/``#`` and
``$share/<group>/<filter>`` (each message to one member of the group), UNSUBSCRIBE, PUBLISH
QoS 0 and 1 (QoS 2 is accepted and delivered at QoS 1), retained messages, will messages
(with the v5 will delay), keep-alive, PINGREQ, DISCONNECT. v5 publish properties (Response
Topic, Correlation Data, Message Expiry, user properties, ...) are forwarded; CONNACK announces
the Maximum Packet Size. Sessions are never persisted (always ``session present = 0``).

It runs its asyncio loop in a background thread::

    broker = EmbeddedBroker(host="127.0.0.1", port=0)
    port = broker.start()
    ...
    broker.stop()

Not for production: no authentication, no TLS, no persistence, no flow control.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time
from dataclasses import dataclass, field

from . import embedded_codec as c

log = logging.getLogger(__name__)

DEFAULT_MAX_PACKET = 64 * 2**20
SHUTDOWN_GRACE_S = 2.0  # for the connections to end by themselves once their sockets closed
_STRIPPED = {c.TOPIC_ALIAS, c.SUBSCRIPTION_ID, c.MESSAGE_EXPIRY}


@dataclass
class _Message:
    topic: str
    payload: bytes
    qos: int
    retain: bool
    props: c.Properties
    expires: float | None  # monotonic time, v5 Message Expiry

    @classmethod
    def of(cls, pub: c.Publish | c.Will) -> _Message:
        expiry = c.get_property(pub.props, c.MESSAGE_EXPIRY)
        props = [(k, v) for k, v in pub.props if k not in _STRIPPED]
        expires = time.monotonic() + expiry if isinstance(expiry, int) else None
        return cls(pub.topic, pub.payload, min(pub.qos, 1), pub.retain, props, expires)


@dataclass
class _Session:
    client_id: str
    version: int
    writer: asyncio.StreamWriter
    max_packet: int
    will: c.Will | None
    subs: dict[str, int] = field(default_factory=dict)   # filter -> options byte
    ids: itertools.cycle[int] = field(default_factory=lambda: itertools.cycle(range(1, 65536)))
    closed: bool = False

    def send(self, data: bytes) -> None:
        if not self.closed and not self.writer.is_closing():
            self.writer.write(data)

    def deliver(self, msg: _Message, qos: int, retain: bool) -> None:
        props = list(msg.props)
        if msg.expires is not None:
            left = int(msg.expires - time.monotonic())
            if left <= 0:
                return
            props.append((c.MESSAGE_EXPIRY, left))
        qos = min(qos, msg.qos)
        out = c.Publish(msg.topic, msg.payload, qos, retain, next(self.ids) if qos else 0, props)
        data = c.encode_publish(out, self.version)
        if len(data) > self.max_packet:
            log.warning("embedded broker: %d-byte message on %s is over %s's maximum packet "
                        "size; not delivered", len(data), msg.topic, self.client_id)
            return
        self.send(data)


def _split_share(pattern: str) -> tuple[str | None, str]:
    if pattern.startswith("$share/"):
        parts = pattern.split("/", 2)
        if len(parts) == 3 and parts[1] and not set(parts[1]) & {"+", "#"}:
            return parts[1], parts[2]
    return None, pattern


class EmbeddedBroker:
    """An in-process MQTT broker on ``host:port`` (port 0: a free one) in its own thread."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0,
                 max_packet_size: int = DEFAULT_MAX_PACKET) -> None:
        self.host = host
        self.port = port
        self.max_packet_size = max_packet_size
        self._sessions: dict[str, _Session] = {}
        self._retained: dict[str, _Message] = {}
        self._share_turn: dict[tuple[str, str], int] = {}
        self._wills: dict[str, asyncio.TimerHandle] = {}
        self._ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        self._stop_requested: asyncio.Event | None = None
        self._closing = False  # shutting down: connections end without firing their wills
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 10.0) -> int:
        """Start listening; returns the port."""
        self._thread = threading.Thread(target=self._run, name="edgevlm-embedded-broker",
                                        daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout) or self._error is not None:
            raise RuntimeError(f"embedded broker did not start: {self._error}")
        return self.port

    def stop(self, timeout: float = 10.0) -> None:
        """Close every connection, then the listener and the loop; idempotent."""
        loop, thread, stop = self._loop, self._thread, self._stop_requested
        if loop is None or thread is None:
            return
        if stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has ended already
                loop.call_soon_threadsafe(stop.set)
        thread.join(timeout)
        self._loop = self._thread = None

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        try:
            # A plain callback, not a coroutine: asyncio 3.11 would wrap a coroutine in a task
            # whose done-callback raises (and logs "Exception in callback ...") when the task
            # ends cancelled; our own tasks end by themselves at shutdown (_shutdown).
            self._server = loop.run_until_complete(asyncio.start_server(
                self._accept, self.host, self.port, limit=2**20))
            self.port = int(self._server.sockets[0].getsockname()[1])
        except OSError as exc:
            self._error = exc
            self._ready.set()
            loop.close()
            return
        self._stop_requested = asyncio.Event()
        self._ready.set()
        log.info("embedded MQTT broker listening on %s:%d", self.host, self.port)
        try:
            loop.run_until_complete(self._serve_until_stopped(self._stop_requested))
        except Exception:
            log.exception("embedded broker: shutdown failed")
        finally:
            loop.close()

    async def _serve_until_stopped(self, stop: asyncio.Event) -> None:
        await stop.wait()
        await self._shutdown()

    async def _shutdown(self) -> None:
        """Stop listening, close every connection and wait until each has ended.

        Each connection ends through its own exit path (its socket closed: end of stream),
        so no task is cancelled in the middle of a read and no transport outlives the loop;
        one that does not end within ``SHUTDOWN_GRACE_S`` (a peer that stopped reading) is
        aborted and cancelled."""
        self._closing = True
        if self._server is not None:
            self._server.close()
        for handle in self._wills.values():
            handle.cancel()
        self._wills.clear()
        for writer in list(self._connections.values()):
            writer.close()
        if self._connections:
            _, pending = await asyncio.wait(list(self._connections), timeout=SHUTDOWN_GRACE_S)
            for task in pending:
                stuck = self._connections.get(task)
                if stuck is not None:
                    stuck.transport.abort()
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=SHUTDOWN_GRACE_S)
        if self._server is not None:
            await self._server.wait_closed()

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A new connection (loop thread): served by a task of our own, until it ends."""
        if self._closing:
            writer.close()
            return
        task = asyncio.get_running_loop().create_task(self._serve(reader, writer))
        self._connections[task] = writer
        task.add_done_callback(self._connection_ended)

    def _connection_ended(self, task: asyncio.Task[None]) -> None:
        self._connections.pop(task, None)
        if not task.cancelled() and task.exception() is not None:  # _serve catches all
            log.error("embedded broker: connection task failed", exc_info=task.exception())

    # ------------------------------------------------------------------ one connection

    async def _read_packet(self, reader: asyncio.StreamReader, limit: int
                           ) -> tuple[int, int, bytes]:
        first = (await reader.readexactly(1))[0]
        length, shift = 0, 0
        for _ in range(4):
            byte = (await reader.readexactly(1))[0]
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        else:
            raise c.ProtocolError("remaining length longer than 4 bytes")
        if length + 5 > limit:
            raise c.ProtocolError(f"packet of {length} bytes is over the maximum packet size")
        return first >> 4, first & 0x0F, await reader.readexactly(length)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        session: _Session | None = None
        clean_exit = False
        try:
            kind, _, body = await asyncio.wait_for(
                self._read_packet(reader, self.max_packet_size), 10)
            if kind != c.CONNECT:
                raise c.ProtocolError("first packet is not CONNECT")
            connect = c.parse_connect(body)
            session = self._open(connect, writer)
            timeout = connect.keepalive * 1.5 if connect.keepalive else None
            while True:
                kind, flags, body = await asyncio.wait_for(
                    self._read_packet(reader, self.max_packet_size), timeout)
                if kind == c.DISCONNECT:
                    reason = body[0] if body else 0
                    clean_exit = reason != 0x04  # 0x04: disconnect with will message
                    break
                self._dispatch(session, kind, flags, body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
            pass
        except c.ProtocolError as exc:
            log.info("embedded broker: closing %s: %s",
                     session.client_id if session else "a client", exc)
            if session is not None and session.version == 5:  # DISCONNECT, malformed/too large
                reason = 0x95 if "maximum packet size" in str(exc) else 0x81
                session.send(c.packet(c.DISCONNECT, bytes([reason, 0])))
        except Exception:
            log.exception("embedded broker: connection failed")
        finally:
            if session is not None:
                self._close(session, clean_exit)
            writer.close()
            with contextlib.suppress(Exception):  # the socket really closed before we end
                await writer.wait_closed()

    def _open(self, connect: c.Connect, writer: asyncio.StreamWriter) -> _Session:
        v5 = connect.version == 5
        props: c.Properties = [(c.MAXIMUM_PACKET_SIZE, self.max_packet_size),
                               (c.RETAIN_AVAILABLE, 1), (c.WILDCARD_AVAILABLE, 1),
                               (c.SHARED_AVAILABLE, 1), (c.TOPIC_ALIAS_MAXIMUM, 0)]
        client_id = connect.client_id
        if not client_id:
            client_id = f"edgevlm-auto-{next(self._ids)}"
            props.append((c.ASSIGNED_CLIENT_ID, client_id))
        old = self._sessions.pop(client_id, None)
        if old is not None:  # session takeover: the old connection goes, its will fires
            self._close(old, clean=False)
            old.writer.close()
        pending_will = self._wills.pop(client_id, None)
        if pending_will is not None:
            pending_will.cancel()
        max_packet = c.get_property(connect.props, c.MAXIMUM_PACKET_SIZE)
        session = _Session(client_id, connect.version, writer,
                           max_packet if isinstance(max_packet, int) else 2**28, connect.will)
        self._sessions[client_id] = session
        body = b"\x00\x00" + (c.encode_properties(props) if v5 else b"")
        session.send(c.packet(c.CONNACK, body))
        return session

    def _close(self, session: _Session, clean: bool) -> None:
        if session.closed:
            return
        session.closed = True
        if self._sessions.get(session.client_id) is session:
            del self._sessions[session.client_id]
        will = session.will
        if clean or will is None or self._closing:  # the broker's own shutdown: no wills
            return
        delay = c.get_property(will.props, c.WILL_DELAY)
        if isinstance(delay, int) and delay > 0 and self._loop is not None:
            self._wills[session.client_id] = self._loop.call_later(
                delay, self._fire_will, session.client_id, will)
        else:
            self._fire_will(session.client_id, will)

    def _fire_will(self, client_id: str, will: c.Will) -> None:
        self._wills.pop(client_id, None)
        props = [(k, v) for k, v in will.props if k != c.WILL_DELAY]
        self._publish(c.Publish(will.topic, will.payload, will.qos, will.retain, 0, props),
                      sender=None)

    # ------------------------------------------------------------------ packets

    def _dispatch(self, session: _Session, kind: int, flags: int, body: bytes) -> None:
        if kind == c.PUBLISH:
            pub = c.parse_publish(flags, body, session.version)
            if not pub.topic or "+" in pub.topic or "#" in pub.topic:
                raise c.ProtocolError(f"cannot publish to {pub.topic!r}")
            if pub.qos == 1:
                session.send(c.ack(c.PUBACK, pub.packet_id, session.version))
            elif pub.qos == 2:
                session.send(c.ack(c.PUBREC, pub.packet_id, session.version))
            self._publish(pub, sender=session)
        elif kind == c.PUBREL:
            session.send(c.ack(c.PUBCOMP, c.Reader(body).u16(), session.version))
        elif kind == c.SUBSCRIBE:
            self._subscribe(session, body)
        elif kind == c.UNSUBSCRIBE:
            packet_id, topics = c.parse_unsubscribe(body, session.version)
            reasons = bytes(0 if session.subs.pop(t, None) is not None else 0x11 for t in topics)
            session.send(c.ack(c.UNSUBACK, packet_id, session.version,
                               reasons if session.version == 5 else b""))
        elif kind == c.PINGREQ:
            session.send(c.packet(c.PINGRESP, b""))
        elif kind in (c.PUBACK, c.PUBREC, c.PUBCOMP):
            if kind == c.PUBREC:  # we never send QoS 2, but answer politely
                session.send(c.ack(c.PUBREL, c.Reader(body).u16(), session.version))
        else:
            raise c.ProtocolError(f"unexpected packet type {kind}")

    def _subscribe(self, session: _Session, body: bytes) -> None:
        packet_id, topics = c.parse_subscribe(body, session.version)
        granted = bytearray()
        for pattern, options in topics:
            group, real = _split_share(pattern)
            if not c.valid_filter(real) or (pattern.startswith("$share/") and group is None):
                granted.append(0x8F if session.version == 5 else 0x80)
                continue
            session.subs[pattern] = options
            granted.append(min(options & 3, 1))
        session.send(c.ack(c.SUBACK, packet_id, session.version, bytes(granted)))
        for pattern, options in topics:
            group, real = _split_share(pattern)
            retain_handling = (options >> 4) & 3
            if group is not None or pattern not in session.subs or retain_handling == 2:
                continue
            for msg in list(self._retained.values()):
                if c.topic_matches(real, msg.topic):
                    session.deliver(msg, options & 3, retain=True)

    def _publish(self, pub: c.Publish, sender: _Session | None) -> None:
        msg = _Message.of(pub)
        if pub.retain:
            if pub.payload:
                self._retained[pub.topic] = msg
            else:
                self._retained.pop(pub.topic, None)
        targets: dict[str, tuple[_Session, int, bool]] = {}
        shares: dict[tuple[str, str], list[tuple[_Session, int]]] = {}
        for session in list(self._sessions.values()):
            for pattern, options in session.subs.items():
                group, real = _split_share(pattern)
                if not c.topic_matches(real, pub.topic):
                    continue
                if group is not None:
                    shares.setdefault((group, real), []).append((session, options & 3))
                    continue
                if options & 0x04 and session is sender:  # v5 No Local
                    continue
                keep_retain = bool(options & 0x08) and pub.retain
                qos = max(options & 3, targets.get(session.client_id, (session, 0, False))[1])
                targets[session.client_id] = (session, qos, keep_retain)
        for key, members in shares.items():
            members.sort(key=lambda m: m[0].client_id)
            turn = self._share_turn.get(key, -1) + 1
            self._share_turn[key] = turn
            session, qos = members[turn % len(members)]
            if session.client_id not in targets:
                targets[session.client_id] = (session, qos, False)
        for session, qos, keep_retain in targets.values():
            session.deliver(msg, qos, keep_retain)
