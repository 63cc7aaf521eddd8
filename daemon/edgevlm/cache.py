"""The vision-feature cache: an image seen before skips the ViT (seed 000's cache, made safe).

Keys are BLAKE2b-128 over a domain/version tag, the model fingerprint, the preprocessing
parameters (family, min/max pixels) and the raw media bytes, each field length-prefixed so no
two different inputs serialize alike (for a clip every frame is length-prefixed, so moving a
frame boundary changes the key). Why not the seed's 128-bit FNV-1a: FNV is a fast checksum
without collision resistance (its multiply-xor steps can be solved for two inputs with one
key), and a colliding key serves one client the features of another client's image. That
failure is published: vLLM's multimodal hasher let different images share a cache key and so
a cached result (PYSEC-2025-43 / CVE-2025-46722 / GHSA-c65p-x677-fgj6; there the serialization
left out the image size, the other half of what this key gets right). BLAKE2b is a
cryptographic hash at several hundred MB/s in hashlib; 128 bits fit ``image_ref``.

Entries are :class:`VisionFeatures` in an LRU bounded by the bytes of their arrays, behind one
lock that is never held during file I/O. With a directory, each entry is also a file
``<key>.evc`` (header + raw float32 arrays) written atomically; a restart reloads them, most
recently used first, skipping corrupt, truncated and foreign files with a warning. Persistence
is best effort: an unwritable directory or a failed write leaves the cache working in memory.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import struct
import tempfile
import threading
import zlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .features import VisionFeatures

__all__ = ["CacheStats", "VisionCache", "cache_key"]

logger = logging.getLogger(__name__)

KEY_TAG = b"edgevlm/vision-cache/v1\0"
FILE_MAGIC = b"EVLMCACH"
FILE_VERSION = 1
FILE_SUFFIX = ".evc"
_PREFIX = struct.Struct("<8sHI")  # magic, format version, header JSON length
_MAX_HEADER = 1 << 16
_KEY = re.compile(r"\A[0-9a-f]{32}\Z")
_F32 = np.dtype("<f4")


def cache_key(model_fingerprint: str, family: str, min_pixels: int, max_pixels: int,
              media: bytes | Sequence[bytes]) -> str:
    """32 hex digits naming the features of ``media`` under this model and preprocessing.

    ``media`` is one image's raw (still encoded) bytes, or a clip's frames; a one-frame clip
    and the same single image get different keys (they are preprocessed differently).
    """
    h = hashlib.blake2b(KEY_TAG, digest_size=16)
    for text in (model_fingerprint, family):
        _update_framed(h, text.encode("utf-8"))
    for value in (min_pixels, max_pixels):
        if not 0 <= value < 2**64:
            raise ValueError(f"pixel bounds must be in 0..2**64-1, got {value}")
        h.update(value.to_bytes(8, "little"))
    if isinstance(media, bytes | bytearray | memoryview):
        h.update(b"I")
        _update_framed(h, media)
    else:
        h.update(b"V" + len(media).to_bytes(8, "little"))
        for frame in media:
            _update_framed(h, frame)
    return h.hexdigest()


def _update_framed(h: hashlib.blake2b, data: bytes | bytearray | memoryview) -> None:
    h.update(memoryview(data).nbytes.to_bytes(8, "little"))
    h.update(data)


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
            with contextlib.suppress(OSError):
                os.utime(self._path(key))
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
            fd, tmp = tempfile.mkstemp(dir=self._directory, prefix=f".{key}.", suffix=".tmp")
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
        files: list[tuple[float, str, Path]] = []
        for item in names:
            path = Path(item.path)
            if item.name.startswith(".") and item.name.endswith(".tmp"):
                with contextlib.suppress(OSError):  # left by a write cut short
                    path.unlink()
            elif item.name.endswith(FILE_SUFFIX):
                with contextlib.suppress(OSError):
                    files.append((item.stat().st_mtime, item.name, path))
        files.sort(reverse=True)  # most recently used first
        loaded: list[tuple[str, _Entry]] = []
        budget, full, dropped = self._max_bytes, False, []
        for _, _, path in files:
            key = path.name[: -len(FILE_SUFFIX)]
            try:
                if not _KEY.match(key):
                    raise _BadFileError("the file name is not a cache key")
                header, payload_offset = _read_header(path, key, self._fingerprint)
                size = int(header["payload_bytes"])
                if size > budget:  # as LRU would: it and everything older are evicted,
                    full = full or size <= self._max_bytes  # except one too big for any cache
                if full or size > budget:
                    dropped.append(key)
                    continue
                entry = _read_entry(path, header, payload_offset)
            except _BadFileError as exc:
                logger.warning("vision-cache: skipping %s: %s", path, exc)
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


def _read_header(path: Path, key: str, fingerprint: str) -> tuple[dict[str, Any], int]:
    """The JSON header of a cache file and the payload's offset; checks all but the payload."""
    try:
        with path.open("rb") as f:
            prefix = f.read(_PREFIX.size)
            magic, version, head_len = _PREFIX.unpack(prefix.ljust(_PREFIX.size, b"\0"))
            head = f.read(min(head_len, _MAX_HEADER))
    except OSError as exc:
        raise _BadFileError(f"cannot read ({exc})") from None
    if magic != FILE_MAGIC:
        raise _BadFileError("not a vision-cache file (bad magic)" if len(prefix) == _PREFIX.size
                            else f"truncated: {len(prefix)} bytes, no header")
    if version != FILE_VERSION:
        raise _BadFileError(f"format version {version}, this daemon reads {FILE_VERSION}")
    if len(head) != head_len:
        raise _BadFileError(f"truncated or corrupt header ({len(head)} of {head_len} bytes)")
    try:
        header = json.loads(head)
        if header["key"] != key:
            raise _BadFileError(f"header is for key {header['key']!r}, not the file name's")
        if header["model"] != fingerprint:
            raise _BadFileError(f"foreign: written for model {header['model']!r}, this cache "
                                f"is for {fingerprint!r}")
        if header["dtype"] != "f32" or int(header["payload_bytes"]) < 0:
            raise ValueError(f"dtype {header['dtype']!r}")
    except (ValueError, KeyError, TypeError) as exc:
        raise _BadFileError(f"corrupt header ({type(exc).__name__}: {exc})") from None
    return header, _PREFIX.size + head_len


def _read_entry(path: Path, header: dict[str, Any], offset: int) -> _Entry:
    want = int(header["payload_bytes"])
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise _BadFileError(f"cannot read ({exc})") from None
    if len(data) != offset + want:
        raise _BadFileError(f"truncated or padded: {len(data)} bytes, want {offset + want}")
    if zlib.crc32(memoryview(data)[offset:]) != header["crc32"]:
        raise _BadFileError("corrupt: payload checksum mismatch")
    try:
        shapes = [tuple(int(x) for x in header["embeddings"])]
        if header["deepstack"] is not None:
            shapes.append(tuple(int(x) for x in header["deepstack"]))
        arrays = []
        for shape in shapes:
            count = int(np.prod(shape))
            arrays.append(np.frombuffer(data, _F32, count, offset).reshape(shape)
                          .astype(np.float32, copy=False))
            offset += count * 4
        if offset != len(data):
            raise ValueError(f"shapes {shapes} do not fill the {want}-byte payload")
        gt, gh, gw = (int(g) for g in header["grid"])
        features = VisionFeatures(arrays[0], arrays[1] if len(arrays) > 1 else None,
                                  (gt, gh, gw))
        size = header["source_size"]
        source = None if size is None else (int(size[0]), int(size[1]))
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise _BadFileError(f"corrupt header ({exc})") from None
    return _Entry(features, source)
