#!/usr/bin/env python3
"""NEON instructions each weight type's decode dot product executes per 256 weights: ours
(the ``neon-dotprod`` kernel set, ``ev_kernels_arm_neon()->vec_dot[type]``) against
llama.cpp's (``ggml_vec_dot_<type>_q8_0`` / ``_q8_K`` of ``ggml-cpu/arch/arm/quants.c``),
both compiled for ``-march=armv8.2-a+dotprod`` (the RK3588's Cortex-A76) with the aarch64
cross compiler at ``-O3``, counted under qemu-user.

    python bench/neon_counts.py [--llamacpp-src DIR] [--types q4_K,q6_K] [--json]
                                [--prefill-types q4_0,q8_0,f16] [--prefill-shape K,M1,M2,T1,T2]

Method: ``bench/neon_counts/harness.c`` calls each dot product on identical random blocks
between two marker functions, once over N1 and once over N2 super-blocks (``--n1 8 --n2 72``
by default), and checks that ours and ggml's results agree (relative 1e-4). qemu runs it with
one guest instruction per translation block, chaining off and ``-d exec``: one "Trace" line
per executed instruction. The lines between the markers are each call's count;
(count(N2) - count(N1)) / (N2 - N1) is the count per 256 weights (calls, setup and the final
reductions cancel) and count(N1) minus that times N1, minus the call site's own instructions
(counted around an empty function), the fixed cost of a call: the callee's prologue, setup,
reductions and epilogue. Every run first counts a known 3-instruction loop and stops unless
it grows by exactly 3 an iteration. Each executed instruction is also classed from the
objdump of the binary: ASIMD/FP data processing, loads/stores, the rest (integer, branches).

llama.cpp is never committed: its ggml tree is compiled from ``--llamacpp-src`` (default
``tools/llamacpp_tools.py``'s ``ensure_source()``, the sdist the interop tests use). Build
outputs go to ``--build-dir`` (``/tmp/edgevlm-neon-counts``). Needs ``aarch64-linux-gnu-gcc``
(static libc included) and ``qemu-aarch64`` (``apt install gcc-aarch64-linux-gnu qemu-user``).
The RK3588 projection printed after the table is ``bench/neon_counts/rk3588_projection.py``.

Many-token products (``--prefill-types``, default q4_0,q8_0,f16,q4_0-fast,q8_0-fast):
``bench/neon_counts/prefill.c`` runs one Y[T][M] = X[T][K] . W[M][K]^T product of ours
(``ev_matmul`` on one thread with the neon-dotprod set: Q4_0/Q8_0 through its SDOT gemm_q16x,
the default precision, or with ``-fast`` the neon-dotprod-fast set's gemm_q8x; F16 through
gemm_dq from 16 tokens on) and of what llama.cpp runs for it on an A76 without i8mm
(Q4_0 / Q8_0: ``ggml_quantize_mat_q8_0_4x4`` + ``ggml_gemm_q{4,8}_0_4x4_q8_0`` on weights
repacked at load; F16: ``llamafile_sgemm``, tinyBLAS on float32x4 with F16 weights), at four
shapes (M1, T1) (M2, T1) (M1, T2) (M2, T2) for one K (``--prefill-shape 2048,16,32,48,96``),
and checks that both products agree. The four counts fit instructions(M, T) =
a*M*T + b*M + c*T + d exactly: a / K is the cost per weight x token, b / K per weight (ours:
dequantising and packing the weights), c / K per token x column (ours: packing the
activations; ggml: quantising them), d per call. The same binary counts F16 decode (one token,
ours ``ev_matmul``, ggml ``ggml_vec_dot_f16`` on F16-rounded activations, llamafile declining
n < 2) as instructions per 256 weights (the slope over M at that K). F16 is counted twice:
llama.cpp built for ARCH_FLAGS and built ``+fp16`` (what a native build on the A76 gets, whose
F16 paths use F16 arithmetic), ours the same both times. llama.cpp's C++ files are
compiled with ``aarch64-linux-gnu-g++`` (``apt install g++-aarch64-linux-gnu``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
NATIVE = REPO / "native"
sys.path.insert(0, str(HERE / "neon_counts"))
from rk3588_projection import (  # noqa: E402
    Assumptions,
    Vision,
    encode_markdown,
    prefill_markdown,
    project,
    project_encode,
    project_prefill,
    projection_markdown,
)

ARCH_FLAGS = ["-march=armv8.2-a+dotprod"]
# the kernel layer of native/Makefile (KERNEL_SRC), built with its flags at -O3
OUR_SOURCES = ["types", "quants_fit", "quants_legacy", "quants_k", "quants_iq4", "kernels",
               "kernels_dispatch", "kernels_scalar", "kernels_scalar_k", "threadpool"]
OUR_CFLAGS = ["-std=c11", "-O3", "-Wall", "-Wextra", "-Wno-unused-parameter", "-pthread",
              "-D_GNU_SOURCE", "-ffp-contract=off", "-fno-math-errno"]
# ggml-cpu's C flags in a Release build (no -ffp-contract: GCC's default, fused)
GGML_CFLAGS = ["-std=gnu11", "-O3", "-DNDEBUG"]
# type, bits a weight (GGUF block bytes * 8 / block elements)
TYPES: dict[str, float] = {
    "q8_0": 34 * 8 / 32, "q4_0": 18 * 8 / 32, "q5_0": 22 * 8 / 32, "iq4_nl": 18 * 8 / 32,
    "q2_K": 84 * 8 / 256, "q3_K": 110 * 8 / 256, "q4_K": 144 * 8 / 256,
    "q5_K": 176 * 8 / 256, "q6_K": 210 * 8 / 256, "iq4_xs": 136 * 8 / 256,
}
# the many-token products' types, bits a weight
# (TYPE-fast: ours with the fast set, `precision: fast`, gemm_q8x; ggml the same as TYPE's)
PREFILL_TYPES: dict[str, float] = {"q4_0": 18 * 8 / 32, "q8_0": 34 * 8 / 32, "f16": 16.0,
                                   "q4_0-fast": 18 * 8 / 32, "q8_0-fast": 34 * 8 / 32}
# what llama.cpp runs for each on an A76 without i8mm (prefill.c)
PREFILL_GGML = {"q4_0": "ggml_gemm_q4_0_4x4_q8_0", "q8_0": "ggml_gemm_q8_0_4x4_q8_0",
                "f16": "llamafile_sgemm (tinyBLAS<4, float32x4_t>)",
                "q4_0-fast": "ggml_gemm_q4_0_4x4_q8_0", "q8_0-fast": "ggml_gemm_q8_0_4x4_q8_0"}
# ggml-cpu's C++ flags in a Release build, and the C++ files prefill.c calls into
GGML_CXXFLAGS = ["-std=c++17", "-O3", "-DNDEBUG"]
GGML_CXX_SOURCES = ["arch/arm/repack.cpp", "llamafile/sgemm.cpp", "vec.cpp"]
# what a native build of llama.cpp on the A76 adds (GGML_NATIVE: -mcpu=native, FEAT_FP16):
# F16 weights then take other paths, counted as a second ggml build for F16
GGML_FP16_ARCH = "+fp16"
PREFILL_GGML_FP16 = "llamafile_sgemm (tinyBLAS<8, float16x8_t>) on F16 activations"
KNOWN_LOOP_INSNS = 3 * (110 - 10)   # regions 0 and 1 of the harness
BRANCHES = re.compile(r"^(b|bl|blr|br|ret|cbz|cbnz|tbz|tbnz|b\..*)$")
SIMD_REG = re.compile(r"\b([vqdshb])([0-9]|[12][0-9]|3[01])\b")


@dataclass(frozen=True)
class Count:
    """One implementation's instructions for one type."""

    per_256: float            # all instructions per 256 weights
    simd_per_256: float       # of which ASIMD/FP data processing
    ldst_per_256: float       # of which loads and stores (any register file)
    fixed: float              # the callee's instructions beyond its blocks (prologue, setup,
                              # reductions, epilogue; the caller's moves and BLR not included)


@dataclass(frozen=True)
class TypeResult:
    type: str
    bits_per_weight: float
    ours_kernel: str          # "neon", or "scalar-fallback" (no NEON entry in the set)
    ours: Count
    ggml: Count
    results: str              # the harness's line: both dot products' values


@dataclass(frozen=True)
class Fit:
    """One implementation's many-token product at one K: instructions(M, T) =
    per_weight_token*K*M*T + per_weight*K*M + per_token_column*K*T + per_call, fitted exactly
    to the four measured shapes (the callee's; the call site's own instructions removed)."""

    per_weight_token: float
    per_weight: float
    per_token_column: float
    per_call: float
    simd_per_weight_token: float   # of per_weight_token: ASIMD/FP data processing
    ldst_per_weight_token: float   # of per_weight_token: loads and stores


@dataclass(frozen=True)
class PrefillResult:
    type: str                 # "f16+fp16": F16 with ggml built -march=...+fp16
    bits_per_weight: float
    ggml_kernel: str
    ours: Fit
    ggml: Fit
    results: str              # the harness's line: agreement of both products


def run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, check=True, text=True, capture_output=True)


def compile_c(cc: str, src: Path, obj: Path, flags: list[str], headers_of: Path) -> None:
    """cc -c src -o obj, unless obj is newer than src and every header under headers_of and
    was compiled by the same command (recorded beside it, obj.cmd)."""
    cmd = [cc, *flags, "-c", str(src), "-o", str(obj)]
    stamp = obj.with_suffix(".cmd")
    inputs = [src, *headers_of.rglob("*.h")]
    if (obj.exists() and stamp.exists() and stamp.read_text() == " ".join(cmd)
            and obj.stat().st_mtime > max(p.stat().st_mtime for p in inputs)):
        return
    obj.parent.mkdir(parents=True, exist_ok=True)
    run(cmd)
    stamp.write_text(" ".join(cmd))


def build(cc: str, ggml_root: Path, out: Path) -> Path:
    """The static harness binary: our kernel layer, ggml's arm quants.c, the harness."""
    ours_inc = ["-I", str(NATIVE / "include"), "-I", str(NATIVE / "src")]
    ggml_inc = ["-I", str(ggml_root / "include"), "-I", str(ggml_root / "src"),
                "-I", str(ggml_root / "src" / "ggml-cpu")]
    sources = [NATIVE / "src" / f"{name}.c" for name in OUR_SOURCES]
    sources += sorted((NATIVE / "src" / "arch").glob("*.c"))
    objs = []
    for src in sources:
        obj = out / "ours" / (src.stem + ".o")
        compile_c(cc, src, obj, OUR_CFLAGS + ARCH_FLAGS + ours_inc, NATIVE)
        objs.append(obj)
    ggml_quants = ggml_root / "src" / "ggml-cpu" / "arch" / "arm" / "quants.c"
    for src, name in ((ggml_quants, "ggml_arm_quants"), (HERE / "neon_counts" / "ggml_stubs.c",
                                                         "ggml_stubs")):
        obj = out / "ggml" / f"{name}.o"
        compile_c(cc, src, obj, GGML_CFLAGS + ARCH_FLAGS + ggml_inc, ggml_root)
        objs.append(obj)
    harness = out / "harness.o"
    compile_c(cc, HERE / "neon_counts" / "harness.c", harness,
              OUR_CFLAGS + ARCH_FLAGS + ours_inc, NATIVE)
    binary = out / "harness"
    run([cc, "-static", "-o", str(binary), str(harness), *map(str, objs), "-lm", "-pthread"])
    return binary


def build_prefill(cc: str, cxx: str, ggml_root: Path, out: Path, ggml_extra: str = "") -> Path:
    """The static prefill binary: our kernel layer (built by build()), ggml's repack, sgemm
    and vec C++ files with the shim that stands in for the rest of ggml, prefill.c; ggml's
    files for ARCH_FLAGS plus ggml_extra (e.g. "+fp16"), ours always for ARCH_FLAGS."""
    ours_inc = ["-I", str(NATIVE / "include"), "-I", str(NATIVE / "src")]
    ggml_inc = ["-I", str(ggml_root / "include"), "-I", str(ggml_root / "src"),
                "-I", str(ggml_root / "src" / "ggml-cpu")]
    objs = sorted((out / "ours").glob("*.o"))
    cpu = ggml_root / "src" / "ggml-cpu"
    sources = [(cpu / rel, "ggml_" + rel.replace("/", "_").removesuffix(".cpp"))
               for rel in GGML_CXX_SOURCES]
    sources.append((HERE / "neon_counts" / "ggml_shim.cpp", "ggml_shim"))
    suffix = ggml_extra.replace("+", "_")
    arch = [ARCH_FLAGS[0] + ggml_extra]
    for src, name in sources:
        obj = out / ("ggml" + suffix) / f"{name}.o"
        compile_c(cxx, src, obj, GGML_CXXFLAGS + arch + ggml_inc, ggml_root)
        objs.append(obj)
    harness = out / "prefill.o"
    compile_c(cc, HERE / "neon_counts" / "prefill.c", harness,
              OUR_CFLAGS + ARCH_FLAGS + ours_inc, NATIVE)
    binary = out / ("prefill" + suffix)
    run([cxx, "-static", "-o", str(binary), str(harness), *map(str, objs), "-lm", "-pthread"])
    return binary


def symbol(nm: str, binary: Path, name: str) -> int:
    for line in run([nm, str(binary)]).stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] == name:
            return int(parts[0], 16)
    raise RuntimeError(f"{name} not in {binary}")


def instruction_classes(objdump: str, binary: Path) -> dict[int, str]:
    """address -> "simd" | "ldst" | "other" for every instruction of the binary's text."""
    classes: dict[int, str] = {}
    out = run([objdump, "-d", "--no-show-raw-insn", str(binary)]).stdout
    for line in out.splitlines():
        m = re.match(r"^\s+([0-9a-f]+):\s+(\S+)\s*(.*)$", line)
        if not m:
            continue
        mnemonic, operands = m.group(2), m.group(3).split("//")[0]
        if mnemonic.startswith(("ld", "st", "prfm")):
            cls = "ldst"
        elif BRANCHES.match(mnemonic):
            cls = "other"
        elif SIMD_REG.search(operands):
            cls = "simd"
        else:
            cls = "other"
        classes[int(m.group(1), 16)] = cls
    return classes


def single_step_flag(qemu: str) -> str:
    """qemu >= 8.1 calls -singlestep -one-insn-per-tb."""
    helptext = subprocess.run([qemu, "--help"], text=True, capture_output=True).stdout
    return "-one-insn-per-tb" if "one-insn-per-tb" in helptext else "-singlestep"


def trace_regions(qemu: list[str], binary: Path, args: list[str], begin: int,
                  end: int) -> tuple[list[Counter[int]], str]:
    """The executed-instruction counts by address of each marker-bracketed region."""
    cmd = [*qemu, "-d", "exec,nochain", str(binary), *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None and proc.stdout is not None
    regions: list[Counter[int]] = []
    current: Counter[int] | None = None
    for line in proc.stderr:
        if not line.startswith("Trace"):
            continue
        # "Trace 0: 0x7f.. [0000000001009331/0000000000401800/00000001/00000201] "
        pc = int(line.split("[", 1)[1].split("/", 2)[1], 16)
        if pc == begin:
            current = Counter()
            regions.append(current)
        elif pc == end:
            current = None
        if current is not None:
            current[pc] += 1
    stdout = proc.stdout.read().strip()
    if proc.wait() != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {stdout}")
    return regions, stdout


def count(c1: Counter[int], c2: Counter[int], n1: int, n2: int, overhead: int,
          classes: dict[int, str]) -> Count:
    def total(c: Counter[int], cls: str | None = None) -> int:
        return sum(v for pc, v in c.items() if cls is None or classes.get(pc) == cls)

    def slope(cls: str | None = None) -> float:
        return (total(c2, cls) - total(c1, cls)) / (n2 - n1)

    per = slope()
    return Count(per_256=per, simd_per_256=slope("simd"), ldst_per_256=slope("ldst"),
                 fixed=total(c1) - overhead - n1 * per)


def measure(types: list[str], binary: Path, qemu: list[str], tools: dict[str, str],
            n1: int, n2: int) -> list[TypeResult]:
    begin = symbol(tools["nm"], binary, "nc_region_begin")
    end = symbol(tools["nm"], binary, "nc_region_end")
    classes = instruction_classes(tools["objdump"], binary)
    results = []
    for name in types:
        regions, line = trace_regions(qemu, binary, [name, str(n1), str(n2)], begin, end)
        if len(regions) != 8:
            raise RuntimeError(f"{name}: {len(regions)} marked regions, expected 8")
        known = sum(regions[1].values()) - sum(regions[0].values())
        if known != KNOWN_LOOP_INSNS:
            raise RuntimeError(f"the known loop counted {known}, not {KNOWN_LOOP_INSNS}: "
                               "the trace does not give one line per instruction")
        # each call site's own instructions: the markers, argument moves, the BLR, register
        # restores (the empty function's RET not among them)
        site_ours, site_ggml = sum(regions[2].values()) - 1, sum(regions[3].values()) - 1
        how = re.search(r"ours=(\S+)", line)
        results.append(TypeResult(
            type=name, bits_per_weight=TYPES[name],
            ours_kernel=how.group(1) if how else "?",
            ours=count(regions[4], regions[5], n1, n2, site_ours, classes),
            ggml=count(regions[6], regions[7], n1, n2, site_ggml, classes),
            results=line))
    return results


def fit(regions: list[Counter[int]], shape: tuple[int, int, int, int, int], site: int,
        classes: dict[int, str]) -> Fit:
    """The bilinear fit of four regions measured at (M1,T1) (M2,T1) (M1,T2) (M2,T2)."""
    k, m1, m2, t1, t2 = shape

    def total(c: Counter[int], cls: str | None = None) -> int:
        return sum(v for pc, v in c.items() if cls is None or classes.get(pc) == cls)

    def cross(cls: str | None = None) -> float:   # a: the M*T coefficient
        r11, r21, r12, r22 = (total(c, cls) for c in regions)
        return (r22 - r21 - r12 + r11) / ((m2 - m1) * (t2 - t1))

    r11, r21, r12, _ = (total(c) for c in regions)
    a = cross()
    b = (r21 - r11) / (m2 - m1) - a * t1
    c = (r12 - r11) / (t2 - t1) - a * m1
    d = r11 - site - a * m1 * t1 - b * m1 - c * t1
    return Fit(per_weight_token=a / k, per_weight=b / k, per_token_column=c / k, per_call=d,
               simd_per_weight_token=cross("simd") / k, ldst_per_weight_token=cross("ldst") / k)


def trace_checked(qemu: list[str], binary: Path, args: list[str], begin: int, end: int,
                  n_regions: int) -> tuple[list[Counter[int]], str]:
    """trace_regions, checking the region count and the known loop's 3 instructions."""
    regions, line = trace_regions(qemu, binary, args, begin, end)
    if len(regions) != n_regions:
        raise RuntimeError(f"{args}: {len(regions)} marked regions, expected {n_regions}")
    known = sum(regions[1].values()) - sum(regions[0].values())
    if known != KNOWN_LOOP_INSNS:
        raise RuntimeError(f"the known loop counted {known}, not {KNOWN_LOOP_INSNS}: "
                           "the trace does not give one line per instruction")
    return regions, line


def measure_prefill(types: list[str], binary: Path, qemu: list[str], tools: dict[str, str],
                    shape: tuple[int, int, int, int, int],
                    ggml_extra: str = "") -> list[PrefillResult]:
    """Each type's fits, ours and ggml's, from one run of the prefill harness each (ggml_extra:
    the binary's ggml was built with that architecture extension, named in the type)."""
    begin = symbol(tools["nm"], binary, "nc_region_begin")
    end = symbol(tools["nm"], binary, "nc_region_end")
    classes = instruction_classes(tools["objdump"], binary)
    results = []
    for name in types:
        regions, line = trace_checked(qemu, binary, [name, *map(str, shape)], begin, end, 12)
        site = sum(regions[2].values()) - 1          # the empty function's RET not the site's
        results.append(PrefillResult(
            type=name + ggml_extra, bits_per_weight=PREFILL_TYPES[name],
            ggml_kernel=PREFILL_GGML_FP16 if ggml_extra else PREFILL_GGML[name],
            ours=fit(regions[4:8], shape, site, classes),
            ggml=fit(regions[8:12], shape, site, classes), results=line))
    return results


def measure_f16_decode(binary: Path, qemu: list[str], tools: dict[str, str], k: int, m1: int,
                       m2: int) -> tuple[Count, Count, str]:
    """F16 decode (one token), ours and ggml's, per 256 weights of K-wide rows: the slope over
    M1 -> M2 rows, each row's own costs included (fixed 0: nothing per row is left over)."""
    begin = symbol(tools["nm"], binary, "nc_region_begin")
    end = symbol(tools["nm"], binary, "nc_region_end")
    classes = instruction_classes(tools["objdump"], binary)
    regions, line = trace_checked(qemu, binary, ["f16", str(k), str(m1), str(m2), "1", "1"],
                                  begin, end, 12)

    def per_256(c1: Counter[int], c2: Counter[int]) -> Count:
        def slope(cls: str | None = None) -> float:
            tot = [sum(v for pc, v in c.items() if cls is None or classes.get(pc) == cls)
                   for c in (c1, c2)]
            return (tot[1] - tot[0]) / ((m2 - m1) * k) * 256
        return Count(per_256=slope(), simd_per_256=slope("simd"), ldst_per_256=slope("ldst"),
                     fixed=0.0)

    return per_256(regions[4], regions[5]), per_256(regions[8], regions[9]), line


def prefill_counts_markdown(results: list[PrefillResult]) -> str:
    rows = ["| weights | llama.cpp runs | ours instr / (weight x token) | ggml instr / (weight x "
            "token) | ratio | ours ASIMD / ld-st | ggml ASIMD / ld-st | per weight (ours / "
            "ggml) | per token x column (ours / ggml) | per call (ours / ggml) |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        o, g = r.ours, r.ggml
        name = r.type.upper().replace("+FP16", f" (ggml {GGML_FP16_ARCH})").replace(
            "-FAST", ", ours fast")
        rows.append(
            f"| {name} | `{r.ggml_kernel}` | {o.per_weight_token:.3f} | "
            f"{g.per_weight_token:.3f} | {o.per_weight_token / g.per_weight_token:.2f} | "
            f"{o.simd_per_weight_token:.3f} / {o.ldst_per_weight_token:.3f} | "
            f"{g.simd_per_weight_token:.3f} / {g.ldst_per_weight_token:.3f} | "
            f"{o.per_weight:.2f} / {g.per_weight:.2f} | "
            f"{o.per_token_column:.2f} / {g.per_token_column:.2f} | "
            f"{o.per_call:.0f} / {g.per_call:.0f} |")
    return "\n".join(rows)


def counts_markdown(results: list[TypeResult]) -> str:
    rows = ["| type | bits/weight | ours instr/256 w | ggml instr/256 w | ratio | "
            "fixed cost per call (ours / ggml) | ours ASIMD / ld-st per 256 w | "
            "ggml ASIMD / ld-st per 256 w |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        note = " (scalar fallback)" if r.ours_kernel != "neon" else ""
        name = r.type.upper().replace("+FP16", f" (ggml {GGML_FP16_ARCH})").replace(
            "-FAST", ", ours fast")
        rows.append(
            f"| {name}{note} | {r.bits_per_weight:.4g} | {r.ours.per_256:.1f} | "
            f"{r.ggml.per_256:.1f} | {r.ours.per_256 / r.ggml.per_256:.2f} | "
            f"{r.ours.fixed:.0f} / {r.ggml.fixed:.0f} | "
            f"{r.ours.simd_per_256:.0f} / {r.ours.ldst_per_256:.0f} | "
            f"{r.ggml.simd_per_256:.0f} / {r.ggml.ldst_per_256:.0f} |")
    return "\n".join(rows)


def default_llamacpp_src() -> Path:
    """tools/llamacpp_tools.py's tree (extracting the sdist the first time)."""
    sys.path.insert(0, str(REPO / "tools"))
    ensure_source: Callable[[], Path] = importlib.import_module("llamacpp_tools").ensure_source
    return ensure_source()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llamacpp-src", type=Path,
                    help="llama.cpp source tree (default: tools/llamacpp_tools.py ensure_source())")
    ap.add_argument("--types", default=",".join(TYPES),
                    help=f"comma-separated weight types (default: all of {', '.join(TYPES)})")
    ap.add_argument("--n1", type=int, default=8, help="super-blocks of the short call (8)")
    ap.add_argument("--n2", type=int, default=72, help="super-blocks of the long call (72)")
    ap.add_argument("--cross-prefix", default="aarch64-linux-gnu-",
                    help="prefix of gcc, g++, nm and objdump (aarch64-linux-gnu-)")
    ap.add_argument("--qemu", default="qemu-aarch64", help="qemu user-mode binary")
    ap.add_argument("--build-dir", type=Path, default=Path("/tmp/edgevlm-neon-counts"))
    ap.add_argument("--ctx", type=int, default=256,
                    help="context length whose f16 KV cache a decode step reads (256)")
    ap.add_argument("--ipc", type=float, default=2.0,
                    help="A76 instructions a cycle in these loops, the projection's assumption (2)")
    ap.add_argument("--prefill-types", default=",".join(PREFILL_TYPES),
                    help="comma-separated types of the many-token products and F16 decode "
                         f"(default: {','.join(PREFILL_TYPES)}; empty: skip them)")
    ap.add_argument("--prefill-shape", default="2048,16,32,48,96",
                    help="K,M1,M2,T1,T2 of the many-token products (2048,16,32,48,96: M "
                         "multiples of 16, T multiples of 4 and >= 16; T multiples of 48 are "
                         "whole tiles of ours (6 tokens) and of ggml's Q4_0 gemm (16))")
    ap.add_argument("--prompt-tokens", type=int, default=512,
                    help="prompt tokens of the prefill projection, one batch (512)")
    ap.add_argument("--image", type=int, default=448,
                    help="side of the square image of the encode projection (448)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    args = ap.parse_args(argv)
    types = [t for t in args.types.split(",") if t]
    unknown = [t for t in types if t not in TYPES]
    prefill_types = [t for t in args.prefill_types.split(",") if t]
    unknown += [t for t in prefill_types if t not in PREFILL_TYPES]
    dims = [int(v) for v in args.prefill_shape.split(",")]
    if unknown or args.n1 < 1 or args.n2 <= args.n1:
        ap.error(f"unknown types {unknown}" if unknown else "need 1 <= n1 < n2")
    if len(dims) != 5 or dims[1] >= dims[2] or dims[3] >= dims[4]:
        ap.error("--prefill-shape: K,M1,M2,T1,T2 with M1 < M2 and T1 < T2")
    shape = (dims[0], dims[1], dims[2], dims[3], dims[4])
    src = args.llamacpp_src or default_llamacpp_src()
    ggml_root = src / "ggml"
    tools = {t: args.cross_prefix + t for t in ("gcc", "g++", "nm", "objdump")}
    binary = build(tools["gcc"], ggml_root, args.build_dir)
    qemu = [args.qemu, "-cpu", "max", single_step_flag(args.qemu)]
    results = measure(types, binary, qemu, tools, args.n1, args.n2)
    per_256 = {r.type: (r.ours, r.ggml) for r in results}
    prefill: list[PrefillResult] = []
    if prefill_types:
        pbin = build_prefill(tools["gcc"], tools["g++"], ggml_root, args.build_dir)
        prefill = measure_prefill(prefill_types, pbin, qemu, tools, shape)
        if "f16" in prefill_types:
            fp16_bin = build_prefill(tools["gcc"], tools["g++"], ggml_root, args.build_dir,
                                     GGML_FP16_ARCH)
            prefill += measure_prefill(["f16"], fp16_bin, qemu, tools, shape, GGML_FP16_ARCH)
            for extra, b in (("", pbin), (GGML_FP16_ARCH, fp16_bin)):
                ours_f16, ggml_f16, line = measure_f16_decode(b, qemu, tools, *shape[:3])
                results.append(TypeResult(type="f16" + extra, bits_per_weight=16.0,
                                          ours_kernel="neon", ours=ours_f16, ggml=ggml_f16,
                                          results=line))
    per_256 = {r.type: (r.ours, r.ggml) for r in results}
    fits = {r.type: (r.ours, r.ggml) for r in prefill}
    assumptions = Assumptions(ipc=args.ipc, ctx=args.ctx, prompt_tokens=args.prompt_tokens)
    vision = Vision(image=args.image)
    projection = project(per_256, assumptions)
    prefill_rows = project_prefill(fits, assumptions)
    encode_rows = project_encode(fits, assumptions, vision)
    if args.json:
        json.dump({"n1": args.n1, "n2": args.n2, "llamacpp_src": str(src),
                   "cflags_ours": OUR_CFLAGS + ARCH_FLAGS, "cflags_ggml": GGML_CFLAGS + ARCH_FLAGS,
                   "cxxflags_ggml": GGML_CXXFLAGS + ARCH_FLAGS,
                   "types": [asdict(r) for r in results],
                   "projection": projection, "assumptions": asdict(assumptions),
                   "prefill_shape": shape, "prefill": [asdict(r) for r in prefill],
                   "prefill_projection": prefill_rows, "encode_projection": encode_rows,
                   "vision": asdict(vision)},
                  sys.stdout, indent=2)
        print()
        return 0
    print(f"Instructions per 256 weights, (count({args.n2} super-blocks) - count({args.n1})) "
          f"/ {args.n2 - args.n1}; qemu-aarch64 -cpu max, one instruction per TB, -d exec.")
    print(f"Ours: {' '.join(OUR_CFLAGS + ARCH_FLAGS)}; ggml ({src}): "
          f"{' '.join(GGML_CFLAGS + ARCH_FLAGS)}.\n")
    print(counts_markdown(results))
    if any(r.type.startswith("f16") for r in results):
        print(f"\nF16: one token through ev_matmul (ours: the NEON set's gemm[F16], float tiles "
              "of 4 rows) and ggml_vec_dot_f16 per row on F16-rounded activations (llamafile "
              f"declines one token), per 256 weights of {shape[0]}-wide rows: the slope over "
              f"{shape[1]} -> {shape[2]} rows, each row's own costs included (fixed 0); "
              f"F16 (ggml {GGML_FP16_ARCH}): ggml built -march=armv8.2-a+dotprod{GGML_FP16_ARCH}.")
    print()
    for r in results:
        print(f"    {r.results}")
    print()
    print(projection_markdown(projection, assumptions))
    if not prefill:
        return 0
    k, m1, m2, t1, t2 = shape
    print(f"\nMany-token products, K = {k}: instructions(M, T) = a*M*T + b*M + c*T + d fitted "
          f"to M = {m1}, {m2} rows x T = {t1}, {t2} tokens; per weight x token = a / K, per "
          "weight = b / K, per token x column = c / K. Ours: ev_matmul (one thread, the NEON "
          f"set); ggml: {GGML_CXXFLAGS[0]} {' '.join(GGML_CXXFLAGS[1:] + ARCH_FLAGS)}.\n")
    print(prefill_counts_markdown(prefill))
    print()
    for p in prefill:
        print(f"    {p.results}")
    print()
    print(prefill_markdown(prefill_rows, assumptions))
    print()
    print(encode_markdown(encode_rows, assumptions, vision))
    return 0


if __name__ == "__main__":
    sys.exit(main())
