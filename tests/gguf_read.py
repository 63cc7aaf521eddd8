"""A small, fast GGUF reader for tests on files with a full 151936-token vocabulary.

``gguf.GGUFReader`` builds numpy views for every array element, which takes half a minute on
a Qwen vocabulary (151936 tokens + ~300k merges); this walks the key/values with ``struct``
and maps tensor data with numpy. Values keep their GGUF type (``types`` as GGUFReader reports
them: ``[scalar]`` or ``[ARRAY, element]``).
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

_SCALAR = {GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b", GGUFValueType.UINT16: "<H",
           GGUFValueType.INT16: "<h", GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i",
           GGUFValueType.FLOAT32: "<f", GGUFValueType.BOOL: "<?", GGUFValueType.UINT64: "<Q",
           GGUFValueType.INT64: "<q", GGUFValueType.FLOAT64: "<d"}


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: list[int]  # GGUF order, innermost first
    tensor_type: GGMLQuantizationType
    data: np.ndarray  # raw bytes (uint8), one row per line of ne0 values


@dataclass(frozen=True)
class GGUFFile:
    fields: dict[str, tuple[Any, list[GGUFValueType]]]
    tensors: dict[str, Tensor]


class _Cursor:
    def __init__(self, buf: Any) -> None:
        self.buf, self.pos = buf, 0

    def unpack(self, fmt: str) -> Any:
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.unpack("<Q")
        text = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8")
        self.pos += n
        return text

    def value(self, vtype: GGUFValueType) -> Any:
        if vtype == GGUFValueType.STRING:
            return self.string()
        return self.unpack(_SCALAR[vtype])


def read_gguf(path: Path) -> GGUFFile:
    with open(path, "rb") as fh:
        buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    cur = _Cursor(buf)
    if bytes(buf[:4]) != b"GGUF" or cur.unpack("<4xI") != 3:
        raise ValueError(f"{path}: not a GGUF v3 file")
    n_tensors, n_kv = cur.unpack("<Q"), cur.unpack("<Q")
    fields: dict[str, tuple[Any, list[GGUFValueType]]] = {}
    for _ in range(n_kv):
        key = cur.string()
        vtype = GGUFValueType(cur.unpack("<I"))
        if vtype == GGUFValueType.ARRAY:
            sub, count = GGUFValueType(cur.unpack("<I")), cur.unpack("<Q")
            fields[key] = ([cur.value(sub) for _ in range(count)], [vtype, sub])
        else:
            fields[key] = (cur.value(vtype), [vtype])
    infos = []
    for _ in range(n_tensors):
        name = cur.string()
        dims = [cur.unpack("<Q") for _ in range(cur.unpack("<I"))]
        infos.append((name, dims, GGMLQuantizationType(cur.unpack("<I")), cur.unpack("<Q")))
    align = int(fields.get("general.alignment", (32, []))[0])
    start = (cur.pos + align - 1) // align * align
    tensors = {}
    for name, dims, qtype, offset in infos:
        block, size = GGML_QUANT_SIZES[qtype]
        row_bytes = dims[0] // block * size
        rows = int(np.prod(dims[1:], dtype=np.int64)) if len(dims) > 1 else 1
        data = np.frombuffer(buf, np.uint8, rows * row_bytes, start + offset)
        tensors[name] = Tensor(name, dims, qtype, data.reshape(rows, row_bytes))
    return GGUFFile(fields, tensors)


def values(data: np.ndarray, qtype: GGMLQuantizationType) -> np.ndarray:
    """Tensor bytes as float32 values (rows of ne0)."""
    from gguf.quants import dequantize

    if qtype == GGMLQuantizationType.F32:
        return data.view(np.float32)
    if qtype == GGMLQuantizationType.F16:
        return data.view(np.float16).astype(np.float32)
    return dequantize(data, qtype)
