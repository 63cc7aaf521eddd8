"""Vision-feature cache: key properties, LRU in bytes, threads, persistence and bad files."""

from __future__ import annotations

import json
import logging
import os
import struct
import threading
from pathlib import Path

import numpy as np
import pytest

from edgevlm.cache import FILE_SUFFIX, CacheStats, VisionCache, cache_key
from edgevlm.features import VisionFeatures

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
    with caplog.at_level(logging.INFO, logger="edgevlm.cache"):
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
    with caplog.at_level(logging.INFO, logger="edgevlm.cache"):
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
    with caplog.at_level(logging.WARNING, logger="edgevlm.cache"):
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
    with caplog.at_level(logging.WARNING, logger="edgevlm.cache"):
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
    with caplog.at_level(logging.WARNING, logger="edgevlm.cache"):
        cache.put(key(0), feats(0))
    assert any("cannot write" in m for m in caplog.messages)
    assert same(cache.get(key(0)), feats(0))
