"""Safetensors checkpoints read through ``mmap``, a row block at a time, without torch.

A ``.safetensors`` file is an 8-byte little-endian header length, a JSON header
``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}`` and the raw
row-major tensor bytes (offsets relative to the end of the header). A sharded checkpoint adds
``model.safetensors.index.json`` whose ``weight_map`` names the shard of every tensor.

Memory stays flat while streaming: callers take row blocks (:meth:`SafetensorsCheckpoint.rows`)
and hand the pages back with :meth:`SafetensorsCheckpoint.release`, which drops them from this
process (``MADV_DONTNEED``; they stay in the page cache, not in the resident set).
"""

from __future__ import annotations

import json
import logging
import mmap
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from .errors import ConvertInputError

logger = logging.getLogger(__name__)

# Source dtypes edgevlm converts. BF16 is viewed as uint16 and widened in :func:`to_float32`.
SOURCE_DTYPES: dict[str, np.dtype[Any]] = {
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),
}
INDEX_FILE = "model.safetensors.index.json"
_MAX_HEADER_BYTES = 256 * 1024 * 1024
_PAGE = mmap.PAGESIZE


@dataclass(frozen=True)
class TensorRecord:
    """Where one tensor's bytes are: shard, absolute byte offset, dtype and shape."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    shard: int
    offset: int
    nbytes: int

    @property
    def n_rows(self) -> int:
        """Rows along the first dimension (1 for a 0-d or 1-d tensor)."""
        return self.shape[0] if len(self.shape) > 1 else 1

    @property
    def row_elements(self) -> int:
        """Elements per row: the product of every dimension after the first."""
        if len(self.shape) <= 1:
            return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1
        return int(np.prod(self.shape[1:], dtype=np.int64))


def to_float32(raw: npt.NDArray[Any], dtype: str) -> npt.NDArray[np.float32]:
    """Widen source values to float32 (exact for F32, F16 and BF16)."""
    if dtype == "BF16":
        return (raw.astype(np.uint32) << np.uint32(16)).view(np.float32)
    return raw.astype(np.float32, copy=False)


def _read_header(path: Path, fh: IO[bytes], size: int) -> tuple[dict[str, Any], int]:
    prefix = fh.read(8)
    if len(prefix) != 8:
        raise ConvertInputError(f"{path}: not a safetensors file (shorter than 8 bytes)")
    (header_len,) = struct.unpack("<Q", prefix)
    if header_len > _MAX_HEADER_BYTES or 8 + header_len > size:
        raise ConvertInputError(f"{path}: not a safetensors file (header length {header_len} "
                                f"does not fit a {size}-byte file)")
    try:
        header = json.loads(fh.read(header_len))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConvertInputError(f"{path}: safetensors header is not JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise ConvertInputError(f"{path}: safetensors header is not a JSON object")
    return header, 8 + header_len


def _record(path: Path, shard: int, name: str, entry: Any, data_start: int,
            size: int) -> TensorRecord:
    try:
        dtype = str(entry["dtype"])
        shape = tuple(int(d) for d in entry["shape"])
        begin, end = (int(x) for x in entry["data_offsets"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ConvertInputError(f"{path}: bad header entry for {name!r}: {entry!r}") from exc
    if dtype not in SOURCE_DTYPES:
        raise ConvertInputError(
            f"{path}: tensor {name!r} has dtype {dtype}; edgevlm convert reads F32, F16 and "
            "BF16 checkpoints (dequantise FP8/GPTQ/AWQ checkpoints first)")
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if end - begin != n * SOURCE_DTYPES[dtype].itemsize or begin < 0 or data_start + end > size:
        raise ConvertInputError(f"{path}: tensor {name!r} byte range [{begin}, {end}) does not "
                                f"match shape {list(shape)} {dtype} or the file size")
    return TensorRecord(name, dtype, shape, shard, data_start + begin, end - begin)


class SafetensorsCheckpoint:
    """All tensors of a (possibly sharded) safetensors checkpoint, memory-mapped."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths
        self._files: list[IO[bytes]] = []
        self._maps: list[mmap.mmap] = []
        self.tensors: dict[str, TensorRecord] = {}
        try:
            for shard, path in enumerate(paths):
                self._open_shard(shard, path)
        except BaseException:
            self.close()
            raise

    def _open_shard(self, shard: int, path: Path) -> None:
        try:
            fh = open(path, "rb")  # noqa: SIM115 - kept open for the mmap's lifetime
        except OSError as exc:
            raise ConvertInputError(f"cannot open {path}: {exc.strerror or exc}") from exc
        self._files.append(fh)
        size = path.stat().st_size
        header, data_start = _read_header(path, fh, size)
        self._maps.append(mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ))
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            if name in self.tensors:
                raise ConvertInputError(f"tensor {name!r} is stored twice ({path} and "
                                        f"{self.paths[self.tensors[name].shard]})")
            self.tensors[name] = _record(path, shard, name, entry, data_start, size)

    @classmethod
    def open_dir(cls, hf_dir: Path) -> SafetensorsCheckpoint:
        """Open ``model.safetensors``, or the shards an index names, or every ``*.safetensors``."""
        index = hf_dir / INDEX_FILE
        if index.is_file():
            try:
                weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
                files = sorted({str(f) for f in weight_map.values()})
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                raise ConvertInputError(f"{index}: not a safetensors index ({exc})") from exc
            missing = [f for f in files if not (hf_dir / f).is_file()]
            if missing:
                raise ConvertInputError(f"{index} names shards that are missing: "
                                        f"{', '.join(missing)}")
            ckpt = cls([hf_dir / f for f in files])
            absent = sorted(set(weight_map) - set(ckpt.tensors))
            if absent:
                ckpt.close()
                raise ConvertInputError(f"{index}: {len(absent)} tensors listed but not in the "
                                        f"shards (first: {absent[0]})")
            return ckpt
        paths = sorted(hf_dir.glob("*.safetensors"))
        if not paths:
            raise ConvertInputError(
                f"{hf_dir}: no weights (expected model.safetensors, or shards with {INDEX_FILE}); "
                "PyTorch .bin checkpoints are not supported, re-save with safe_serialization")
        return cls(paths)

    def rows(self, rec: TensorRecord, start: int, stop: int) -> npt.NDArray[Any]:
        """Rows ``[start, stop)`` of ``rec`` in its source dtype, a view into the mapping,
        shaped ``[stop - start, *shape[1:]]`` (the whole tensor for 0-d/1-d tensors)."""
        item = SOURCE_DTYPES[rec.dtype]
        row = rec.row_elements
        count = (stop - start) * row
        arr = np.frombuffer(self._maps[rec.shard], dtype=item, count=count,
                            offset=rec.offset + start * row * item.itemsize)
        if len(rec.shape) <= 1:
            return arr.reshape(rec.shape)
        return arr.reshape((stop - start, *rec.shape[1:]))

    def byte_chunks(self, rec: TensorRecord, chunk: int = 16 << 20) -> Iterator[memoryview]:
        """The tensor's raw bytes in chunks (for hashing), released as they are consumed."""
        with memoryview(self._maps[rec.shard]) as view:
            for pos in range(rec.offset, rec.offset + rec.nbytes, chunk):
                end = min(pos + chunk, rec.offset + rec.nbytes)
                with view[pos:end] as part:
                    yield part
                self._drop(rec.shard, pos, end)

    def release(self, rec: TensorRecord, start: int = 0, stop: int | None = None) -> None:
        """Drop rows ``[start, stop)`` of ``rec`` from this process's resident set."""
        row_bytes = rec.row_elements * SOURCE_DTYPES[rec.dtype].itemsize
        stop = rec.n_rows if stop is None else stop
        self._drop(rec.shard, rec.offset + start * row_bytes, rec.offset + stop * row_bytes)

    def _drop(self, shard: int, begin: int, end: int) -> None:
        advise = getattr(mmap, "MADV_DONTNEED", None)
        if advise is None:
            return
        first = (begin // _PAGE) * _PAGE
        length = end - first
        if length > 0:
            self._maps[shard].madvise(advise, first, length)

    def close(self) -> None:
        for mapping in self._maps:
            try:
                mapping.close()
            except BufferError:  # a view is still alive; the GC closes it
                logger.debug("safetensors mapping still referenced at close")
        for fh in self._files:
            fh.close()
        self._maps, self._files = [], []

    def __enter__(self) -> SafetensorsCheckpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
