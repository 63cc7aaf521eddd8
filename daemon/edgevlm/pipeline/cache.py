"""The vision-feature cache: an image seen before skips the ViT (seed 000's cache, made safe).

Keys come from :func:`edgevlm.vision.cache_key.cache_key` (why BLAKE2b: there).

Entries are :class:`VisionFeatures` in an LRU bounded by the bytes of their arrays, behind one
lock that is never held during file I/O. With a directory, each entry is also a file
``<key>.evc`` (header + raw float32 arrays) written atomically; a restart reloads them, most
recently used first, skipping corrupt, truncated and foreign files with a warning. Persistence
is best effort: an unwritable directory or a failed write leaves the cache working in memory.

Nothing in the directory can stop the daemon from starting (issue 20, finding 9): an entry's
size is checked (``lstat``) before it is opened, and one larger than any entry can be
(``max_bytes`` plus the header bound) is skipped; only regular files are opened, with
``O_NOFOLLOW | O_NONBLOCK`` (a symlink is never followed, a FIFO never blocks); a size field of
the file is trusted only once it matches the file's real size; any error of one entry is a
warning that names the file. The directory itself may be a symlink (the operator chose it);
the entries inside it may not. Writes go to a fresh temporary name opened with
``O_CREAT | O_EXCL | O_NOFOLLOW`` (never through a planted symlink), then renamed over the entry.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import os
import re
import stat
import struct
import tempfile
import threading
import zlib
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..wire.features import VisionFeatures

__all__ = ["CacheStats", "VisionCache"]

logger = logging.getLogger(__name__)

FILE_MAGIC = b"EVLMCACH"
FILE_VERSION = 1
FILE_SUFFIX = ".evc"
_PREFIX = struct.Struct("<8sHI")  # magic, format version, header JSON length
_MAX_HEADER = 1 << 16
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_CREATE_TRIES = 16
_KEY = re.compile(r"\A[0-9a-f]{32}\Z")
_F32 = np.dtype("<f4")


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


@dataclass(frozen=True)
class _Entry:
    features: VisionFeatures
    source_size: tuple[int, int] | None


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
        self._entries: OrderedDict[str, _Entry] = OrderedDict()  # LRU first, MRU last
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
        entry = _Entry(features, source_size)
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

    def _insert(self, key: str, entry: _Entry) -> list[str]:
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

    def _persist(self, key: str, entry: _Entry) -> None:
        assert self._directory is not None
        arrays = [entry.features.embeddings]
        if entry.features.deepstack is not None:
            arrays.append(entry.features.deepstack)
        crc = 0
        for array in arrays:
            crc = zlib.crc32(_le_bytes(array), crc)
        header = {"key": key, "model": self._fingerprint, "grid": list(entry.features.grid),
                  "dtype": "f32", "embeddings": list(entry.features.embeddings.shape),
                  "deepstack": list(arrays[1].shape) if len(arrays) > 1 else None,
                  "source_size": entry.source_size, "payload_bytes": entry.features.nbytes,
                  "crc32": crc}
        head = json.dumps(header, separators=(",", ":")).encode()
        final = self._path(key)
        tmp: str | None = None
        try:
            fd, tmp = _create_temporary(self._directory, key)
            with os.fdopen(fd, "wb") as f:
                f.write(_PREFIX.pack(FILE_MAGIC, FILE_VERSION, len(head)))
                f.write(head)
                for array in arrays:
                    f.write(_le_bytes(array))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)
            tmp = None
            _fsync_directory(self._directory)
        except OSError as exc:
            logger.warning("vision-cache: cannot write %s (%s); entry kept in memory only",
                           final, exc)
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
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
        loaded: list[tuple[str, _Entry]] = []
        budget, full, dropped = self._max_bytes, False, []
        for _, _, path, st in files:
            key = path.name[: -len(FILE_SUFFIX)]
            try:
                if not _KEY.match(key):
                    raise _BadFileError("the file name is not a cache key")
                _check_entry_stat(st, self._max_bytes)  # before anything is opened or read
                with _open_entry(path, st, self._max_bytes) as (f, file_size):
                    header = _read_header(f, file_size, key, self._fingerprint)
                    size = int(header["payload_bytes"])
                    # as LRU would: it and everything older are evicted, except one too big
                    # for any cache
                    if size > budget:
                        full = full or size <= self._max_bytes
                    if full or size > budget:
                        dropped.append(key)
                        continue
                    entry = _read_entry(f, header)
            except _BadFileError as exc:
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


class _BadFileError(Exception):
    """A cache file that is corrupt, truncated or foreign; the message says which."""


def _le_bytes(array: np.ndarray[Any, np.dtype[np.float32]]) -> memoryview:
    return np.ascontiguousarray(array, dtype=_F32).data.cast("B")


def _fsync_directory(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _describe_error(exc: BaseException) -> str:
    """``exc`` for a log line, never empty: ``MemoryError (no message)``."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else f"{type(exc).__name__} (no message)"


def _temporary_name(key: str) -> str:
    """A fresh name for the temporary file of a write of ``key`` (a stale one is removed
    at the next start: a dot name ending in ``.tmp``)."""
    return f".{key}.{os.urandom(8).hex()}.tmp"


def _create_temporary(directory: Path, key: str) -> tuple[int, str]:
    """Create and open a new temporary file in ``directory``: ``O_EXCL | O_NOFOLLOW``, so a
    file or symlink planted at the name is never written through (another name is tried)."""
    for _ in range(_CREATE_TRIES):
        path = os.path.join(directory, _temporary_name(key))
        try:
            return os.open(path, _CREATE_FLAGS, 0o600), path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name in {directory} after {_CREATE_TRIES} tries")


def _size_bound(max_bytes: int) -> int:
    """The largest file an entry of a ``max_bytes`` cache can be."""
    return _PREFIX.size + _MAX_HEADER + max_bytes


def _check_entry_stat(st: os.stat_result, max_bytes: int) -> None:
    """A regular file no larger than any entry can be (from ``lstat``, before opening)."""
    if not stat.S_ISREG(st.st_mode):
        kind = {stat.S_IFLNK: "a symlink", stat.S_IFIFO: "a FIFO", stat.S_IFDIR: "a directory",
                stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
                stat.S_IFSOCK: "a socket"}.get(stat.S_IFMT(st.st_mode), "an unknown file type")
        raise _BadFileError(f"{kind}, not a regular file (not opened)")
    if st.st_size > _size_bound(max_bytes):
        raise _BadFileError(f"{st.st_size} bytes, larger than any entry can be "
                            f"(cache.max_bytes {max_bytes} + a {_PREFIX.size + _MAX_HEADER}-byte "
                            f"header); not read")


@contextlib.contextmanager
def _open_entry(path: Path, st: os.stat_result,
                max_bytes: int) -> Iterator[tuple[io.FileIO, int]]:
    """The file (unbuffered) and its size, checked again on the open file: the name may have
    been replaced since ``lstat`` (``O_NOFOLLOW``: a symlink fails; ``O_NONBLOCK``: a FIFO does
    not block the open; then it must still be the same regular file within the bound)."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        raise _BadFileError(f"cannot open ({exc})") from None
    with os.fdopen(fd, "rb", buffering=0) as f:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            raise _BadFileError("replaced while being read")
        _check_entry_stat(now, max_bytes)
        assert isinstance(f, io.FileIO)
        yield f, now.st_size


def _read_exact(f: io.FileIO, n: int, what: str) -> bytearray:
    """Exactly ``n`` bytes (``n`` checked against the file's size by the caller)."""
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        step = f.readinto(view[got:])
        if not step:
            raise _BadFileError(f"truncated: {what} ends after {got} of {n} bytes")
        got += step
    return buf


def _read_header(f: io.FileIO, file_size: int, key: str, fingerprint: str) -> dict[str, Any]:
    """The JSON header of a cache file (``f`` is then at the payload); checks all but the
    payload, whose size must be what is left of the file."""
    if file_size < _PREFIX.size:
        raise _BadFileError(f"truncated: {file_size} bytes, no header")
    prefix = _read_exact(f, _PREFIX.size, "the prefix")
    magic, version, head_len = _PREFIX.unpack(prefix)
    if magic != FILE_MAGIC:
        raise _BadFileError("not a vision-cache file (bad magic)")
    if version != FILE_VERSION:
        raise _BadFileError(f"format version {version}, this daemon reads {FILE_VERSION}")
    if head_len > _MAX_HEADER or _PREFIX.size + head_len > file_size:
        raise _BadFileError(f"truncated or corrupt header ({head_len} bytes claimed, the file "
                            f"has {file_size})")
    head = _read_exact(f, head_len, "the header")
    try:
        header = json.loads(head)
        if not isinstance(header, dict):
            raise TypeError(f"a JSON {type(header).__name__}, not an object")
        if header["key"] != key:
            raise _BadFileError(f"header is for key {header['key']!r}, not the file name's")
        if header["model"] != fingerprint:
            raise _BadFileError(f"foreign: written for model {header['model']!r}, this cache "
                                f"is for {fingerprint!r}")
        want = header["payload_bytes"]
        if header["dtype"] != "f32" or type(want) is not int or want < 0:
            raise ValueError(f"dtype {header['dtype']!r}, payload_bytes {want!r}")
    except (ValueError, KeyError, TypeError, RecursionError, OverflowError) as exc:
        raise _BadFileError(f"corrupt header ({type(exc).__name__}: {exc})") from None
    if _PREFIX.size + head_len + want != file_size:
        raise _BadFileError(f"truncated or padded: {file_size} bytes, the header says "
                            f"{_PREFIX.size + head_len + want}")
    return header


def _read_entry(f: io.FileIO, header: dict[str, Any]) -> _Entry:
    """The payload that follows the header (its size already matches the file's and is
    within the bound)."""
    want = int(header["payload_bytes"])
    data = _read_exact(f, want, "the payload")
    if f.read(1):
        raise _BadFileError("padded: the file grew while being read")
    if zlib.crc32(data) != header["crc32"]:
        raise _BadFileError("corrupt: payload checksum mismatch")
    try:
        shapes = [tuple(int(x) for x in header["embeddings"])]
        if header["deepstack"] is not None:
            shapes.append(tuple(int(x) for x in header["deepstack"]))
        arrays = []
        offset = 0  # in the payload
        for shape in shapes:
            if any(x < 0 for x in shape):
                raise ValueError(f"negative dimension in {shape}")
            count = math.prod(shape)
            if offset + count * 4 > want:
                raise ValueError(f"shapes {shapes} overrun the {want}-byte payload")
            arrays.append(np.frombuffer(data, _F32, count, offset).reshape(shape)
                          .astype(np.float32, copy=False))
            offset += count * 4
        if offset != want:
            raise ValueError(f"shapes {shapes} do not fill the {want}-byte payload")
        gt, gh, gw = (int(g) for g in header["grid"])
        features = VisionFeatures(arrays[0], arrays[1] if len(arrays) > 1 else None,
                                  (gt, gh, gw))
        size = header["source_size"]
        source = None if size is None else (int(size[0]), int(size[1]))
    except (ValueError, KeyError, TypeError, IndexError, OverflowError) as exc:
        raise _BadFileError(f"corrupt header ({exc})") from None
    return _Entry(features, source)
