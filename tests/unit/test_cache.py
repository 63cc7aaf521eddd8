"""Vision-feature cache: key properties, LRU in bytes, threads, persistence and bad files."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import resource
import signal
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgevlm.pipeline.cache import FILE_SUFFIX, CacheStats, VisionCache
from edgevlm.vision.cache_key import cache_key
from edgevlm.wire.features import VisionFeatures

FP = "qwen3-vl-2b@sha256:abc"
D = 16
ENTRY = 4 * D * 4  # bytes of a 4-token entry without DeepStack


def feats(seed: int = 0, n_grid: tuple[int, int, int] = (1, 2, 2), k: int = 0,
          d: int = D) -> VisionFeatures:
    rng = np.random.default_rng(seed)
    n = n_grid[0] * n_grid[1] * n_grid[2]
    ds = rng.standard_normal((k, n, d), dtype=np.float32) if k else None
    return VisionFeatures(rng.standard_normal((n, d), dtype=np.float32), ds, n_grid)


def key(i: int) -> str:
    return cache_key(FP, "qwen3_vl", 1, 2, f"image-{i}".encode())


def same(a: VisionFeatures | None, b: VisionFeatures) -> bool:
    if a is None or a.grid != b.grid or not np.array_equal(a.embeddings, b.embeddings):
        return False
    if a.deepstack is None or b.deepstack is None:
        return a.deepstack is None and b.deepstack is None
    return np.array_equal(a.deepstack, b.deepstack)


# --------------------------------------------------------------------------- cache_key


def test_key_is_stable_32_hex_digits() -> None:
    k1 = cache_key(FP, "qwen3_vl", 3136, 1_003_520, b"\xff\xd8jpeg")
    assert k1 == cache_key(FP, "qwen3_vl", 3136, 1_003_520, b"\xff\xd8jpeg")
    assert len(k1) == 32 and all(c in "0123456789abcdef" for c in k1)


def test_any_input_change_changes_the_key() -> None:
    base = (FP, "qwen3_vl", 3136, 1_003_520, b"pixels")
    variants = [
        (FP + "x", "qwen3_vl", 3136, 1_003_520, b"pixels"),
        (FP, "qwen2_5_vl", 3136, 1_003_520, b"pixels"),
        (FP, "qwen3_vl", 3137, 1_003_520, b"pixels"),
        (FP, "qwen3_vl", 3136, 1_003_521, b"pixels"),
        (FP, "qwen3_vl", 3136, 1_003_520, b"pixelS"),
        (FP, "qwen3_vl", 3136, 1_003_520, b"pixels\0"),
    ]
    keys = {cache_key(*base), *(cache_key(*v) for v in variants)}
    assert len(keys) == 1 + len(variants)


def test_field_boundaries_cannot_be_shifted() -> None:
    assert cache_key("ab", "c", 1, 2, b"x") != cache_key("a", "bc", 1, 2, b"x")
    assert cache_key(FP, "f", 1, 2, [b"ab", b"c"]) != cache_key(FP, "f", 1, 2, [b"a", b"bc"])
    assert cache_key(FP, "f", 1, 2, [b"abc"]) != cache_key(FP, "f", 1, 2, [b"abc", b""])
    assert cache_key(FP, "f", 1, 2, [b"a", b"b"]) != cache_key(FP, "f", 1, 2, [b"b", b"a"])


def test_one_image_and_a_one_frame_clip_have_different_keys() -> None:
    assert cache_key(FP, "f", 1, 2, b"frame") != cache_key(FP, "f", 1, 2, [b"frame"])


def test_pixel_bounds_must_fit_64_bits() -> None:
    with pytest.raises(ValueError, match="pixel bounds"):
        cache_key(FP, "f", -1, 2, b"x")
    with pytest.raises(ValueError, match="pixel bounds"):
        cache_key(FP, "f", 1, 2**64, b"x")


# --------------------------------------------------------------------------- LRU in memory


def test_get_counts_hits_and_misses_and_contains_does_not() -> None:
    cache = VisionCache(max_bytes=10 * ENTRY)
    f = feats()
    assert cache.get(key(0)) is None
    cache.put(key(0), f)
    assert key(0) in cache and key(1) not in cache
    assert cache.get(key(0)) is f
    assert cache.stats() == CacheStats(hits=1, misses=1, evictions=0, bytes=ENTRY, entries=1,
                                       max_bytes=10 * ENTRY)
    assert cache.stats().hit_rate == 0.5
    assert VisionCache().stats().hit_rate == 0.0


def test_least_recently_used_entry_is_evicted_first() -> None:
    cache = VisionCache(max_bytes=2 * ENTRY)
    cache.put(key(0), feats(0))
    cache.put(key(1), feats(1))
    assert cache.get(key(0)) is not None  # 0 is now more recent than 1
    cache.put(key(2), feats(2))
    assert key(0) in cache and key(2) in cache and key(1) not in cache
    stats = cache.stats()
    assert (stats.evictions, stats.entries, stats.bytes) == (1, 2, 2 * ENTRY)


def test_bytes_stay_within_the_bound_and_evictions_are_counted() -> None:
    cache = VisionCache(max_bytes=5 * ENTRY + 7)
    sizes = {}
    for i in range(20):
        f = feats(i, n_grid=(1, 1, 1 + i % 4), k=i % 2)
        sizes[key(i)] = f.nbytes
        cache.put(key(i), f)
        stats = cache.stats()
        present = [k for k in sizes if k in cache]
        assert stats.bytes == sum(sizes[k] for k in present) <= 5 * ENTRY + 7
        assert stats.entries == len(present)
    assert cache.stats().evictions == 20 - cache.stats().entries


def test_replacing_a_key_does_not_count_its_bytes_twice() -> None:
    cache = VisionCache(max_bytes=10 * ENTRY)
    cache.put(key(0), feats(0))
    cache.put(key(0), feats(1, n_grid=(1, 1, 2)))
    assert cache.stats().bytes == ENTRY // 2 and cache.stats().entries == 1
    assert same(cache.get(key(0)), feats(1, n_grid=(1, 1, 2)))


def test_entry_bigger_than_the_cache_is_not_stored_and_evicts_nothing() -> None:
    cache = VisionCache(max_bytes=3 * ENTRY)
    cache.put(key(0), feats(0))
    cache.put(key(1), feats(1, k=3))  # 4 * ENTRY
    assert key(1) not in cache and key(0) in cache
    assert cache.stats().evictions == 0


def test_clear_drops_entries_and_keeps_counters() -> None:
    cache = VisionCache(max_bytes=10 * ENTRY)
    cache.put(key(0), feats(0))
    cache.get(key(0))
    cache.clear()
    assert key(0) not in cache
    stats = cache.stats()
    assert (stats.entries, stats.bytes, stats.hits) == (0, 0, 1)


def test_keys_that_are_not_cache_keys_are_refused() -> None:
    cache = VisionCache()
    for bad in ["../../etc/passwd", "A" * 32, key(0)[:31], key(0) + "0"]:
        with pytest.raises(ValueError, match="32 lowercase hex"):
            cache.put(bad, feats())
    assert cache.get("../x") is None


def test_hit_logs_the_seed_line(caplog: pytest.LogCaptureFixture) -> None:
    cache = VisionCache()
    cache.put(key(0), feats(0), source_size=(64, 48))
    cache.put(key(1), feats(1, n_grid=(1, 3, 3)))
    with caplog.at_level(logging.INFO, logger="edgevlm.pipeline.cache"):
        cache.get(key(0))
        cache.get(key(1))
        cache.get(key(2))
    assert caplog.messages == ["vision-cache hit (64x48, 4 vis tokens, skip ViT)",
                               "vision-cache hit (9 vis tokens, skip ViT)"]


def test_cached_arrays_cannot_be_modified_through_the_cache() -> None:
    cache = VisionCache()
    cache.put(key(0), feats(0, k=1))
    got = cache.get(key(0))
    assert got is not None and got.deepstack is not None
    with pytest.raises(ValueError, match="read-only"):
        got.embeddings[0, 0] = 0.0
    with pytest.raises(ValueError, match="read-only"):
        got.deepstack[0, 0, 0] = 0.0


def test_threads_putting_and_getting_keep_the_cache_consistent() -> None:
    cache = VisionCache(max_bytes=8 * ENTRY)
    entries = {key(i): feats(i, n_grid=(1, 1, 1 + i % 4)) for i in range(32)}
    keys = list(entries)
    gets_per_thread, errors = 400, []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(gets_per_thread):
                k = keys[int(rng.integers(len(keys)))]
                got = cache.get(k)
                if got is None:
                    cache.put(k, entries[k])
                elif got is not entries[k]:
                    errors.append(f"{k} returned another entry's features")
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(repr(exc))

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    stats = cache.stats()
    assert stats.hits + stats.misses == 8 * gets_per_thread
    present = [k for k in keys if k in cache]
    assert stats.bytes == sum(entries[k].nbytes for k in present) <= 8 * ENTRY
    assert stats.entries == len(present) and stats.misses > 0 and stats.hits > 0


# --------------------------------------------------------------------------- persistence


def test_entries_survive_a_restart(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    first = VisionCache(max_bytes=20 * ENTRY, directory=tmp_path, model_fingerprint=FP)
    plain, deep = feats(0), feats(1, n_grid=(2, 1, 2), k=3)
    first.put(key(0), plain, source_size=(64, 64))
    first.put(key(1), deep)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [key(0) + FILE_SUFFIX, key(1) + FILE_SUFFIX])

    second = VisionCache(max_bytes=20 * ENTRY, directory=tmp_path, model_fingerprint=FP)
    assert second.stats().entries == 2 and second.stats().bytes == plain.nbytes + deep.nbytes
    with caplog.at_level(logging.INFO, logger="edgevlm.pipeline.cache"):
        got = second.get(key(0))
    assert same(got, plain) and same(second.get(key(1)), deep)
    assert "vision-cache hit (64x64, 4 vis tokens, skip ViT)" in caplog.messages


def _age(directory: Path, order: list[str]) -> None:
    """Give the files of ``order`` increasing mtimes (the first is least recently used)."""
    for i, k in enumerate(order):
        os.utime(directory / (k + FILE_SUFFIX), ns=(1_000_000_000 * (i + 1),) * 2)


def test_restart_keeps_the_most_recently_used_entries_within_max_bytes(tmp_path: Path) -> None:
    first = VisionCache(max_bytes=10 * ENTRY, directory=tmp_path, model_fingerprint=FP)
    for i in range(4):
        first.put(key(i), feats(i))
    _age(tmp_path, [key(2), key(0), key(3), key(1)])

    second = VisionCache(max_bytes=2 * ENTRY, directory=tmp_path, model_fingerprint=FP)
    assert [k for k in map(key, range(4)) if k in second] == [key(1), key(3)]
    assert not (tmp_path / (key(0) + FILE_SUFFIX)).exists()  # dropped files are deleted
    second.put(key(5), feats(5))  # LRU order survived: 3 is older than 1
    assert key(3) not in second and key(1) in second


def test_a_hit_refreshes_the_files_recency(tmp_path: Path) -> None:
    first = VisionCache(max_bytes=10 * ENTRY, directory=tmp_path, model_fingerprint=FP)
    first.put(key(0), feats(0))
    first.put(key(1), feats(1))
    _age(tmp_path, [key(0), key(1)])
    first.get(key(0))
    second = VisionCache(max_bytes=ENTRY, directory=tmp_path, model_fingerprint=FP)
    assert key(0) in second and key(1) not in second


def test_evicted_and_cleared_entries_lose_their_files(tmp_path: Path) -> None:
    cache = VisionCache(max_bytes=2 * ENTRY, directory=tmp_path, model_fingerprint=FP)
    for i in range(3):
        cache.put(key(i), feats(i))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [key(1) + FILE_SUFFIX, key(2) + FILE_SUFFIX])
    cache.clear()
    assert list(tmp_path.iterdir()) == []


def _bad_files(directory: Path) -> dict[str, str]:
    """Write one good entry and several bad files; returns {file name: expected reason}."""
    good = VisionCache(directory=directory, model_fingerprint=FP)
    for i in range(6):
        good.put(key(i), feats(i))
    good_bytes = (directory / (key(0) + FILE_SUFFIX)).read_bytes()
    head_len = struct.unpack_from("<I", good_bytes, 10)[0]
    header = json.loads(good_bytes[14:14 + head_len])

    def path(i: int) -> Path:
        return directory / (key(i) + FILE_SUFFIX)

    flipped = bytearray(path(1).read_bytes())
    flipped[-1] ^= 0x01
    path(1).write_bytes(bytes(flipped))
    path(2).write_bytes(path(2).read_bytes()[:-8])
    path(3).write_bytes(b"GIF89a" + bytes(64))
    data = path(4).read_bytes()
    path(4).write_bytes(data[:8] + struct.pack("<H", 99) + data[10:])
    foreign = VisionCache(directory=directory / "other", model_fingerprint="another-model")
    foreign.put(key(5), feats(5))
    path(5).write_bytes((directory / "other" / (key(5) + FILE_SUFFIX)).read_bytes())
    (directory / ("not-a-key" + FILE_SUFFIX)).write_bytes(good_bytes)
    (directory / (key(9) + FILE_SUFFIX)).write_bytes(good_bytes[:5])
    assert header["key"] == key(0)
    return {key(1): "checksum", key(2): "truncated", key(3): "bad magic",
            key(4): "format version 99", key(5): "foreign", "not-a-key": "not a cache key",
            key(9): "truncated"}


def test_corrupt_truncated_and_foreign_files_are_skipped_with_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    reasons = _bad_files(tmp_path)
    with caplog.at_level(logging.WARNING, logger="edgevlm.pipeline.cache"):
        cache = VisionCache(directory=tmp_path, model_fingerprint=FP)
    assert key(0) in cache and cache.stats().entries == 1
    assert same(cache.get(key(0)), feats(0))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == len(reasons)
    for name, reason in reasons.items():
        matching = [w for w in warnings if str(tmp_path / (name + FILE_SUFFIX)) in w]
        assert len(matching) == 1 and reason in matching[0], (name, reason, warnings)


def test_stale_temporary_files_are_removed_at_start(tmp_path: Path) -> None:
    stale = tmp_path / f".{key(0)}.abc123.tmp"
    stale.write_bytes(b"half a write")
    VisionCache(directory=tmp_path, model_fingerprint=FP)
    assert not stale.exists()


def test_unusable_directory_falls_back_to_memory(tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"")
    with caplog.at_level(logging.WARNING, logger="edgevlm.pipeline.cache"):
        cache = VisionCache(directory=blocker / "cache", model_fingerprint=FP)
    assert any("not usable" in m and str(blocker / "cache") in m for m in caplog.messages)
    cache.put(key(0), feats(0))
    assert same(cache.get(key(0)), feats(0))


def test_a_failed_write_keeps_the_entry_in_memory(tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    directory = tmp_path / "cache"
    cache = VisionCache(directory=directory, model_fingerprint=FP)
    directory.rmdir()
    directory.write_bytes(b"")  # the directory is now a file: every write fails
    with caplog.at_level(logging.WARNING, logger="edgevlm.pipeline.cache"):
        cache.put(key(0), feats(0))
    assert any("cannot write" in m for m in caplog.messages)
    assert same(cache.get(key(0)), feats(0))


# --------------------------------------------------------------------------- hostile directory
# Issue 20, finding 9: nothing in cache.dir may stop the daemon from starting. Every entry that
# is not a sound file of this cache is skipped with one warning naming it; the good ones load.

HUGE = 50 * 2**30  # a sparse file (os.truncate): stands in for any file larger than memory


class _BlockedError(BaseException):
    """The load blocked (an open of a FIFO waits for a writer forever); a BaseException, so
    no ``except Exception`` of the code under test can swallow it."""


@contextlib.contextmanager
def _bounded(seconds: int = 20, extra_bytes: int = 2 * 2**30) -> Iterator[None]:
    """Fail instead of hanging (SIGALRM) or of allocating gigabytes (a soft RLIMIT_AS of the
    process's address space now plus ``extra_bytes``: a MemoryError instead)."""

    def alarm(signum: int, frame: object) -> None:
        raise _BlockedError(f"the load blocked for {seconds} s")

    status = Path("/proc/self/status").read_text()
    match = re.search(r"^VmSize:\s+(\d+) kB", status, re.MULTILINE)
    assert match is not None
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = int(match.group(1)) * 1024 + extra_bytes
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    previous = signal.signal(signal.SIGALRM, alarm)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _split(data: bytes) -> tuple[dict[str, Any], bytes]:
    head_len = struct.unpack_from("<I", data, 10)[0]
    return json.loads(data[14:14 + head_len]), data[14 + head_len:]


def _join(header: dict[str, Any] | bytes, payload: bytes) -> bytes:
    head = header if isinstance(header, bytes) else json.dumps(header).encode()
    return b"EVLMCACH" + struct.pack("<HI", 1, len(head)) + head + payload


def _edit_header(path: Path, **changes: Any) -> None:
    header, payload = _split(path.read_bytes())
    path.write_bytes(_join({**header, **changes}, payload))


def _sparse_50gb(path: Path) -> None:  # a valid header, then 50 GB (the file)
    os.truncate(path, HUGE)


def _symlink_to_etc_passwd(path: Path) -> None:
    path.unlink()
    path.symlink_to("/etc/passwd")


def _symlink_to_a_valid_entry(path: Path) -> None:  # even sound content is not followed to
    elsewhere = path.parent.parent / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    path.rename(elsewhere / path.name)
    path.symlink_to(elsewhere / path.name)


def _fifo(path: Path) -> None:  # an open() of it without O_NONBLOCK waits for a writer
    path.unlink()
    os.mkfifo(path)


def _directory(path: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "inside").write_bytes(b"x")


def _payload_size_claim(path: Path) -> None:  # a small file whose header claims 1 TiB
    _edit_header(path, payload_bytes=2**40)


def _header_size_claim(path: Path) -> None:  # a header length of 4 GiB - 1 in a small file
    data = bytearray(path.read_bytes())
    struct.pack_into("<I", data, 10, 2**32 - 1)
    path.write_bytes(bytes(data))


def _shape_claim(path: Path) -> None:  # sizes right, checksum right, shapes of 2**80 floats
    _edit_header(path, embeddings=[2**40, 2**40])


def _infinite_shape(path: Path) -> None:  # Python's json reads Infinity; int() cannot
    head = _split(path.read_bytes())[0]
    text = json.dumps({**head, "embeddings": [0, 0]}).replace("[0, 0]", "[Infinity, 16]")
    path.write_bytes(_join(text.encode(), _split(path.read_bytes())[1]))


def _nested_json(path: Path) -> None:  # 60,000 nested arrays: json.loads raises RecursionError
    path.write_bytes(_join(b"[" * 60_000, b""))


HOSTILE: dict[str, tuple[Callable[[Path], None], str]] = {
    "sparse-50-GB": (_sparse_50gb, f"{HUGE} bytes, larger than any entry can be"),
    "symlink-to-etc-passwd": (_symlink_to_etc_passwd, "a symlink, not a regular file"),
    "symlink-to-a-valid-entry": (_symlink_to_a_valid_entry, "a symlink, not a regular file"),
    "fifo": (_fifo, "a FIFO, not a regular file"),
    "directory": (_directory, "a directory, not a regular file"),
    "payload-size-claim": (_payload_size_claim, "truncated or padded"),
    "header-size-claim": (_header_size_claim, "corrupt header"),
    "shape-claim": (_shape_claim, "overrun"),
    "infinite-shape": (_infinite_shape, "corrupt header"),
    "nested-json": (_nested_json, "corrupt header (RecursionError"),
}


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and r.name == "edgevlm.pipeline.cache"]


@pytest.mark.parametrize("case", HOSTILE)
def test_a_hostile_entry_is_skipped_with_a_warning_and_the_good_ones_load(
        case: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    directory = tmp_path / "cache"
    writer = VisionCache(max_bytes=10 * ENTRY, directory=directory, model_fingerprint=FP)
    for i in range(3):
        writer.put(key(i), feats(i))
    hostile = directory / (key(1) + FILE_SUFFIX)
    make, reason = HOSTILE[case]
    make(hostile)
    with caplog.at_level(logging.WARNING, logger="edgevlm.pipeline.cache"), _bounded():
        cache = VisionCache(max_bytes=10 * ENTRY, directory=directory, model_fingerprint=FP)
    warnings = _warnings(caplog)
    assert len(warnings) == 1 and str(hostile) in warnings[0] and reason in warnings[0], warnings
    assert cache.stats().entries == 2 and key(1) not in cache
    assert same(cache.get(key(0)), feats(0)) and same(cache.get(key(2)), feats(2))
    assert os.path.lexists(hostile)  # skipped, not deleted: it may not be ours
    assert Path("/etc/passwd").stat().st_size > 0


def test_every_hostile_entry_at_once_is_skipped_and_rss_does_not_grow(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    directory = tmp_path / "cache"
    writer = VisionCache(max_bytes=100 * ENTRY, directory=directory, model_fingerprint=FP)
    for i in range(len(HOSTILE) + 2):
        writer.put(key(i), feats(i))
    for i, (make, _) in enumerate(HOSTILE.values(), start=2):
        make(directory / (key(i) + FILE_SUFFIX))
    VisionCache(max_bytes=100 * ENTRY, directory=directory, model_fingerprint=FP)  # warm up
    caplog.clear()
    before = _rss()
    with caplog.at_level(logging.WARNING, logger="edgevlm.pipeline.cache"), _bounded():
        cache = VisionCache(max_bytes=100 * ENTRY, directory=directory, model_fingerprint=FP)
    assert _rss() - before < 16 * 2**20
    warnings = _warnings(caplog)
    assert len(warnings) == len(HOSTILE), warnings
    for i, (_, reason) in enumerate(HOSTILE.values(), start=2):
        name = str(directory / (key(i) + FILE_SUFFIX))
        assert [w for w in warnings if name in w and reason in w], (name, reason, warnings)
    assert cache.stats().entries == 2
    assert same(cache.get(key(0)), feats(0)) and same(cache.get(key(1)), feats(1))


def _rss() -> int:
    status = Path("/proc/self/status").read_text()
    match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
    assert match is not None
    return int(match.group(1)) * 1024


def test_an_entry_larger_than_max_bytes_plus_a_header_is_not_opened(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    big = feats(0, n_grid=(1, 8, 8), d=512)  # 128 KiB: more than a header can be
    VisionCache(directory=tmp_path, model_fingerprint=FP).put(key(0), big)
    path = tmp_path / (key(0) + FILE_SUFFIX)
    opened: list[str] = []
    real_open = os.open

    def spy(file: Any, *args: Any, **kwargs: Any) -> int:
        opened.append(os.fspath(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy)
    with caplog.at_level(logging.WARNING, logger="edgevlm.pipeline.cache"):
        cache = VisionCache(max_bytes=0, directory=tmp_path, model_fingerprint=FP)
    assert str(path) not in opened and cache.stats().entries == 0
    assert any(str(path) in w and "larger than any entry" in w for w in _warnings(caplog))


def test_an_unexpected_error_of_one_entry_is_a_warning_naming_its_type(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    import edgevlm.pipeline.cache as cache_module

    writer = VisionCache(directory=tmp_path, model_fingerprint=FP)
    writer.put(key(0), feats(0))
    writer.put(key(1), feats(1))
    real = cache_module.read_entry  # from edgevlm.pipeline.cache_files

    def flaky(f: Any, header: dict[str, Any]) -> Any:
        if header["key"] == key(1):
            raise MemoryError
        return real(f, header)

    monkeypatch.setattr(cache_module, "read_entry", flaky)
    with caplog.at_level(logging.WARNING, logger="edgevlm.pipeline.cache"):
        cache = VisionCache(directory=tmp_path, model_fingerprint=FP)
    assert key(0) in cache and key(1) not in cache
    assert _warnings(caplog) == [
        f"vision-cache: skipping {tmp_path / (key(1) + FILE_SUFFIX)}: MemoryError (no message)"]


def test_reloaded_arrays_are_read_only(tmp_path: Path) -> None:
    VisionCache(directory=tmp_path, model_fingerprint=FP).put(key(0), feats(0, k=1))
    got = VisionCache(directory=tmp_path, model_fingerprint=FP).get(key(0))
    assert got is not None and got.deepstack is not None and same(got, feats(0, k=1))
    with pytest.raises(ValueError, match="read-only"):
        got.embeddings[0, 0] = 0.0


def test_a_write_never_follows_a_symlink_planted_at_the_temporary_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import edgevlm.pipeline.cache_files as cache_files

    directory, victim = tmp_path / "cache", tmp_path / "victim"
    victim.write_bytes(b"not yours")
    cache = VisionCache(directory=directory, model_fingerprint=FP)
    names = iter([".planted.tmp", ".fresh.tmp"])
    monkeypatch.setattr(cache_files, "temporary_name", lambda key: next(names))
    (directory / ".planted.tmp").symlink_to(victim)
    cache.put(key(0), feats(0))
    assert victim.read_bytes() == b"not yours"
    assert (directory / ".planted.tmp").is_symlink()
    assert same(VisionCache(directory=directory, model_fingerprint=FP).get(key(0)), feats(0))


def test_a_write_replaces_a_symlink_planted_at_the_entry_name(tmp_path: Path) -> None:
    directory, victim = tmp_path / "cache", tmp_path / "victim"
    victim.write_bytes(b"not yours")
    cache = VisionCache(directory=directory, model_fingerprint=FP)
    entry = directory / (key(0) + FILE_SUFFIX)
    entry.symlink_to(victim)
    cache.put(key(0), feats(0))
    assert victim.read_bytes() == b"not yours" and not entry.is_symlink()
    assert same(VisionCache(directory=directory, model_fingerprint=FP).get(key(0)), feats(0))


def test_a_hit_does_not_touch_the_target_of_a_symlink(tmp_path: Path) -> None:
    directory, victim = tmp_path / "cache", tmp_path / "victim"
    victim.write_bytes(b"not yours")
    os.utime(victim, ns=(10**9, 10**9))
    cache = VisionCache(directory=directory, model_fingerprint=FP)
    cache.put(key(0), feats(0))
    entry = directory / (key(0) + FILE_SUFFIX)
    entry.unlink()
    entry.symlink_to(victim)
    assert cache.get(key(0)) is not None
    assert victim.stat().st_mtime_ns == 10**9


def test_a_symlinked_cache_directory_is_used(tmp_path: Path) -> None:
    """The directory itself may be a symlink (the operator chose it); its entries may not."""
    real, link = tmp_path / "real", tmp_path / "link"
    real.mkdir()
    link.symlink_to(real, target_is_directory=True)
    VisionCache(directory=link, model_fingerprint=FP).put(key(0), feats(0))
    assert (real / (key(0) + FILE_SUFFIX)).is_file()
    assert same(VisionCache(directory=link, model_fingerprint=FP).get(key(0)), feats(0))
