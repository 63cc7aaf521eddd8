"""Writing a GGUF file tensor by tensor, a row block at a time.

All tensor infos are declared up front (their byte sizes follow from shape and type), the header,
key/values and tensor infos are written with ``gguf.GGUFWriter``, then each tensor's data is
converted and appended in row blocks straight from the memory-mapped checkpoint. Peak memory is
a few row blocks, whatever the checkpoint size.

While streaming, every source tensor's bytes are hashed (BLAKE2b), which gives the model
fingerprint without a second pass; the fingerprint key is written as a fixed-width placeholder
and patched in place once both files are done (:func:`patch_string_value`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt
from gguf import GGUFValueType, GGUFWriter
from gguf.quants import quantize

from .errors import ConvertError, ConvertInputError
from .native_quantize import NATIVE_TYPES, quantize_rows
from .safetensors_mmap import SafetensorsCheckpoint, TensorRecord, to_float32
from .tensor_plan import PlannedTensor, QType

logger = logging.getLogger(__name__)

CHUNK_ELEMENTS = 1 << 20  # values converted at once (4 MiB as float32)
FINGERPRINT_HEX = 64  # BLAKE2b-256
_SAME_TYPE = {"F32": QType.F32, "F16": QType.F16, "BF16": QType.BF16}  # copied byte for byte


@dataclass(frozen=True)
class ProgressEvent:
    """One tensor written: ``index`` of ``total`` over both files, bytes written so far."""

    file: str
    index: int
    total: int
    tensor: str
    qtype: str
    bytes_written: int


ProgressFn = Callable[[ProgressEvent], None]


@dataclass
class StreamState:
    """Counters shared by the two files of a conversion, and the source hashes."""

    total: int
    callback: ProgressFn | None = None
    index: int = 0
    bytes_written: int = 0
    digests: dict[str, tuple[str, tuple[int, ...], bytes]] = field(default_factory=dict)

    def hash_source(self, ckpt: SafetensorsCheckpoint, name: str, rec: TensorRecord) -> None:
        """Hash a source tensor that is not converted (e.g. the redundant lm_head of a tied
        model), so the fingerprint still covers every tensor of the checkpoint."""
        h = hashlib.blake2b(digest_size=32)
        for part in ckpt.byte_chunks(rec):
            h.update(part)
        self.digests[name] = (rec.dtype, rec.shape, h.digest())

    def fingerprint(self, config: dict[str, Any]) -> str:
        """BLAKE2b-256 over config.json (canonical JSON) and every source tensor's
        (name, dtype, shape, BLAKE2b of its bytes), in name order."""
        h = hashlib.blake2b(digest_size=FINGERPRINT_HEX // 2, person=b"edgevlm-fp-v1")
        h.update(json.dumps(config, sort_keys=True, separators=(",", ":")).encode())
        for name in sorted(self.digests):
            dtype, shape, digest = self.digests[name]
            h.update(f"{name}\0{dtype}\0{list(shape)}\0".encode() + digest)
        return h.hexdigest()


def _encode(raw: npt.NDArray[Any], src_dtype: str, qtype: QType) -> npt.NDArray[Any]:
    """Source values (F32/F16/BF16 as stored) → bytes of ``qtype``."""
    if _SAME_TYPE.get(src_dtype) == qtype:
        return raw
    values = to_float32(raw, src_dtype)
    if qtype == QType.F32:
        return values
    if qtype == QType.F16:
        with np.errstate(over="ignore"):
            return values.astype(np.float16)
    if qtype in NATIVE_TYPES:  # [rows, width] → [rows, row bytes], in the C core
        return quantize_rows(values.reshape(-1, values.shape[-1]), qtype)
    return quantize(values, qtype)


def _write_tensor(fout: IO[bytes], pt: PlannedTensor, rec: TensorRecord,
                  ckpt: SafetensorsCheckpoint, state: StreamState) -> int:
    try:
        return _stream_tensor(fout, pt, rec, ckpt, state)
    except ConvertInputError as exc:
        raise ConvertInputError(f"{pt.source}: {exc.message}") from exc


def _stream_tensor(fout: IO[bytes], pt: PlannedTensor, rec: TensorRecord,
                   ckpt: SafetensorsCheckpoint, state: StreamState) -> int:
    hasher = None if pt.source in state.digests else hashlib.blake2b(digest_size=32)
    written = 0
    if pt.temporal_slice is not None or len(rec.shape) <= 1:
        raw = ckpt.rows(rec, 0, rec.n_rows)
        if hasher is not None:
            hasher.update(np.ascontiguousarray(raw).data)
        part = raw if pt.temporal_slice is None else raw[:, :, pt.temporal_slice]
        data = _encode(np.ascontiguousarray(part), rec.dtype, pt.qtype)
        fout.write(data.data)
        written = data.nbytes
        ckpt.release(rec)
    else:
        step = max(1, CHUNK_ELEMENTS // max(rec.row_elements, 1))
        for start in range(0, rec.n_rows, step):
            stop = min(start + step, rec.n_rows)
            raw = ckpt.rows(rec, start, stop)
            if hasher is not None:
                hasher.update(raw.data)
            data = _encode(raw, rec.dtype, pt.qtype)
            fout.write(np.ascontiguousarray(data).data)
            written += data.nbytes
            del raw, data
            ckpt.release(rec, start, stop)
    if hasher is not None:
        state.digests[pt.source] = (rec.dtype, rec.shape, hasher.digest())
    if written != pt.nbytes:
        raise ConvertError(f"internal error: {pt.name} wrote {written} bytes, planned "
                           f"{pt.nbytes}")
    return written


@dataclass(frozen=True)
class WrittenFile:
    path: Path
    nbytes: int
    kv_span: tuple[int, int]  # byte range of the key/value section


def write_gguf(path: Path, writer: GGUFWriter, plan: list[PlannedTensor],
               sources: dict[str, TensorRecord], ckpt: SafetensorsCheckpoint,
               state: StreamState) -> WrittenFile:
    """Write ``writer``'s key/values and the planned tensors to ``path``."""
    for pt in plan:
        writer.add_tensor_info(pt.name, pt.shape, np.dtype(np.float32), pt.nbytes,
                               raw_dtype=pt.qtype)
    try:
        writer.write_header_to_file(path=path)
        assert writer.fout is not None
        fout = writer.fout[0]
        kv_start = fout.tell()
        writer.write_kv_data_to_file()
        kv_end = fout.tell()
        writer.write_ti_data_to_file()
        writer.write_padding(fout, fout.tell())
        for pt in plan:
            nbytes = _write_tensor(fout, pt, sources[pt.source], ckpt, state)
            writer.write_padding(fout, nbytes)
            state.index += 1
            state.bytes_written += nbytes
            if state.callback is not None:
                state.callback(ProgressEvent(path.name.removesuffix(".part"), state.index,
                                             state.total, pt.name, pt.qtype.name,
                                             state.bytes_written))
        size = fout.tell()
    except OSError as exc:
        raise ConvertError(f"writing {path} failed: {exc.strerror or exc}") from exc
    finally:
        writer.close()
    return WrittenFile(path, size, (kv_start, kv_end))


def string_placeholder(width: int = FINGERPRINT_HEX) -> str:
    return "0" * width


def patch_string_value(written: WrittenFile, key: str, value: str) -> None:
    """Overwrite the placeholder value of string key ``key`` in place (same length)."""
    needle = (struct.pack("<Q", len(key.encode())) + key.encode()
              + struct.pack("<I", GGUFValueType.STRING) + struct.pack("<Q", len(value.encode())))
    start, end = written.kv_span
    try:
        with open(written.path, "r+b") as fh:
            fh.seek(start)
            kv = fh.read(end - start)
            at = kv.find(needle)
            placeholder = string_placeholder(len(value.encode())).encode()
            if at < 0 or kv[at + len(needle):at + len(needle) + len(placeholder)] != placeholder:
                raise ConvertError(f"internal error: no placeholder for {key} in {written.path}")
            fh.seek(start + at + len(needle))
            fh.write(value.encode())
    except OSError as exc:
        raise ConvertError(f"updating {written.path} failed: {exc.strerror or exc}") from exc
