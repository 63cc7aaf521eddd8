"""The journal of Frigate events accepted but not yet given their record (``cache.dir``).

Frigate publishes ``frigate/events`` at its ``mqtt.qos``, 0 by default
(blakeblackshear/frigate ``frigate/comms/mqtt.py``: ``publish(..., qos=self.config.mqtt.qos)``;
``frigate/config/mqtt.py``: ``qos: int = Field(default=0)``), so the broker keeps no copy of an
event the daemon held in memory when it was killed. With ``cache.dir`` set, each accepted event
is journaled (``frigate-events.jsonl``: one small JSON line ``{"op": "add", ...}``) and
crossed off (``{"op": "done", "id": ...}``) once its record is published; at start-up every
event still open gets its record (:meth:`edgevlm.sources.cameras.CameraSources.recover`).

Lines are written by a thread of their own, in order, a batch per ``fsync``: the network
thread only queues them. The file is bounded: past :data:`MAX_BYTES` it is rewritten with the
open events only; at most :data:`MAX_OPEN` events are journaled (more are not, with a warning).
Reading is lenient: a torn last line, a corrupt or hostile line or file is skipped with a
warning and never stops the start-up.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

JOURNAL_FILE = "frigate-events.jsonl"
MAX_BYTES = 256 * 1024   # the file is compacted (open events only) past this
MAX_OPEN = 1024          # events journaled at once; more are not journaled
MAX_TEXT = 200           # an id, camera or label longer than this is not from Frigate


@dataclass(frozen=True)
class JournaledEvent:
    id: str
    camera: str
    label: str | None
    start_time: float | None = None
    end_time: float | None = None
    best: float | None = None

    def line(self) -> dict[str, Any]:
        return {"op": "add", "id": self.id, "camera": self.camera, "label": self.label,
                "start_time": self.start_time, "end_time": self.end_time, "best": self.best}


def _text(value: Any, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT:
        raise ValueError("not a short string")
    return value


def _time(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("not a time")
    return float(value)


def parse_line(raw: Any) -> tuple[str, JournaledEvent | str]:
    """``("add", event)`` or ``("done", id)``; ValueError for anything else."""
    if not isinstance(raw, dict):
        raise ValueError("not an object")
    op = raw.get("op")
    if op == "done":
        return "done", _text(raw.get("id")) or ""
    if op == "add":
        return "add", JournaledEvent(
            _text(raw.get("id")) or "", _text(raw.get("camera")) or "",
            _text(raw.get("label"), optional=True), _time(raw.get("start_time")),
            _time(raw.get("end_time")), _time(raw.get("best")))
    raise ValueError(f"unknown op {op!r}"[:80])


def read_journal(path: Path) -> list[JournaledEvent]:
    """The events still open in ``path``, oldest first; bad lines are skipped."""
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_BYTES * 4 + 1)
    except FileNotFoundError:
        return []
    except OSError as exc:
        log.warning("frigate event journal %s not read (%s): events in flight before the "
                    "restart get no record", path, exc)
        return []
    if len(data) > MAX_BYTES * 4:
        log.warning("frigate event journal %s is larger than %d bytes: only its start is read",
                    path, MAX_BYTES * 4)
    open_: OrderedDict[str, JournaledEvent] = OrderedDict()
    bad = 0
    lines = data.split(b"\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            op, value = parse_line(json.loads(line.decode("utf-8")))
        except (ValueError, UnicodeDecodeError, RecursionError):
            if number == len(lines):
                log.warning("frigate event journal %s: its last line is torn (the daemon was "
                            "killed while writing it); skipped", path)
            else:
                bad += 1
            continue
        if op == "add":
            assert isinstance(value, JournaledEvent)
            if value.id not in open_ and len(open_) < MAX_OPEN:
                open_[value.id] = value
        else:
            open_.pop(str(value), None)
    if bad:
        log.warning("frigate event journal %s: %d line(s) not understood; skipped", path, bad)
    return list(open_.values())


class EventJournal:
    """Open Frigate events on disk (``directory`` None: nothing is journaled)."""

    def __init__(self, directory: str | Path | None) -> None:
        self.path = Path(directory).expanduser() / JOURNAL_FILE if directory else None
        self._cond = threading.Condition()
        self._lines: list[dict[str, Any]] = []
        self._open: OrderedDict[str, JournaledEvent] = OrderedDict()
        self._stopping = False
        self._size = 0
        self._thread: threading.Thread | None = None
        self.recovered: list[JournaledEvent] = []
        if self.path is None:
            return
        self.recovered = read_journal(self.path)
        self._open.update((e.id, e) for e in self.recovered)
        self._rewrite()
        self._thread = threading.Thread(target=self._writer, name="event-journal",
                                        daemon=True)
        self._thread.start()

    @property
    def enabled(self) -> bool:
        return self.path is not None

    def add(self, event: JournaledEvent) -> None:
        """Journal ``event`` (once per id; queued, written by the journal's thread)."""
        if self.path is None:
            return
        with self._cond:
            if event.id in self._open:
                return
            if len(self._open) >= MAX_OPEN:
                log.warning("frigate event %s not journaled: %d events are open already",
                            event.id, MAX_OPEN)
                return
            self._open[event.id] = event
            self._lines.append(event.line())
            self._cond.notify()

    def done(self, event_id: str | None) -> None:
        """``event_id`` has its record: cross it off."""
        if self.path is None or event_id is None:
            return
        with self._cond:
            if self._open.pop(event_id, None) is None:
                return
            self._lines.append({"op": "done", "id": event_id})
            self._cond.notify()

    def open_ids(self) -> list[str]:
        with self._cond:
            return list(self._open)

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every queued line is on disk (tests, stop)."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._lines and not self._busy, timeout)

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    # ------------------------------------------------------------------ writing

    _busy = False

    def _writer(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._lines) or self._stopping)
                if not self._lines and self._stopping:
                    return
                lines, self._lines = self._lines, []
                self._busy = True
            try:
                self._append(lines)
            except Exception:  # a disk problem must not stop the daemon
                log.exception("frigate event journal %s not written", self.path)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _append(self, lines: list[dict[str, Any]]) -> None:
        assert self.path is not None
        if self._size > MAX_BYTES:
            self._rewrite()
            return  # the rewrite holds the open events, these lines included
        data = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines)
        try:
            with self.path.open("ab") as fh:
                fh.write(data.encode())
                fh.flush()
                os.fsync(fh.fileno())
            self._size += len(data)
        except OSError as exc:
            log.warning("frigate event journal %s not written (%s)", self.path, exc)

    def _rewrite(self) -> None:
        """The file with the open events only (atomically: a temporary file, then rename)."""
        assert self.path is not None
        with self._cond:
            events = list(self._open.values())
        data = "".join(json.dumps(e.line(), separators=(",", ":")) + "\n" for e in events)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with tmp.open("wb") as fh:
                fh.write(data.encode())
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
            self._size = len(data)
        except OSError as exc:
            log.warning("frigate event journal %s not rewritten (%s): events in flight at a "
                        "crash may get no record", self.path, exc)
