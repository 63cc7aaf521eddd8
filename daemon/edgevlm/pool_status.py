"""``edgevlm pool status``: which boards are members of the shared pool and serve it.

Reads the retained bridge topics of every node under the base topic — ``bridge/state``
(``online``/``offline``), ``bridge/pool`` (``{"group", "member", "reason", "since"}``; absent
with the pool off or on an older version), ``bridge/info`` (version, model, capabilities) and
``bridge/health`` (``serving``, ``problem``) — for ``wait_s`` seconds, and makes one row per
node. A board serves the pool when its state is ``online`` and its ``bridge/pool`` says
``member: true``. A payload that is not what the spec says (bad JSON, wrong types) counts as
unknown, never as an error.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

from .ask import BrokerUnavailable, _nodelay

log = logging.getLogger(__name__)

TOPICS = ("state", "pool", "info", "health")
HEADER = ("NODE", "STATE", "POOL", "GROUP", "SERVING", "REASON", "MODEL", "VERSION")


@dataclass
class NodeStatus:
    """What one board's retained bridge topics say (None: not said, or not understood)."""

    node: str
    state: str | None = None          # bridge/state: "online" / "offline"
    serving: bool | None = None       # bridge/health "serving"
    problem: str | None = None        # bridge/health "problem"
    member: bool | None = None        # bridge/pool "member"; None: no bridge/pool topic
    group: str | None = None          # bridge/pool "group", else bridge/info pool_group
    reason: str | None = None         # bridge/pool "reason"
    since: str | None = None          # bridge/pool "since"
    version: str | None = None        # bridge/info "version"
    model: str | None = None          # bridge/info "model"."name"

    @property
    def serves_pool(self) -> bool:
        """Online and subscribed to its pool group: pooled requests can reach it."""
        return self.state == "online" and self.member is True

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "serves_pool": self.serves_pool}


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _json_object(payload: bytes) -> dict[str, Any] | None:
    try:
        obj = json.loads(payload)
    except ValueError:  # includes UnicodeDecodeError
        return None
    return obj if isinstance(obj, dict) else None


class _Collector:
    """The four retained topics of every node, as they arrive (paho's network thread)."""

    def __init__(self, base: str) -> None:
        self.base = base
        self._lock = threading.Lock()
        self._raw: dict[str, dict[str, bytes]] = {}   # node -> {"state": payload, ...}

    def filters(self) -> list[str]:
        return [f"{self.base}/+/bridge/{name}" for name in TOPICS]

    def on_message(self, client: Any, userdata: Any, msg: paho.MQTTMessage) -> None:
        try:
            self._add(msg.topic, msg.payload)
        except Exception:  # a paho callback must never raise
            log.exception("could not read %s", getattr(msg, "topic", "?"))

    def _add(self, topic: str, payload: bytes | bytearray) -> None:
        prefix = f"{self.base}/"
        if not topic.startswith(prefix):
            return
        levels = topic[len(prefix):].split("/")
        if len(levels) != 3 or levels[1] != "bridge" or levels[2] not in TOPICS:
            return
        with self._lock:
            if payload:
                self._raw.setdefault(levels[0], {})[levels[2]] = bytes(payload)
            else:  # an empty retained message clears the topic
                self._raw.get(levels[0], {}).pop(levels[2], None)

    def rows(self) -> list[NodeStatus]:
        with self._lock:
            raw = {node: dict(topics) for node, topics in self._raw.items() if topics}
        return [node_status(node, raw[node]) for node in sorted(raw)]


def node_status(node: str, topics: Mapping[str, bytes]) -> NodeStatus:
    """One row from the raw payloads of a node's bridge topics (keys as in ``TOPICS``)."""
    row = NodeStatus(node)
    if "state" in topics:
        row.state = topics["state"].decode("utf-8", "replace").strip() or None
    health = _json_object(topics.get("health", b""))
    if health is not None:
        row.serving = _bool(health.get("serving"))
        row.problem = _str(health.get("problem"))
    info = _json_object(topics.get("info", b""))
    info_group = None
    if info is not None:
        row.version = _str(info.get("version"))
        model = info.get("model")
        row.model = _str(model.get("name")) if isinstance(model, dict) else _str(model)
        capabilities = info.get("capabilities")
        if isinstance(capabilities, dict):
            info_group = _str(capabilities.get("pool_group"))
    pool = _json_object(topics.get("pool", b""))
    if pool is not None:
        row.member = _bool(pool.get("member"))
        row.group = _str(pool.get("group"))
        row.reason = _str(pool.get("reason"))
        row.since = _str(pool.get("since"))
    row.group = row.group or info_group
    return row


def collect(host: str, port: int, *, base_topic: str = "edgevlm", wait_s: float = 1.5,
            protocol: str = "5", username: str | None = None, password: str | None = None,
            timeout: float = 10.0) -> list[NodeStatus]:
    """Connect, read the retained bridge topics for ``wait_s`` seconds, return a row per node.

    Raises :class:`edgevlm.ask.BrokerUnavailable` when the broker cannot be reached, refuses
    the connection or does not confirm the subscriptions within ``timeout`` seconds.
    """
    collector = _Collector(base_topic)
    v5 = protocol != "3.1.1"
    client = paho.Client(CallbackAPIVersion.VERSION2,
                         client_id=f"edgevlm-pool-status-{uuid.uuid4().hex[:12]}",
                         protocol=paho.MQTTv5 if v5 else paho.MQTTv311)
    if username is not None:
        client.username_pw_set(username, password)
    connected, subscribed = threading.Event(), threading.Event()
    refused: list[str] = []

    def on_connect(client: Any, userdata: Any, flags: Any, reason: Any,
                   props: Any = None) -> None:
        try:
            if getattr(reason, "is_failure", False):
                refused.append(str(reason))
        finally:
            connected.set()

    def on_subscribe(client: Any, userdata: Any, mid: Any, codes: Any = (),
                     props: Any = None) -> None:
        try:
            refused.extend(str(c) for c in codes or () if getattr(c, "is_failure", False))
        finally:
            subscribed.set()

    client.on_connect = on_connect
    client.on_subscribe = on_subscribe
    client.on_message = collector.on_message
    client.on_socket_open = _nodelay
    where = f"{host}:{port}"
    try:
        client.connect(host, port, keepalive=30)
    except (OSError, ValueError) as exc:
        raise BrokerUnavailable(f"cannot reach the broker at {where}: {exc}") from None
    client.loop_start()
    try:
        if not connected.wait(timeout) or refused:
            raise BrokerUnavailable(f"the broker at {where} did not accept the connection: "
                                    f"{refused[0] if refused else 'no answer'}")
        result, _ = client.subscribe([(topic, 1) for topic in collector.filters()])
        if result != paho.MQTT_ERR_SUCCESS or not subscribed.wait(timeout):
            raise BrokerUnavailable(f"the broker at {where} did not confirm the "
                                    f"subscription to {base_topic}/+/bridge/...")
        if len(refused) == len(TOPICS):  # an ACL that hides them all: say so, not "no board"
            raise BrokerUnavailable(f"the broker at {where} refused the subscription to "
                                    f"{base_topic}/+/bridge/...: {refused[0]}")
        time.sleep(max(wait_s, 0.0))  # the retained messages follow the SUBACK
    finally:
        try:
            client.disconnect()
        finally:
            client.loop_stop()
    return collector.rows()


def group_members(rows: list[NodeStatus]) -> dict[str, list[str]]:
    """The members (``member: true``) of each pool group, online or not."""
    groups: dict[str, list[str]] = {}
    for row in rows:
        if row.group is not None:
            members = groups.setdefault(row.group, [])
            if row.member is True:
                members.append(row.node)
    return dict(sorted(groups.items()))


def serving_count(rows: list[NodeStatus]) -> int:
    return sum(row.serves_pool for row in rows)


def to_json(rows: list[NodeStatus]) -> dict[str, Any]:
    """``{"nodes": [...], "group_members": {group: [nodes]}, "serving": N}``."""
    return {"nodes": [row.to_json() for row in rows], "group_members": group_members(rows),
            "serving": serving_count(rows)}


def _yes_no(value: bool | None) -> str:
    return "-" if value is None else "yes" if value else "no"


def _cells(row: NodeStatus) -> list[str]:
    pool = "-" if row.member is None else "member" if row.member else "no"
    reason = row.reason or (row.problem if row.serving is False else None)
    return [row.node, row.state or "?", pool, row.group or "-", _yes_no(row.serving),
            reason or "-", row.model or "-", row.version or "-"]


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def summary_lines(rows: list[NodeStatus]) -> list[str]:
    """``1 of 3 boards in pool group 'edgevlm' serve requests``, one line per group."""
    groups = sorted({row.group for row in rows if row.group is not None})
    if not groups:
        return [f"no board reports a pool group ({_plural(len(rows), 'board')} found)"]
    lines = []
    for group in groups:
        in_group = [row for row in rows if row.group == group]
        serving = serving_count(in_group)
        lines.append(f"{serving} of {_plural(len(in_group), 'board')} in pool group "
                     f"'{group}' {'serves' if serving == 1 else 'serve'} requests")
    ungrouped = sum(row.group is None for row in rows)
    if ungrouped:
        lines.append(f"{_plural(ungrouped, 'board')} without a pool group")
    return lines


def render_table(rows: list[NodeStatus]) -> str:
    """An aligned table (columns two spaces apart), then the summary line(s)."""
    table = [list(HEADER), *(_cells(row) for row in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(HEADER))]
    out = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)
                     ).rstrip() for line in table]
    return "\n".join([*out, *summary_lines(rows)]) + "\n"
