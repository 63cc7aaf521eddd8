"""The vision-feature cache's files: ``<key>.evc`` (header + raw float32 arrays).

The format: a prefix (magic ``EVLMCACH``, the format version, the header's length), a JSON
header (key, model fingerprint, grid, shapes, source size, payload bytes, CRC-32) and the
payload, the arrays as little-endian float32. :class:`edgevlm.pipeline.cache.VisionCache`
writes one per entry (:func:`write_entry`) and reads them back at start (:func:`read_header`,
:func:`read_entry`); a file it cannot use raises :class:`BadFileError`, whose message says why.

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
import math
import os
import stat
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..wire.features import VisionFeatures

FILE_MAGIC = b"EVLMCACH"
FILE_VERSION = 1
FILE_SUFFIX = ".evc"
_PREFIX = struct.Struct("<8sHI")  # magic, format version, header JSON length
_MAX_HEADER = 1 << 16
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_CREATE_TRIES = 16
_F32 = np.dtype("<f4")


class BadFileError(Exception):
    """A cache file that is corrupt, truncated or foreign; the message says which."""


@dataclass(frozen=True)
class Entry:
    """One cached image's (or clip's) features; ``source_size`` only names it in a log line."""

    features: VisionFeatures
    source_size: tuple[int, int] | None


def write_entry(directory: Path, key: str, fingerprint: str, entry: Entry) -> None:
    """Write ``entry`` as ``<directory>/<key>.evc``, atomically (a temporary file, fsynced,
    renamed over the entry); raises OSError (the temporary file is removed then)."""
    arrays = [entry.features.embeddings]
    if entry.features.deepstack is not None:
        arrays.append(entry.features.deepstack)
    crc = 0
    for array in arrays:
        crc = zlib.crc32(_le_bytes(array), crc)
    header = {"key": key, "model": fingerprint, "grid": list(entry.features.grid),
              "dtype": "f32", "embeddings": list(entry.features.embeddings.shape),
              "deepstack": list(arrays[1].shape) if len(arrays) > 1 else None,
              "source_size": entry.source_size, "payload_bytes": entry.features.nbytes,
              "crc32": crc}
    head = json.dumps(header, separators=(",", ":")).encode()
    final = directory / (key + FILE_SUFFIX)
    tmp: str | None = None
    try:
        fd, tmp = create_temporary(directory, key)
        with os.fdopen(fd, "wb") as f:
            f.write(_PREFIX.pack(FILE_MAGIC, FILE_VERSION, len(head)))
            f.write(head)
            for array in arrays:
                f.write(_le_bytes(array))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
        tmp = None
        fsync_directory(directory)
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _le_bytes(array: np.ndarray[Any, np.dtype[np.float32]]) -> memoryview:
    return np.ascontiguousarray(array, dtype=_F32).data.cast("B")


def fsync_directory(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def temporary_name(key: str) -> str:
    """A fresh name for the temporary file of a write of ``key`` (a stale one is removed
    at the next start: a dot name ending in ``.tmp``)."""
    return f".{key}.{os.urandom(8).hex()}.tmp"


def create_temporary(directory: Path, key: str) -> tuple[int, str]:
    """Create and open a new temporary file in ``directory``: ``O_EXCL | O_NOFOLLOW``, so a
    file or symlink planted at the name is never written through (another name is tried)."""
    for _ in range(_CREATE_TRIES):
        path = os.path.join(directory, temporary_name(key))
        try:
            return os.open(path, _CREATE_FLAGS, 0o600), path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name in {directory} after {_CREATE_TRIES} tries")


def _size_bound(max_bytes: int) -> int:
    """The largest file an entry of a ``max_bytes`` cache can be."""
    return _PREFIX.size + _MAX_HEADER + max_bytes


def check_entry_stat(st: os.stat_result, max_bytes: int) -> None:
    """A regular file no larger than any entry can be (from ``lstat``, before opening)."""
    if not stat.S_ISREG(st.st_mode):
        kind = {stat.S_IFLNK: "a symlink", stat.S_IFIFO: "a FIFO", stat.S_IFDIR: "a directory",
                stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
                stat.S_IFSOCK: "a socket"}.get(stat.S_IFMT(st.st_mode), "an unknown file type")
        raise BadFileError(f"{kind}, not a regular file (not opened)")
    if st.st_size > _size_bound(max_bytes):
        raise BadFileError(f"{st.st_size} bytes, larger than any entry can be "
                           f"(cache.max_bytes {max_bytes} + a {_PREFIX.size + _MAX_HEADER}-byte "
                           f"header); not read")


@contextlib.contextmanager
def open_entry(path: Path, st: os.stat_result,
               max_bytes: int) -> Iterator[tuple[io.FileIO, int]]:
    """The file (unbuffered) and its size, checked again on the open file: the name may have
    been replaced since ``lstat`` (``O_NOFOLLOW``: a symlink fails; ``O_NONBLOCK``: a FIFO does
    not block the open; then it must still be the same regular file within the bound)."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        raise BadFileError(f"cannot open ({exc})") from None
    with os.fdopen(fd, "rb", buffering=0) as f:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            raise BadFileError("replaced while being read")
        check_entry_stat(now, max_bytes)
        assert isinstance(f, io.FileIO)
        yield f, now.st_size


def _read_exact(f: io.FileIO, n: int, what: str) -> bytearray:
    """Exactly ``n`` bytes (``n`` checked against the file's size by the caller)."""
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        step = f.readinto(view[got:])
        if not step:
            raise BadFileError(f"truncated: {what} ends after {got} of {n} bytes")
        got += step
    return buf


def read_header(f: io.FileIO, file_size: int, key: str, fingerprint: str) -> dict[str, Any]:
    """The JSON header of a cache file (``f`` is then at the payload); checks all but the
    payload, whose size must be what is left of the file."""
    if file_size < _PREFIX.size:
        raise BadFileError(f"truncated: {file_size} bytes, no header")
    prefix = _read_exact(f, _PREFIX.size, "the prefix")
    magic, version, head_len = _PREFIX.unpack(prefix)
    if magic != FILE_MAGIC:
        raise BadFileError("not a vision-cache file (bad magic)")
    if version != FILE_VERSION:
        raise BadFileError(f"format version {version}, this daemon reads {FILE_VERSION}")
    if head_len > _MAX_HEADER or _PREFIX.size + head_len > file_size:
        raise BadFileError(f"truncated or corrupt header ({head_len} bytes claimed, the file "
                           f"has {file_size})")
    head = _read_exact(f, head_len, "the header")
    try:
        header = json.loads(head)
        if not isinstance(header, dict):
            raise TypeError(f"a JSON {type(header).__name__}, not an object")
        if header["key"] != key:
            raise BadFileError(f"header is for key {header['key']!r}, not the file name's")
        if header["model"] != fingerprint:
            raise BadFileError(f"foreign: written for model {header['model']!r}, this cache "
                               f"is for {fingerprint!r}")
        want = header["payload_bytes"]
        if header["dtype"] != "f32" or type(want) is not int or want < 0:
            raise ValueError(f"dtype {header['dtype']!r}, payload_bytes {want!r}")
    except (ValueError, KeyError, TypeError, RecursionError, OverflowError) as exc:
        raise BadFileError(f"corrupt header ({type(exc).__name__}: {exc})") from None
    if _PREFIX.size + head_len + want != file_size:
        raise BadFileError(f"truncated or padded: {file_size} bytes, the header says "
                           f"{_PREFIX.size + head_len + want}")
    return header


def read_entry(f: io.FileIO, header: dict[str, Any]) -> Entry:
    """The payload that follows the header (its size already matches the file's and is
    within the bound)."""
    want = int(header["payload_bytes"])
    data = _read_exact(f, want, "the payload")
    if f.read(1):
        raise BadFileError("padded: the file grew while being read")
    if zlib.crc32(data) != header["crc32"]:
        raise BadFileError("corrupt: payload checksum mismatch")
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
        raise BadFileError(f"corrupt header ({exc})") from None
    return Entry(features, source)
