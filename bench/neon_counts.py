#!/usr/bin/env python3
"""NEON instructions each weight type's decode dot product executes per 256 weights: ours
(the ``neon-dotprod`` kernel set, ``ev_kernels_arm_neon()->vec_dot[type]``) against
llama.cpp's (``ggml_vec_dot_<type>_q8_0`` / ``_q8_K`` of ``ggml-cpu/arch/arm/quants.c``),
both compiled for ``-march=armv8.2-a+dotprod`` (the RK3588's Cortex-A76) with the aarch64
cross compiler at ``-O3``, counted under qemu-user.

    python bench/neon_counts.py [--llamacpp-src DIR] [--types q4_K,q6_K] [--json]

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
from rk3588_projection import Assumptions, project, projection_markdown  # noqa: E402

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


def counts_markdown(results: list[TypeResult]) -> str:
    rows = ["| type | bits/weight | ours instr/256 w | ggml instr/256 w | ratio | "
            "fixed cost per call (ours / ggml) | ours ASIMD / ld-st per 256 w | "
            "ggml ASIMD / ld-st per 256 w |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        note = " (scalar fallback)" if r.ours_kernel != "neon" else ""
        rows.append(
            f"| {r.type.upper()}{note} | {r.bits_per_weight:.4g} | {r.ours.per_256:.1f} | "
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
                    help="prefix of gcc, nm and objdump (aarch64-linux-gnu-)")
    ap.add_argument("--qemu", default="qemu-aarch64", help="qemu user-mode binary")
    ap.add_argument("--build-dir", type=Path, default=Path("/tmp/edgevlm-neon-counts"))
    ap.add_argument("--ctx", type=int, default=256,
                    help="context length whose f16 KV cache a decode step reads (256)")
    ap.add_argument("--ipc", type=float, default=2.0,
                    help="A76 instructions a cycle in these loops, the projection's assumption (2)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    args = ap.parse_args(argv)
    types = [t for t in args.types.split(",") if t]
    unknown = [t for t in types if t not in TYPES]
    if unknown or args.n1 < 1 or args.n2 <= args.n1:
        ap.error(f"unknown types {unknown}" if unknown else "need 1 <= n1 < n2")
    src = args.llamacpp_src or default_llamacpp_src()
    ggml_root = src / "ggml"
    tools = {t: args.cross_prefix + t for t in ("gcc", "nm", "objdump")}
    binary = build(tools["gcc"], ggml_root, args.build_dir)
    qemu = [args.qemu, "-cpu", "max", single_step_flag(args.qemu)]
    results = measure(types, binary, qemu, tools, args.n1, args.n2)
    per_256 = {r.type: (r.ours, r.ggml) for r in results}
    assumptions = Assumptions(ipc=args.ipc, ctx=args.ctx)
    projection = project(per_256, assumptions)
    if args.json:
        json.dump({"n1": args.n1, "n2": args.n2, "llamacpp_src": str(src),
                   "cflags_ours": OUR_CFLAGS + ARCH_FLAGS, "cflags_ggml": GGML_CFLAGS + ARCH_FLAGS,
                   "types": [asdict(r) for r in results],
                   "projection": projection, "assumptions": asdict(assumptions)},
                  sys.stdout, indent=2)
        print()
        return 0
    print(f"Instructions per 256 weights, (count({args.n2} super-blocks) - count({args.n1})) "
          f"/ {args.n2 - args.n1}; qemu-aarch64 -cpu max, one instruction per TB, -d exec.")
    print(f"Ours: {' '.join(OUR_CFLAGS + ARCH_FLAGS)}; ggml ({src}): "
          f"{' '.join(GGML_CFLAGS + ARCH_FLAGS)}.\n")
    print(counts_markdown(results))
    print()
    for r in results:
        print(f"    {r.results}")
    print()
    print(projection_markdown(projection, assumptions))
    return 0


if __name__ == "__main__":
    sys.exit(main())
