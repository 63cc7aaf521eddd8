"""The C-level tests of the core (native/tests/test_*.c), built with the system compiler:
plain, under AddressSanitizer + UndefinedBehaviorSanitizer, and a short libFuzzer run of the
GGUF reader. Each prints "name: N passed, N failed"; a non-zero exit fails the test."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).parents[2]


def make(target: str, build: Path, timeout: int = 900) -> str:
    env = {**os.environ, "MAKEFLAGS": "-j2"}
    proc = subprocess.run(["make", "-C", str(ROOT / "native"), f"BUILD={build}", target],
                          capture_output=True, text=True, timeout=timeout, env=env)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    return output


def summaries(output: str) -> list[tuple[str, int, int]]:
    return [(m.group(1), int(m.group(2)), int(m.group(3)))
            for m in re.finditer(r"^(\S+): (\d+) passed, (\d+) failed$", output, re.M)]


def test_c_unit_tests_pass(tmp_path: Path) -> None:
    results = summaries(make("test", tmp_path / "build"))
    tests = sorted(p.stem for p in (ROOT / "native" / "tests").glob("test_*.c"))
    assert len(results) == len(tests), results
    assert all(failed == 0 and passed > 0 for _, passed, failed in results), results


def test_c_unit_tests_are_clean_under_asan_and_ubsan(tmp_path: Path) -> None:
    build = tmp_path / "asan"
    flags = ("-std=c11 -O1 -g -Wall -Wextra -Wno-unused-parameter -pthread -D_GNU_SOURCE "
             "-march=native -fsanitize=address,undefined -fno-sanitize-recover=undefined "
             "-fno-omit-frame-pointer")
    env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=1"}
    proc = subprocess.run(["make", "-C", str(ROOT / "native"), f"BUILD={build}",
                           f"CFLAGS={flags}", "test"], capture_output=True, text=True,
                          timeout=1800, env=env)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    assert "ERROR: AddressSanitizer" not in output and "runtime error" not in output
    assert all(failed == 0 for _, _, failed in summaries(output))


def test_gguf_reader_and_c_api_survive_a_short_fuzz_run() -> None:
    proc = subprocess.run(["bash", str(ROOT / "tests" / "fuzz" / "run_short.sh")],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "FUZZ_SECONDS": "15"})
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert "fuzz: 2 passed, 0 failed" in proc.stdout


def test_c_unit_tests_pass_on_aarch64_under_qemu(tmp_path: Path) -> None:
    """The NEON kernels (with and without the dot-product extension) against the scalar
    reference, cross-compiled with Debian's gcc-aarch64-linux-gnu and run under qemu-user
    (on an aarch64 host this is the same as test_c_unit_tests_pass, with native execution)."""
    if os.uname().machine == "aarch64":
        output = make("test", tmp_path / "build")
    else:
        proc = subprocess.run(
            ["make", "-C", str(ROOT / "native"), f"BUILD={tmp_path / 'aarch64'}",
             "CC=aarch64-linux-gnu-gcc", "ARCH_FLAGS=-march=armv8.2-a+dotprod",
             "RUN=qemu-aarch64 -cpu max -L /usr/aarch64-linux-gnu", "test"],
            capture_output=True, text=True, timeout=1800,
            env={**os.environ, "MAKEFLAGS": "-j2"})
        output = proc.stdout + proc.stderr
        assert proc.returncode == 0, output[-4000:]
        assert "kernel set under test: neon-dotprod" in output
        assert "kernel set under test: neon\n" in output
    results = summaries(output)
    assert results and all(failed == 0 and passed > 0 for _, passed, failed in results), results
