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

XEON_FLAGS = "flags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8\n"
ZEN4_FLAGS = "flags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni\n"


def _cpuinfo(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, text: str) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(text)
    real_path = llamacpp_tools.Path

    def fake_path(*parts: str) -> Path:
        if parts == ("/proc/cpuinfo",):
            return cpuinfo
        return real_path(*parts)

    monkeypatch.setattr(llamacpp_tools, "Path", fake_path)


def test_native_build_on_an_amx_cpu_leaves_amx_out(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _cpuinfo(monkeypatch, tmp_path, XEON_FLAGS)
    build_dir, flags, description = llamacpp_tools.build_plan("native")
    assert build_dir == "build-noamx"
    assert "-DGGML_NATIVE=ON" in flags
    for lang in ("C", "CXX"):
        flag = next(f for f in flags if f.startswith(f"-DCMAKE_{lang}_FLAGS="))
        assert set(flag.split("=", 1)[1].split()) == {
            "-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16"}
    assert "without AMX" in description and "20824" in description


def test_native_build_elsewhere_is_plain_native(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _cpuinfo(monkeypatch, tmp_path, ZEN4_FLAGS)
    assert llamacpp_tools.build_plan("native") == ("build", ["-DGGML_NATIVE=ON"], "native build")


def test_the_avx2_pin_never_has_avx512_or_amx(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _cpuinfo(monkeypatch, tmp_path, XEON_FLAGS)
    build_dir, flags, description = llamacpp_tools.build_plan("avx2")
    assert build_dir == "build-avx2" and description == "avx2 build"
    assert "-DGGML_NATIVE=OFF" in flags and "-DGGML_AVX512=OFF" in flags
