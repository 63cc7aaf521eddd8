"""The native GGUF reader against files written by the reference writer, the `gguf` package.

Each test writes a file with gguf.GGUFWriter into tmp_path, reads it back with
native/tests/gguf_dump.c (compiled here with native/src/gguf.c + gguf_get.c by the system C
compiler) and compares the JSON it prints with what was written: every value type, nested and
string arrays, tensors quantised by gguf.quants, the byte size of every ggml type it knows.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import quant_shape_from_byte_shape, quantize

NATIVE = Path(__file__).resolve().parents[2] / "native"
Dump = Callable[[Path], dict[str, Any]]


@pytest.fixture(scope="module")
def dump(tmp_path_factory: pytest.TempPathFactory) -> Dump:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.fail("no C compiler (cc/gcc/clang) on PATH: the GGUF reader cannot be built")
    exe = tmp_path_factory.mktemp("gguf_dump") / "gguf_dump"
    subprocess.run(
        [cc, "-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "-D_GNU_SOURCE",
         f"-I{NATIVE / 'include'}", f"-I{NATIVE / 'src'}", "-o", str(exe),
         str(NATIVE / "tests" / "gguf_dump.c"), str(NATIVE / "src" / "gguf.c"),
         str(NATIVE / "src" / "gguf_get.c")],
        check=True, capture_output=True, text=True,
    )

    def run(path: Path) -> dict[str, Any]:
        proc = subprocess.run([str(exe), str(path)], capture_output=True, text=True, timeout=60)
        out: dict[str, Any] = json.loads(proc.stdout)
        assert (proc.returncode == 0) == ("error" not in out), proc.stdout
        return out

    return run


def write(path: Path, fill: Callable[[gguf.GGUFWriter], None]) -> Path:
    w = gguf.GGUFWriter(path, arch="qwen3vl")
    fill(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


SCALARS: list[tuple[str, str, Any]] = [
    ("add_uint8", "uint8", 250), ("add_int8", "int8", -128), ("add_uint16", "uint16", 65535),
    ("add_int16", "int16", -32768), ("add_uint32", "uint32", 4_000_000_000),
    ("add_int32", "int32", -2_000_000_000), ("add_uint64", "uint64", 2**64 - 1),
    ("add_int64", "int64", -(2**63)), ("add_float32", "float32", 1e-6),
    ("add_float64", "float64", 5_000_000.125), ("add_bool", "bool", True),
    ("add_string", "string", "héllo \"wörld\" \\ ✓\n"),
]
ARRAYS: dict[str, tuple[str, list[Any]]] = {
    "a.ints": ("int32", [24, 20, 20, 0]),
    "a.floats": ("float32", [0.5, -0.25, 3.0]),
    "a.bools": ("bool", [i in (5, 11, 17) for i in range(24)]),
    "a.strings": ("string", ["Ġthe", "", "<|im_end|>", "日本"]),
    "a.nested": ("array", [[1, 2, 3], [4], [5, 6]]),
    "a.nested_str": ("array", [["x", "yz"], ["w"]]),
}


def test_every_value_type_written_by_gguf_py_reads_back(dump: Dump, tmp_path: Path) -> None:
    def fill(w: gguf.GGUFWriter) -> None:
        for method, _, value in SCALARS:
            getattr(w, method)(f"t.{method[4:]}", value)
        for key, (_, values) in ARRAYS.items():
            w.add_array(key, values)

    out = dump(write(tmp_path / "kv.gguf", fill))
    assert out["version"] == 3 and out["alignment"] == 32
    kv = {e["key"]: e for e in out["kv"]}
    assert kv["general.architecture"]["value"] == "qwen3vl"
    for method, type_name, value in SCALARS:
        got = kv[f"t.{method[4:]}"]
        assert got["type"] == type_name
        if type_name == "float32":
            assert np.float32(got["value"]) == np.float32(value)
        else:
            assert got["value"] == value
    for key, (elem_type, values) in ARRAYS.items():
        assert kv[key]["type"] == "array" and kv[key]["arr_type"] == elem_type
        if elem_type == "float32":
            assert np.array_equal(np.float32(kv[key]["value"]), np.float32(values))
        else:
            assert kv[key]["value"] == values
    # the int32 array: 4 x 4 bytes; the string array: 8-byte length + bytes per element
    assert kv["a.ints"]["nbytes"] == 16
    strings = ARRAYS["a.strings"][1]
    assert kv["a.strings"]["nbytes"] == sum(8 + len(s.encode()) for s in strings)


def test_tensors_quantised_by_gguf_py_read_back_byte_exact(dump: Dump, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    written: dict[str, tuple[int, list[int], bytes]] = {}

    def fill(w: gguf.GGUFWriter) -> None:
        w.add_custom_alignment(64)
        shapes = {"F32": (3, 40), "F16": (5, 8), "BF16": (2, 3, 16), "Q8_0": (4, 64),
                  "Q4_0": (3, 96)}
        for type_name, shape in shapes.items():
            qtype = GGMLQuantizationType[type_name]
            x = rng.standard_normal(shape).astype(np.float32)
            name = f"blk.0.{type_name.lower()}.weight"
            if qtype == GGMLQuantizationType.F32:
                data = x
                w.add_tensor(name, data)
            elif qtype == GGMLQuantizationType.F16:
                data = x.astype(np.float16)
                w.add_tensor(name, data)
            else:
                data = quantize(x, qtype)
                w.add_tensor(name, data, raw_dtype=qtype)
            written[name] = (int(qtype), list(reversed(shape)), data.tobytes())

    out = dump(write(tmp_path / "tensors.gguf", fill))
    assert out["alignment"] == 64 and out["data_offset"] % 64 == 0
    tensors = {t["name"]: t for t in out["tensors"]}
    assert set(tensors) == set(written)
    for name, (type_id, ne, data) in written.items():
        t = tensors[name]
        assert t["type"] == type_id
        assert t["n_dims"] == len(ne) and t["ne"] == ne + [1] * (4 - len(ne))
        assert t["offset"] % 64 == 0
        assert t["nbytes"] == len(data)
        assert bytes.fromhex(t["data"]) == data, name


def test_byte_size_of_every_ggml_type_matches_gguf_py(dump: Dump, tmp_path: Path) -> None:
    # Q8_1 is excluded: gguf-py's table says 40 bytes, ggml's C struct (and this reader) 36; it
    # is an activation type that never appears in model files.
    types = [t for t in GGMLQuantizationType if t != GGMLQuantizationType.Q8_1]
    expected: dict[str, tuple[int, list[int], int]] = {}

    def fill(w: gguf.GGUFWriter) -> None:
        for qtype in types:
            block, type_size = GGML_QUANT_SIZES[qtype]
            raw = np.arange(3 * 2 * type_size, dtype=np.uint8).reshape(3, 2 * type_size)
            name = f"t.{qtype.name}"
            w.add_tensor(name, raw, raw_dtype=qtype)
            shape = quant_shape_from_byte_shape(raw.shape, qtype)
            expected[name] = (int(qtype), list(reversed(shape)), raw.nbytes)
            assert shape[-1] == 2 * block

    out = dump(write(tmp_path / "types.gguf", fill))
    tensors = {t["name"]: t for t in out["tensors"]}
    for name, (type_id, ne, nbytes) in expected.items():
        t = tensors[name]
        assert (t["type"], t["ne"][:2], t["nbytes"]) == (type_id, ne, nbytes), name
        assert t["data"] is not None and len(t["data"]) == 2 * nbytes


def test_file_cut_inside_tensor_data_is_refused(dump: Dump, tmp_path: Path) -> None:
    def fill(w: gguf.GGUFWriter) -> None:
        w.add_tensor("a.weight", np.ones((4, 32), dtype=np.float32))
        w.add_tensor("b.weight", np.ones((2, 32), dtype=np.float16))

    path = write(tmp_path / "cut.gguf", fill)
    out = dump(path)
    last = max(out["tensors"], key=lambda t: t["offset"])
    end = out["data_offset"] + last["offset"] + last["nbytes"]
    path.write_bytes(path.read_bytes()[: end - 1])
    refused = dump(path)
    assert refused["status"] == 3
    assert "tensor 'b.weight': data" in refused["error"]
    assert "runs past the end of the file" in refused["error"]
