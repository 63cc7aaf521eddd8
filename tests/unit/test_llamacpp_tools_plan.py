"""How ``tools/llamacpp_tools.py`` builds llama.cpp's tools on each CPU class.

The vendored tree's AMX matrix product crashes on an AMX host (SIGSEGV at ``ldtilecfg`` in
``ggml_backend_amx_mul_mat``, llama.cpp issue #20824; seen on this project's Xeon bench host on
2026-12-04), so the native build there must leave AMX out, in its own build directory, and say
so in the bench report; everywhere else the native build is plain ``GGML_NATIVE=ON``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import llamacpp_tools

# flags lines as Linux prints them (abridged)
XEON_CPUINFO = "processor\t: 0\nflags\t\t: fpu avx2 avx512f amx_bf16 amx_tile amx_int8\n"
ZEN4_CPUINFO = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni\n"
# "amx_tile" elsewhere than in the flags, or only as part of another flag, is not AMX
NOT_AMX_CPUINFO = "model name\t: amx_tile emulator\nflags\t\t: fpu avx2 amx_tile_like\n"


@pytest.mark.parametrize(("text", "has_amx"), [
    (XEON_CPUINFO, True), (ZEN4_CPUINFO, False), (NOT_AMX_CPUINFO, False)])
def test_amx_is_read_from_the_cpuinfo_flags(tmp_path: Path, text: str, has_amx: bool) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(text)
    assert llamacpp_tools.cpu_has_amx(cpuinfo) is has_amx


def test_no_cpuinfo_means_no_amx(tmp_path: Path) -> None:
    assert llamacpp_tools.cpu_has_amx(tmp_path / "missing") is False


def test_native_build_on_an_amx_cpu_leaves_amx_out() -> None:
    build_dir, flags, description = llamacpp_tools.build_plan("native", amx=True)
    assert build_dir == "build-noamx"
    assert "-DGGML_NATIVE=ON" in flags
    for lang in ("C", "CXX"):
        flag = next(f for f in flags if f.startswith(f"-DCMAKE_{lang}_FLAGS="))
        assert set(flag.split("=", 1)[1].split()) == {
            "-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16"}
    assert "without AMX" in description and "20824" in description


def test_native_build_elsewhere_is_plain_native() -> None:
    assert llamacpp_tools.build_plan("native", amx=False) == (
        "build", ["-DGGML_NATIVE=ON"], "native build")


def test_the_avx2_pin_never_has_avx512_or_amx() -> None:
    build_dir, flags, description = llamacpp_tools.build_plan("avx2", amx=True)
    assert build_dir == "build-avx2" and description == "avx2 build"
    assert "-DGGML_NATIVE=OFF" in flags and "-DGGML_AVX512=OFF" in flags
