#!/usr/bin/env python3
"""Build llama.cpp's own command-line tools, the peers of the interop tests and the benches.

    python tools/llamacpp_tools.py [--variant native|avx2] [--targets llama-quantize,...]

prints the directory holding the binaries (``llama-quantize``, ``llama-bench``,
``llama-mtmd-cli`` by default). The source is the llama.cpp tree the llama-cpp-python sdist
vendors (the same version as ``tools/llamacpp_convert.py``, so converter, tools and bindings
are one llama.cpp), extracted whole to ``~/.cache/edgevlm/llamacpp-tools-<version>/src`` and
built with CMake + Ninja:

- ``native``: ``GGML_NATIVE=ON``, every instruction set this CPU has (``build/``);
- ``avx2``: ``GGML_NATIVE=OFF`` with AVX, AVX2, FMA, F16C and BMI2 only (``build-avx2/``), the
  code path of an AVX2-only host, measurable on any x86 host (issue 27).

On a CPU with AMX (Sapphire Rapids and later Xeons) the native build leaves AMX out
(``-mno-amx-tile -mno-amx-int8 -mno-amx-bf16``, ``build-noamx/``): this tree's AMX matrix
product crashes on the first prefill there (SIGSEGV in ``ggml_backend_amx_mul_mat`` at
``ldtilecfg``: llama.cpp issue #20824, the per-thread permission and on-stack tile config of
PR #26954, unmerged), so llama.cpp runs there as its users run it, without the AMX buffer.

Nothing here is committed. The first build takes 10-20 minutes on 2 cores; later calls reuse
it (a ``.complete-<target>`` marker per built target). Needs cmake, ninja and a C++ compiler
(``apt install cmake ninja-build g++``). ``EDGEVLM_LLAMACPP_TOOLS`` overrides the cache.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from llamacpp_convert import LLAMA_CPP_PYTHON_VERSION, download_sdist, extract_vendored

DEFAULT_TARGETS = ("llama-quantize", "llama-bench", "llama-mtmd-cli")
_COMMON = ["-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_CURL=OFF",
           "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_SERVER=OFF", "-DGGML_OPENMP=ON"]
VARIANTS: dict[str, tuple[str, list[str]]] = {
    "native": ("build", ["-DGGML_NATIVE=ON"]),
    "avx2": ("build-avx2", ["-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON",
                            "-DGGML_FMA=ON", "-DGGML_F16C=ON", "-DGGML_BMI2=ON",
                            "-DGGML_AVX512=OFF", "-DGGML_AVX_VNNI=OFF"]),
}


NO_AMX_FLAGS = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"


CPUINFO = Path("/proc/cpuinfo")


def cpu_has_amx(cpuinfo: Path = CPUINFO) -> bool:
    """Whether this CPU advertises AMX tiles (the ``amx_tile`` flag of Linux's cpuinfo)."""
    try:
        return any(line.startswith("flags") and "amx_tile" in line.split()
                   for line in cpuinfo.read_text().splitlines())
    except OSError:
        return False


def build_plan(variant: str, amx: bool | None = None) -> tuple[str, list[str], str]:
    """(build directory name, CMake flags, description) of ``variant`` on this CPU (``amx``:
    whether it has AMX; default: ask cpuinfo)."""
    build_name, flags = VARIANTS[variant]
    if variant == "native" and (cpu_has_amx() if amx is None else amx):
        return ("build-noamx",
                [*flags, f"-DCMAKE_C_FLAGS={NO_AMX_FLAGS}", f"-DCMAKE_CXX_FLAGS={NO_AMX_FLAGS}"],
                "native build without AMX (llama.cpp #20824)")
    return build_name, flags, f"{variant} build"


def cache_dir() -> Path:
    override = os.environ.get("EDGEVLM_LLAMACPP_TOOLS")
    if override:
        return Path(override)
    return Path.home() / ".cache" / "edgevlm" / f"llamacpp-tools-{LLAMA_CPP_PYTHON_VERSION}"


def _extract_tree(sdist: Path, target: Path) -> None:
    extract_vendored(sdist, target)
    if not (target / "CMakeLists.txt").is_file():
        raise RuntimeError(f"{sdist.name} has no vendored llama.cpp tree")


def ensure_source() -> Path:
    src = cache_dir() / "src"
    if (src / "CMakeLists.txt").is_file():
        return src
    src.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=src.parent) as tmp:
        staging = Path(tmp) / "src"
        staging.mkdir()
        _extract_tree(download_sdist(Path(tmp)), staging)
        staging.rename(src)
    return src


def _run(cmd: list[str], log: Path) -> None:
    with open(log, "a") as fh:
        fh.write(f"\n$ {' '.join(cmd)}\n")
        fh.flush()
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{cmd[0]} failed (exit {proc.returncode}); log {log}:\n{tail}")


def ensure_tools(targets: Sequence[str] = DEFAULT_TARGETS, variant: str = "native") -> Path:
    """The ``bin`` directory holding ``targets`` of llama.cpp built as ``variant``."""
    if variant not in VARIANTS:
        raise ValueError(f"variant {variant!r}: use one of {', '.join(VARIANTS)}")
    for tool in ("cmake", "ninja"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} is not installed (apt install cmake ninja-build g++)")
    build_name, flags, _ = build_plan(variant)
    build = cache_dir() / build_name
    bin_dir = build / "bin"
    missing = [t for t in targets
               if not ((build / f".complete-{t}").is_file() and (bin_dir / t).is_file())]
    if not missing:
        return bin_dir
    src = ensure_source()
    log = cache_dir() / f"{build_name}.log"
    print(f"building llama.cpp ({variant}) {', '.join(missing)} into {build}; log {log}",
          file=sys.stderr)
    if not (build / "CMakeCache.txt").is_file():
        _run(["cmake", "-S", str(src), "-B", str(build), *_COMMON, *flags], log)
    jobs = str(os.cpu_count() or 2)
    _run(["cmake", "--build", str(build), "--target", *missing, "-j", jobs], log)
    for t in missing:
        (build / f".complete-{t}").write_text(LLAMA_CPP_PYTHON_VERSION + "\n")
    return bin_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", default="native", choices=list(VARIANTS),
                        help="native: GGML_NATIVE=ON; avx2: AVX2/FMA/F16C only (default native)")
    parser.add_argument("--targets", default=",".join(DEFAULT_TARGETS),
                        help="comma-separated CMake targets (default %(default)s)")
    args = parser.parse_args(argv)
    try:
        bin_dir = ensure_tools([t for t in args.targets.split(",") if t], args.variant)
    except (RuntimeError, OSError) as exc:
        print(f"llamacpp_tools: {exc}", file=sys.stderr)
        return 1
    print(bin_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
