"""The vision-feature cache: an image seen before skips the ViT (seed 000's cache, made safe).

Keys come from :func:`edgevlm.vision.cache_key.cache_key` (why BLAKE2b: there).

Entries are :class:`VisionFeatures` in an LRU bounded by the bytes of their arrays, behind one
lock that is never held during file I/O. With a directory, each entry is also a file
``<key>.evc`` (header + raw float32 arrays) written atomically; a restart reloads them, most
recently used first, skipping corrupt, truncated and foreign files with a warning. Persistence
is best effort: an unwritable directory or a failed write leaves the cache working in memory.
The file format, and why nothing in the directory can stop the daemon from starting:
:mod:`edgevlm.pipeline.cache_files`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from ..wire.features import VisionFeatures
from .cache_files import (
    FILE_SUFFIX,
    BadFileError,
    Entry,
    check_entry_stat,
    open_entry,
    read_entry,
    read_header,
    write_entry,
)

__all__ = ["CacheStats", "VisionCache"]

logger = logging.getLogger(__name__)

_KEY = re.compile(r"\A[0-9a-f]{32}\Z")


@dataclass(frozen=True)
class CacheStats:
    hits: int
    misses: int
    evictions: int
    bytes: int
    entries: int
    max_bytes: int

    @property
    def hit_rate(self) -> float:
        """Hits over lookups (0.0 before the first lookup)."""
        lookups = self.hits + self.misses
        return self.hits / lookups if lookups else 0.0


class VisionCache:
    """LRU of vision features bounded in bytes, thread-safe, optionally persisted.

    ``max_bytes`` bounds the arrays' bytes (an entry larger than that is never stored).
    ``directory``: persist entries there and reload them at start; files of another model
    fingerprint are left alone. ``clear`` drops entries (and their files) but keeps the
    hit/miss/eviction counters, which count over the life of the instance.
    """

    def __init__(self, max_bytes: int = 512 * 2**20,
                 directory: str | os.PathLike[str] | None = None,
                 model_fingerprint: str = "") -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self._max_bytes = max_bytes
        self._fingerprint = model_fingerprint
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, Entry] = OrderedDict()  # LRU first, MRU last
        self._bytes = self._hits = self._misses = self._evictions = 0
        self._directory: Path | None = None
        if directory is not None:
            self._directory = self._open_directory(Path(directory))
        if self._directory is not None:
            self._reload()

    # ------------------------------------------------------------------ lookups

    def get(self, key: str) -> VisionFeatures | None:
        """The features under ``key`` (now most recently used), or None; counts a hit or miss."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self._misses += 1
                return None
            self._entries.move_to_end(key)
            self._hits += 1
        n = entry.features.n_tokens
        if entry.source_size is not None:
            logger.info("vision-cache hit (%dx%d, %d vis tokens, skip ViT)",
                        entry.source_size[0], entry.source_size[1], n)
        else:
            logger.info("vision-cache hit (%d vis tokens, skip ViT)", n)
        if self._directory is not None:  # the file's mtime is the LRU order after a restart
            with contextlib.suppress(OSError, NotImplementedError):
                os.utime(self._path(key), follow_symlinks=False)
        return entry.features

    def peek(self, key: str) -> VisionFeatures | None:
        """The features under ``key`` without counting or reordering (for token budgets)."""
        with self._lock:
            entry = self._entries.get(key)
        return None if entry is None else entry.features

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._entries

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(hits=self._hits, misses=self._misses, evictions=self._evictions,
                              bytes=self._bytes, entries=len(self._entries),
                              max_bytes=self._max_bytes)

    # ------------------------------------------------------------------ updates

    def put(self, key: str, features: VisionFeatures,
            source_size: tuple[int, int] | None = None) -> None:
        """Store ``features`` as most recently used, evicting LRU entries to fit ``max_bytes``.

        ``source_size`` (width, height) of the source image is only used in the hit log line.
        """
        if not _KEY.match(key):
            raise ValueError(f"cache keys are 32 lowercase hex digits (cache_key), got {key!r}")
        size = features.nbytes
        if size > self._max_bytes:
            logger.debug("vision-cache: %d-byte entry exceeds max_bytes=%d, not stored",
                         size, self._max_bytes)
            return
        entry = Entry(features, source_size)
        with self._lock:
            evicted = self._insert(key, entry)
        self._delete_files(evicted)
        if self._directory is not None:
            self._persist(key, entry)

    def clear(self) -> None:
        """Drop every entry and its file; counters are kept."""
        with self._lock:
            keys = list(self._entries)
            self._entries.clear()
            self._bytes = 0
        self._delete_files(keys)

    def _insert(self, key: str, entry: Entry) -> list[str]:
        """Insert under the lock; returns the evicted keys (their files go outside the lock)."""
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old.features.nbytes
        self._entries[key] = entry
        self._bytes += entry.features.nbytes
        evicted: list[str] = []
        while self._bytes > self._max_bytes:
            lru_key, lru = self._entries.popitem(last=False)
            self._bytes -= lru.features.nbytes
            self._evictions += 1
            evicted.append(lru_key)
        return evicted

    # ------------------------------------------------------------------ persistence

    def _open_directory(self, directory: Path) -> Path | None:
        try:
            directory.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=directory, prefix=".probe.", suffix=".tmp"):
                pass
        except OSError as exc:
            logger.warning("vision-cache: directory %s is not usable (%s); caching in memory "
                           "only", directory, exc)
            return None
        return directory

    def _path(self, key: str) -> Path:
        return Path(self._directory or ".") / (key + FILE_SUFFIX)

    def _delete_files(self, keys: list[str]) -> None:
        for key in keys if self._directory is not None else ():
            try:
                self._path(key).unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                logger.warning("vision-cache: cannot delete %s (%s)", self._path(key), exc)

    def _persist(self, key: str, entry: Entry) -> None:
        assert self._directory is not None
        try:
            write_entry(self._directory, key, self._fingerprint, entry)
        except OSError as exc:
            logger.warning("vision-cache: cannot write %s (%s); entry kept in memory only",
                           self._path(key), exc)
        with self._lock:  # evicted (or cleared) while we were writing: do not leave the file
            gone = key not in self._entries
        if gone:
            self._delete_files([key])

    def _reload(self) -> None:
        assert self._directory is not None
        try:
            names = list(os.scandir(self._directory))
        except OSError as exc:
            logger.warning("vision-cache: cannot list %s (%s)", self._directory, exc)
            return
        files: list[tuple[float, str, Path, os.stat_result]] = []
        for item in names:
            path = Path(item.path)
            if item.name.startswith(".") and item.name.endswith(".tmp"):
                with contextlib.suppress(OSError):  # left by a write cut short (unlink
                    path.unlink()  # never follows a symlink; a directory stays)
            elif item.name.endswith(FILE_SUFFIX):
                try:
                    st = item.stat(follow_symlinks=False)  # lstat: the entry, not a target
                except OSError as exc:
                    logger.warning("vision-cache: skipping %s: cannot stat (%s)", path, exc)
                    continue
                files.append((st.st_mtime, item.name, path, st))
        files.sort(key=lambda f: f[:2], reverse=True)  # most recently used first
        loaded: list[tuple[str, Entry]] = []
        budget, full, dropped = self._max_bytes, False, []
        for _, _, path, st in files:
            key = path.name[: -len(FILE_SUFFIX)]
            try:
                if not _KEY.match(key):
                    raise BadFileError("the file name is not a cache key")
                check_entry_stat(st, self._max_bytes)  # before anything is opened or read
                with open_entry(path, st, self._max_bytes) as (f, file_size):
                    header = read_header(f, file_size, key, self._fingerprint)
                    size = int(header["payload_bytes"])
                    # as LRU would: it and everything older are evicted, except one too big
                    # for any cache
                    if size > budget:
                        full = full or size <= self._max_bytes
                    if full or size > budget:
                        dropped.append(key)
                        continue
                    entry = read_entry(f, header)
            except BadFileError as exc:
                logger.warning("vision-cache: skipping %s: %s", path, exc)
                continue
            except Exception as exc:  # MemoryError, OSError, ...: no file stops the start
                logger.warning("vision-cache: skipping %s: %s", path, _describe_error(exc))
                continue
            budget -= size
            loaded.append((key, entry))
        with self._lock:
            for key, entry in reversed(loaded):  # oldest first, so the newest ends up MRU
                self._entries[key] = entry
                self._bytes += entry.features.nbytes
        self._delete_files(dropped)
        if loaded or dropped:
            logger.info("vision-cache: reloaded %d entries (%d bytes) from %s, dropped %d over "
                        "max_bytes", len(loaded), self._bytes, self._directory, len(dropped))


def _describe_error(exc: BaseException) -> str:
    """``exc`` for a log line, never empty: ``MemoryError (no message)``."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else f"{type(exc).__name__} (no message)"
