"""Metrics: counters keep the invariant under threads, percentiles, tokens/s, the JSON shape."""

from __future__ import annotations

import json
import random
import threading

from edgevlm.metrics import WINDOW, Metrics, percentile, rss_bytes
from edgevlm.pipeline.cache import CacheStats
from edgevlm.wire import protocol


def check_invariant(snap: dict[str, object]) -> None:
    req = snap["requests"]
    assert isinstance(req, dict)
    assert req["received"] == req["answered"] + req["errored"] + req["in_progress"]


def test_empty_snapshot_has_the_documented_shape_and_nulls() -> None:
    now = [100.0]
    snap = Metrics(clock=lambda: now[0]).snapshot()
    assert set(snap) == {"uptime_s", "rss_bytes", "busy", "queue_depth", "requests",
                         "latency_ms", "tokens_per_s", "cache", "mqtt"}
    assert snap["requests"] == {"received": 0, "answered": 0, "errored": 0, "in_progress": 0,
                                "deduplicated": 0, "errors_by_type": {}}
    assert snap["latency_ms"] == {"ttft": {"p50": None, "p95": None},
                                  "total": {"p50": None, "p95": None}}
    assert snap["tokens_per_s"] is None and snap["cache"]["hit_rate"] is None
    assert snap["mqtt"] == {"connected": False, "reconnects": 0, "answers_refused": 0}
    json.dumps(snap)


def test_counts_by_outcome_and_error_type_with_the_invariant() -> None:
    m = Metrics()
    for _ in range(5):
        m.received()
    m.finished(None, protocol.Metrics(ttft_ms=10, total_ms=50, tpot_ms=5),
               completion_tokens=9)
    m.finished("busy")
    m.finished("busy")
    m.finished("invalid_request")
    m.deduplicated()
    snap = m.snapshot()
    assert snap["requests"] == {"received": 5, "answered": 1, "errored": 3, "in_progress": 1,
                                "deduplicated": 1,
                                "errors_by_type": {"busy": 2, "invalid_request": 1}}
    check_invariant(snap)


def test_finished_without_received_still_keeps_the_invariant() -> None:
    m = Metrics()
    m.finished("invalid_request")
    snap = m.snapshot()
    assert snap["requests"]["received"] == 1 and snap["requests"]["in_progress"] == 0
    check_invariant(snap)


def test_invariant_holds_under_concurrent_threads() -> None:
    m = Metrics()
    stop = threading.Event()
    seen: list[dict[str, object]] = []

    def work(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(2000):
            m.received()
            if rng.random() < 0.8:
                m.finished(None if rng.random() < 0.7 else "internal",
                           protocol.Metrics(ttft_ms=rng.random() * 100, total_ms=200),
                           completion_tokens=4)

    def watch() -> None:
        while not stop.is_set():
            seen.append(m.snapshot())

    watcher = threading.Thread(target=watch)
    watcher.start()
    workers = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    stop.set()
    watcher.join()
    final = m.snapshot()
    assert final["requests"]["received"] == 8000
    for snap in [*seen, final]:
        check_invariant(snap)
    assert final["requests"]["in_progress"] > 0


def test_percentiles_cover_only_the_last_256_answers() -> None:
    m = Metrics()
    for _ in range(WINDOW):
        m.received()
        m.finished(None, protocol.Metrics(ttft_ms=10_000, total_ms=10_000))
    for i in range(1, WINDOW + 1):  # pushes every 10 s answer out of the window
        m.received()
        m.finished(None, protocol.Metrics(ttft_ms=float(i), total_ms=float(2 * i)))
    lat = m.snapshot()["latency_ms"]
    assert lat["ttft"] == {"p50": 128.0, "p95": 244.0}
    assert lat["total"] == {"p50": 256.0, "p95": 488.0}


def test_percentile_nearest_rank() -> None:
    assert percentile([], 50) is None
    assert percentile([7.0], 95) == 7.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0
    assert percentile([4.0, 1.0, 3.0, 2.0], 95) == 4.0


def test_tokens_per_second_from_decode_time() -> None:
    m = Metrics()
    m.received()
    # 11 tokens: the first at TTFT, 10 decoded at 20 ms each -> 50 tokens/s
    m.finished(None, protocol.Metrics(ttft_ms=100, tpot_ms=20, total_ms=300),
               completion_tokens=11)
    assert m.snapshot()["tokens_per_s"] == 50.0
    m.received()  # no TPOT: decode time is total - TTFT: 5 tokens in 0.5 s
    m.finished(None, protocol.Metrics(ttft_ms=100, total_ms=600), completion_tokens=6)
    assert m.snapshot()["tokens_per_s"] == round(15 / 0.7, 2)


def test_state_cache_and_uptime() -> None:
    now = [5.0]
    m = Metrics(clock=lambda: now[0])
    now[0] = 17.25
    m.set_busy(True)
    waiting = [1, 2, 3]
    m.watch_queue(waiting.__len__)  # read at the snapshot, not pushed
    m.set_connected(True)
    m.reconnected()
    m.reconnected()
    snap = m.snapshot(CacheStats(hits=3, misses=1, evictions=0, bytes=4096, entries=2,
                                 max_bytes=1 << 20))
    assert snap["uptime_s"] == 12.2 or snap["uptime_s"] == 12.3
    assert snap["busy"] is True and snap["queue_depth"] == 3
    assert snap["mqtt"] == {"connected": True, "reconnects": 2, "answers_refused": 0}
    assert snap["cache"] == {"hits": 3, "misses": 1, "hit_rate": 0.75, "bytes": 4096,
                             "entries": 2}


def test_rss_is_a_plausible_number_of_bytes() -> None:
    rss = rss_bytes()
    assert rss is not None and 1 << 20 < rss < 1 << 40
