"""cffi builder (API mode, out-of-line) for the native core: ``edgevlm._native``.

The cdef is read from the public header, so declarations are written once. Built by
``pip install .`` through ``cffi_modules`` in setup.py.

Flags: ``-O3 -march=native`` by default (the build machine's CPU). ``EDGEVLM_PORTABLE=1``
builds for the baseline of the architecture instead; the SIMD kernels are then still compiled
(with per-function target attributes) and chosen at run time when the CPU has them.
``EDGEVLM_SANITIZE=1`` adds AddressSanitizer + UBSan (debugging only).
"""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
HEADER = HERE / "include" / "edgevlm.h"
SOURCES = sorted(str(p.relative_to(HERE.parent)) for p in (HERE / "src").rglob("*.c"))


def _cdef_text() -> str:
    text = HEADER.read_text(encoding="utf-8")
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)          # comments
    text = re.sub(r"^\s*#.*$", "", text, flags=re.M)            # preprocessor lines
    text = re.sub(r'extern "C" \{|^\}\s*$', "", text, flags=re.M)
    return text


def compile_flags() -> list[str]:
    flags = ["-std=c11", "-O3", "-Wall", "-Wextra", "-Wno-unused-parameter", "-pthread",
             "-D_GNU_SOURCE", "-fno-math-errno",
             "-ffp-contract=off"]   # no fused a*b+c: the reference quantisers are bit-exact
    if os.environ.get("EDGEVLM_PORTABLE") != "1":
        machine = platform.machine().lower()
        flags.append("-mcpu=native" if machine in ("aarch64", "arm64") else "-march=native")
    if os.environ.get("EDGEVLM_SANITIZE") == "1":
        flags += ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-O1", "-g"]
    return flags


def link_flags() -> list[str]:
    flags = ["-pthread", "-lm"]
    if os.environ.get("EDGEVLM_SANITIZE") == "1":
        flags += ["-fsanitize=address,undefined"]
    return flags


ffibuilder = FFI()
ffibuilder.cdef(_cdef_text())
ffibuilder.set_source(
    "edgevlm._native",
    '#include "edgevlm.h"',
    sources=SOURCES,
    include_dirs=[str(HERE / "include"), str(HERE / "src")],
    extra_compile_args=compile_flags(),
    extra_link_args=link_flags(),
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
