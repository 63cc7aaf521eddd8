"""A TCP proxy that can cut the network like a pulled cable (issue 22).

``Proxy(target_host, target_port)`` listens on 127.0.0.1 (a free port, ``proxy.port``) and
forwards every connection to the target, both ways. ``cut()`` is a network partition: from
then on every existing connection is black-holed (the bytes either end sends are read and
discarded, nothing is delivered and nothing is closed: neither end learns anything until its
own keepalive gives up) and new connections are accepted and black-holed too (never
forwarded to the target). ``heal()`` makes new connections forward again; the black-holed
ones stay dead until an end closes its socket (the proxy then closes only that end: the
other one hears nothing, as with a real partition). ``close()`` closes everything and
stops the thread.

One thread, non-blocking sockets and a selector; a socketpair wakes it for ``cut``/``heal``/
``close``. No exception leaves the thread: a socket error ends that connection only, and an
unexpected one is recorded in ``errors``.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from dataclasses import dataclass, field

CHUNK = 65536


@dataclass(eq=False)
class _End:
    """One side of a proxied connection; ``peer`` is the other side (None: black-holed from
    the start, never connected to the target)."""

    sock: socket.socket
    name: str
    peer: _End | None = None
    out: bytearray = field(default_factory=bytearray)  # bytes waiting to be written to sock
    closed: bool = False


class Proxy:
    def __init__(self, target_host: str, target_port: int, host: str = "127.0.0.1",
                 connect_timeout: float = 5.0) -> None:
        self.target = (target_host, target_port)
        self.connect_timeout = connect_timeout
        self._listener = socket.create_server((host, 0))
        self._listener.setblocking(False)
        self.host, self.port = self._listener.getsockname()[:2]
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._listener, selectors.EVENT_READ, "accept")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._ends: set[_End] = set()
        self._lock = threading.Lock()
        self._cut = False
        self._stop = False
        self.accepted = 0           # connections accepted, forwarded or not
        self.black_holed = 0        # connections black-holed (by cut() or accepted while cut)
        self.discarded = 0          # bytes read and thrown away while black-holed
        self.cut_at: float | None = None    # time.monotonic() of the last cut()
        self.errors: list[str] = []
        self._thread = threading.Thread(target=self._run, name=f"tcp-cut-{self.port}",
                                        daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ control

    @property
    def is_cut(self) -> bool:
        return self._cut

    def cut(self) -> None:
        """Black-hole every connection, existing and new (a network partition)."""
        with self._lock:
            self._cut = True
            self.cut_at = time.monotonic()
        self._wake()

    def heal(self) -> None:
        """New connections forward again; the black-holed ones stay dead."""
        with self._lock:
            self._cut = False
        self._wake()

    def close(self) -> None:
        with self._lock:
            self._stop = True
        self._wake()
        self._thread.join(10)
        with contextlib.suppress(OSError):
            self._wake_w.close()

    def __enter__(self) -> Proxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    # ------------------------------------------------------------------ the thread

    def _run(self) -> None:
        try:
            while not self._stop:
                for key, events in self._selector.select(timeout=1.0):
                    try:
                        self._event(key, events)
                    except Exception as exc:  # one connection's trouble, never the thread's
                        self.errors.append(f"{type(exc).__name__}: {exc}")
                        if isinstance(key.data, _End):
                            self._drop(key.data)
        except Exception as exc:
            self.errors.append(f"proxy thread: {type(exc).__name__}: {exc}")
        finally:
            for end in list(self._ends):
                self._close_end(end)
            for sock in (self._listener, self._wake_r):
                with contextlib.suppress(Exception):
                    self._selector.unregister(sock)
                with contextlib.suppress(OSError):
                    sock.close()
            self._selector.close()

    def _event(self, key: selectors.SelectorKey, events: int) -> None:
        if key.data == "wake":
            with contextlib.suppress(BlockingIOError):
                key.fileobj.recv(4096)  # type: ignore[union-attr]
            if self._cut:
                self._black_hole_all()
            return
        if key.data == "accept":
            self._accept()
            return
        end: _End = key.data
        if events & selectors.EVENT_READ:
            self._read(end)
        if events & selectors.EVENT_WRITE and not end.closed:
            self._flush(end)

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        self.accepted += 1
        client.setblocking(False)
        with contextlib.suppress(OSError):
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        near = _End(client, "client")
        if self._cut:
            self.black_holed += 1
            self._register(near)
            return
        try:
            upstream = socket.create_connection(self.target, timeout=self.connect_timeout)
        except OSError:
            with contextlib.suppress(OSError):
                client.close()
            return
        upstream.setblocking(False)
        with contextlib.suppress(OSError):
            upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        far = _End(upstream, "target", peer=near)
        near.peer = far
        self._register(near)
        self._register(far)

    def _register(self, end: _End) -> None:
        self._ends.add(end)
        self._selector.register(end.sock, selectors.EVENT_READ, end)

    def _black_hole_all(self) -> None:
        for end in list(self._ends):
            if end.peer is not None:
                if end.name == "client":
                    self.black_holed += 1
                end.out.clear()
                end.peer = None
                self._interest(end)

    def _read(self, end: _End) -> None:
        try:
            data = end.sock.recv(CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # this end closed (or reset): close it, and its peer unless black-holed
            peer = end.peer
            self._drop(end)
            if peer is not None:
                self._drop(peer)
            return
        peer = end.peer
        if peer is None or peer.closed:
            self.discarded += len(data)
            return
        peer.out += data
        self._flush(peer)

    def _flush(self, end: _End) -> None:
        if end.peer is None:  # black-holed: nothing is ever written
            end.out.clear()
        while end.out:
            try:
                sent = end.sock.send(end.out)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                peer = end.peer
                self._drop(end)
                if peer is not None:
                    self._drop(peer)
                return
            del end.out[:sent]
        self._interest(end)

    def _interest(self, end: _End) -> None:
        if end.closed:
            return
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if end.out else 0)
        self._selector.modify(end.sock, events, end)

    def _drop(self, end: _End) -> None:
        self._close_end(end)

    def _close_end(self, end: _End) -> None:
        if end.closed:
            return
        end.closed = True
        self._ends.discard(end)
        with contextlib.suppress(Exception):
            self._selector.unregister(end.sock)
        with contextlib.suppress(OSError):
            end.sock.close()
