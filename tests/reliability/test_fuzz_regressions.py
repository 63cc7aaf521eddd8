"""Regression tests of the bugs the fuzzers found (issue 7); each reproducer is also in the
fuzz corpus, so the CI fuzz runs re-check it under the sanitizers.

- fuzz_api: a text GGUF without ``general.architecture`` made ``edgevlm_model_load`` format
  its error from an uninitialised string (a wild read; tests/fuzz/corpus/api/
  regress_load_no_architecture).
- fuzz_api: ``edgevlm_encode_vision`` multiplied the grid in int64 without an overflow check
  (UB; tests/fuzz/corpus/api/regress_encode_grid_overflow).
- fuzz_api: ``edgevlm_prefill`` checked ``n_past + n_tokens > n_ctx`` with a sum that
  overflows for n_tokens near 2^63: the check passed and the forward pass read far past the
  token buffer (tests/fuzz/corpus/api/regress_prefill_count_overflow).
- request parser: a JSON integer of more than 4300 digits (ValueError) and nesting beyond
  Python's recursion limit escaped as ``internal``; a lone surrogate in a text part crashed the
  tokenizer (``internal``) instead of ``invalid_request``.
- config loader: a file that is not UTF-8, an integer of > 4300 digits, an impossible date,
  a size like ``1e999 MiB``, a recursive alias, an alias bomb and deep nesting escaped as
  UnicodeDecodeError / ValueError / OverflowError / RecursionError (or hung) instead of
  ConfigError.
"""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import pytest

from edgevlm.config import ConfigError, load_config
from edgevlm.core.native import ModelLoadError, ffi, lib
from edgevlm.engine.model import ModelFiles, NativeModel
from edgevlm.engine.session import NativeSession
from edgevlm.wire.errors import wire_error
from edgevlm.wire.protocol import parse_request
from tests.fuzz.python.targets import check_config, check_request

FUZZ_CORPUS = Path(__file__).resolve().parents[1] / "fuzz" / "corpus" / "api"
DEMO_MODEL = Path(__file__).resolve().parents[2] / "daemon" / "edgevlm" / "models" / "qwen3vl-demo"


def test_a_model_file_without_architecture_is_refused_with_a_clean_message(
        tmp_path: Path) -> None:
    reproducer = (FUZZ_CORPUS / "regress_load_no_architecture").read_bytes()
    for i, data in enumerate([reproducer[1:], b"GGUF" + struct.pack("<IQQ", 3, 0, 0)]):
        path = tmp_path / f"model{i}.gguf"
        path.write_bytes(data)
        with pytest.raises(ModelLoadError) as info:
            NativeModel(ModelFiles(path, None))
        assert "general.architecture is (missing)" in str(info.value), info.value


def test_hostile_counts_to_the_c_api_are_refused_before_any_read() -> None:
    model = NativeModel(ModelFiles(DEMO_MODEL / "model.gguf", DEMO_MODEL / "mmproj.gguf"))
    session = NativeSession(model, n_ctx=64, n_threads=1, n_batch=8, max_patches=16)
    two = ffi.new("int32_t[6]", [1, 2, 0, 1, 0, 1])  # tokens 1, 2 / positions [3, 2]
    assert lib.edgevlm_prefill(session.handle, two, 2, two, ffi.NULL, ffi.NULL, 0, ffi.NULL, 0,
                               ffi.NULL, 0) == lib.EDGEVLM_OK
    # n_past (2) + n_tokens overflowed int64 before the fix: the check passed and the forward
    # pass read past these 2 tokens
    for n_tokens in (2**63 - 1, 2**63 - 2, 63):
        status = lib.edgevlm_prefill(session.handle, two, n_tokens, two, ffi.NULL, ffi.NULL, 0,
                                     ffi.NULL, 0, ffi.NULL, 0)
        assert status == lib.EDGEVLM_ERR_CONTEXT_FULL, n_tokens
        assert lib.edgevlm_session_n_past(session.handle) == 2
    pixels = ffi.new("float[1536]")
    out = ffi.new("float[128]")
    for grid in [(2**31 - 1, 2**31 - 2, 2**31 - 2), (2**30 + 1, 2**30, 2**30)]:
        status = lib.edgevlm_encode_vision(session.handle, pixels, 4, *grid, out, ffi.NULL,
                                           ffi.NULL)
        assert status == lib.EDGEVLM_ERR_ARGUMENT, grid
        assert b"does not fit" in ffi.string(lib.edgevlm_session_error(session.handle))


@pytest.mark.parametrize("payload", [
    b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": ' + b"1" * 5000 + b"}",
    b"[" * 100_000 + b"]" * 100_000,
    b'{"id": "deep", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    json.dumps({"id": "s", "messages": [{"role": "user", "content": "a\ud800"}]}).encode(),
    json.dumps({"messages": [{"role": "user", "content": [{"type": "text", "text": "\udfff"}]}],
                "stop": ["\ud800"]}).encode(),
])
def test_hostile_json_is_an_invalid_request(payload: bytes) -> None:
    with pytest.raises(Exception) as info:
        parse_request(payload)
    assert wire_error(info.value).type == "invalid_request", info.value
    check_request(payload)  # and the admission answers it with a valid error message


BOMB = "".join(f"{n}: &{n} [{', '.join([f'*{p}' if p else 'x'] * 9)}]\n"
               for p, n in zip(["", "a", "b", "c", "d", "e", "f"], "abcdefg", strict=True))


@pytest.mark.parametrize(("text", "expected"), [
    (b"mqtt:\n  host: \x80\x81\n", "not UTF-8 text: byte 0x80 (line 2)"),
    (b"model:\n  threads: " + b"9" * 5000 + b"\n", "Exceeds the limit (4300 digits)"),
    (b"mqtt:\n  port: 2024-13-45\n", "month must be in 1..12"),
    (b"cache:\n  max_bytes: 1" + b"0" * 400 + b" MiB\n", "is too large"),
    (b"mqtt: &a {tls: *a}\n", "an alias refers to a value that contains it"),
    (BOMB.encode(), "more than 100000 values once aliases are expanded"),
    (b"a: " + b"[" * 1100 + b"\n", "nest"),  # libyaml: "maximum nesting depth"
])
def test_hostile_config_files_are_config_errors(tmp_path: Path, text: bytes,
                                                 expected: str) -> None:
    path = tmp_path / "edgevlm.yaml"
    path.write_bytes(text)
    start = time.monotonic()
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert time.monotonic() - start < 20  # PyYAML takes ~4 s to give up on 5000 levels
    assert expected in str(info.value), info.value
    check_config(text)
