"""A hostile ``cache.dir`` never stops ``edgevlm serve`` (issue 20, finding 9).

One oversized ``.evc`` (a 50 GB sparse file standing in for any file larger than memory) made
the daemon exit 1 with ``cannot start: `` and no reason, a restart loop under systemd. Here a
real ``edgevlm serve`` on a real Mosquitto first fills its cache directory with two entries;
then one of them becomes 50 GB (its header still valid), and a symlink to ``/etc/passwd``, a
FIFO, a directory, a small file whose header claims 1 TiB and a file of deeply nested JSON
join it under entry names. A second ``edgevlm serve`` must come online with its resident memory
where the first one's was, warn once per bad file (naming it), keep the good entry (the next
request for that image is a cache hit) and answer. A start-up error always names its cause:
an exception without a message is logged by its type.
"""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.mqtt.conftest import WAIT_S, Broker, Daemon, MqttTestClient, v5_properties, wait_until
from tests.reliability.conftest import (
    BASE,
    REQUEST_TOPIC,
    Frame,
    make_frames,
    request_payload,
    rss_bytes,
    write_daemon_config,
)

REPLY = "edgevlm/clients/hostile-cache/reply"
STATE = f"{BASE}/bridge/state"
HUGE = 50 * 2**30
RSS_SLACK = 64 * 2**20  # the second start may hold one reloaded entry more; never gigabytes


def _vm(pid: int, field: str) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(rf"^{field}:\s+(\d+) kB", status, re.MULTILINE)
    assert match, f"no {field} for pid {pid}"
    return int(match.group(1)) * 1024


def _wait_online(client: MqttTestClient, seen: int) -> None:
    """The ``seen + 1``-th ``online`` on bridge/state (the retained one of an earlier daemon
    does not count twice)."""
    client.inbox.wait(STATE, count=seen + 1, timeout=WAIT_S * 3,
                      where=lambda m: m.payload == b"online")


def _onlines(client: MqttTestClient) -> int:
    return sum(m.payload == b"online" for m in client.inbox.on(STATE))


def _ask(client: MqttTestClient, rid: str, frame: Frame) -> dict[str, Any]:
    client.pub(REQUEST_TOPIC, request_payload(rid, frame),
               properties=v5_properties(REPLY, rid.encode()))
    return client.inbox.json(REPLY, timeout=WAIT_S * 3, where=lambda a: a.get("id") == rid)[0]


def _entries(directory: Path) -> set[Path]:
    return {p for p in directory.glob("*.evc") if p.is_file() and not p.is_symlink()}


def _with_header(data: bytes, **changes: Any) -> bytes:
    head_len = struct.unpack_from("<I", data, 10)[0]
    header = {**json.loads(data[14:14 + head_len]), **changes}
    head = json.dumps(header).encode()
    return data[:10] + struct.pack("<I", len(head)) + head + data[14 + head_len:]


def _plant(directory: Path, good: Path, big: Path) -> dict[Path, str]:
    """Make ``big`` 50 GB and add the other hostile entries; {path: reason in the warning}."""
    os.truncate(big, HUGE)
    names = iter(f"{d}" * 32 for d in "0123456789")

    def entry() -> Path:
        return directory / (next(names) + ".evc")

    passwd, fifo, folder, claim, nested = (entry() for _ in range(5))
    passwd.symlink_to("/etc/passwd")
    os.mkfifo(fifo)
    folder.mkdir()
    claim.write_bytes(_with_header(good.read_bytes(), key=claim.stem, payload_bytes=2**40))
    nested.write_bytes(b"EVLMCACH" + struct.pack("<HI", 1, 60_000) + b"[" * 60_000)
    return {big: f"{HUGE} bytes, larger than any entry can be",
            passwd: "a symlink, not a regular file", fifo: "a FIFO, not a regular file",
            folder: "a directory, not a regular file", claim: "truncated or padded",
            nested: "corrupt header (RecursionError"}


def test_serve_starts_online_and_answers_with_a_hostile_cache_dir(
        broker: Broker, mqtt_client: Callable[..., MqttTestClient], tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    config = write_daemon_config(tmp_path / "edgevlm.yaml", broker,
                                 cache={"dir": str(cache_dir)})
    client = mqtt_client()
    client.sub(STATE, REPLY)
    frames = make_frames(2)

    # a first daemon: the resident memory of a normal start, and two entries on disk
    first = Daemon(config, tmp_path / "first.log")
    try:
        _wait_online(client, _onlines(client))
        base_rss, base_hwm = rss_bytes(first.pid), _vm(first.pid, "VmHWM")
        assert _ask(client, "fill-0", frames[0])["status"] == "ok"
        wait_until(lambda: len(_entries(cache_dir)) == 1, what="the first entry's file")
        (good,) = _entries(cache_dir)
        assert _ask(client, "fill-1", frames[1])["status"] == "ok"
        wait_until(lambda: len(_entries(cache_dir)) == 2, what="the second entry's file")
        (big,) = _entries(cache_dir) - {good}
        assert first.terminate() == 0
    finally:
        first.close()

    reasons = _plant(cache_dir, good, big)
    passwd_before = Path("/etc/passwd").read_bytes()

    second = Daemon(config, tmp_path / "second.log")
    try:
        _wait_online(client, _onlines(client))
        rss, hwm = rss_bytes(second.pid), _vm(second.pid, "VmHWM")
        print(f"\nRSS at online: {base_rss / 2**20:.0f} MiB with a clean cache.dir, "
              f"{rss / 2**20:.0f} MiB with the hostile one (peak {base_hwm / 2**20:.0f} / "
              f"{hwm / 2**20:.0f} MiB)")
        assert rss <= base_rss + RSS_SLACK and hwm <= base_hwm + RSS_SLACK
        hit = _ask(client, "after-0", frames[0])
        assert hit["status"] == "ok", hit
        log = second.log.read_text()
        assert "vision-cache hit" in log and "cannot start" not in log, log[-4000:]
        again = _ask(client, "after-1", frames[1])
        assert again["status"] == "ok", again
        # the entry was computed again and written over the 50 GB file (tmp + rename)
        wait_until(lambda: big.stat().st_size < 2**20, what="the 50 GB file replaced")
        assert second.terminate() == 0
    finally:
        second.close()
    log = second.log.read_text()
    warnings = [line for line in log.splitlines() if " WARNING " in line and "vision-cache" in line]
    for path, reason in reasons.items():
        assert [w for w in warnings if f"skipping {path}: " in w and reason in w], \
            (path, reason, warnings)
    assert len(warnings) == len(reasons), warnings
    assert "reloaded 1 entries" in log
    assert Path("/etc/passwd").read_bytes() == passwd_before


def test_a_start_up_error_without_a_message_is_logged_by_its_type(tmp_path: Path) -> None:
    """``edgevlm serve`` in a child process whose start-up raises ``MemoryError()`` (as reading
    a file larger than memory did): exit 1 and ``cannot start: MemoryError (no message)``."""
    config = tmp_path / "edgevlm.yaml"
    config.write_text("mqtt: {host: 127.0.0.1, port: 1}\nzeroconf: {enabled: false}\n")
    script = ("import sys, edgevlm.service as service\n"
              "def load_engine(config):\n"
              "    raise MemoryError\n"
              "service.load_engine = load_engine\n"
              "from edgevlm.cli import main\n"
              "sys.exit(main(sys.argv[1:]))\n")
    done = subprocess.run([sys.executable, "-c", script, "serve", "-c", str(config)],
                          capture_output=True, text=True, timeout=WAIT_S * 2)
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if "cannot start" in line]
    assert len(lines) == 1 and lines[0].endswith("cannot start: MemoryError (no message)"), \
        done.stderr
