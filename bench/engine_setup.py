"""Building or reusing what the engine bench runs on, and describing the machine it ran on."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from engine_common import REPO, cache_root, llama_python, log
from engine_driver import VISION_TYPE

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
# --types lq-<type>: the text file written by llama.cpp's own llama-quantize (its mix)
LLAMA_QUANTIZE_PREFIX = "lq-"
LLAMA_CMAKE_ARGS = "-DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"


def ensure_llama_venv() -> str:
    """The bench venv with llama-cpp-python built from source (native flags) + matplotlib."""
    py = llama_python()
    probe = ("import llama_cpp, matplotlib; from llama_cpp import mtmd_cpp; "
             "print(llama_cpp.__version__)")
    if py.exists():
        out = subprocess.run([str(py), "-c", probe], capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.strip() == LLAMA_CPP_PYTHON_VERSION:
            return str(py)
    venv = py.parent.parent
    log(f"building llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} from source into {venv} "
        f"(CMAKE_ARGS={LLAMA_CMAKE_ARGS}); ~30 min on 2 cores")
    base = getattr(sys, "_base_executable", sys.executable)
    if not py.exists():
        subprocess.run([base, "-m", "venv", str(venv)], check=True)
    env = {**os.environ, "CMAKE_ARGS": LLAMA_CMAKE_ARGS,
           "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 2)}
    no_amx = _no_amx_flags()
    if no_amx:   # as tools/llamacpp_tools.py: the tree's AMX product crashes (llama.cpp #20824)
        log(f"AMX CPU: building without AMX (CFLAGS/CXXFLAGS {no_amx})")
        env |= {"CFLAGS": no_amx, "CXXFLAGS": no_amx}
    build_log = cache_root() / "build-llamacpp.log"
    with open(build_log, "a") as fh:
        subprocess.run([str(py), "-m", "pip", "install", "--no-binary", "llama-cpp-python",
                        f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}", "numpy", "pillow",
                        "matplotlib"], check=True, env=env, stdout=fh, stderr=subprocess.STDOUT)
    return str(py)


def _llamacpp_tools() -> Any:
    """``tools/llamacpp_tools.py``, the one place that knows how llama.cpp's tools are built."""
    tools = str(REPO / "tools")
    if tools not in sys.path:
        sys.path.insert(0, tools)
    import llamacpp_tools  # type: ignore[import-not-found]

    return llamacpp_tools


def ensure_tools(targets: list[str], variant: str) -> str:
    """llama.cpp's own tools (``llama-bench``, ...) built by ``tools/llamacpp_tools.py``."""
    return str(_llamacpp_tools().ensure_tools(targets, variant))


def _no_amx_flags() -> str:
    """The compiler flags that leave AMX out of a native llama.cpp build on this CPU, or ""."""
    tools = _llamacpp_tools()
    return tools.NO_AMX_FLAGS if tools.cpu_has_amx() else ""


def tools_build_name(variant: str) -> str:
    """How llama.cpp's tools were built for ``variant`` on this CPU, for the report."""
    return f"{_llamacpp_tools().build_plan(variant)[2]}, tools/llamacpp_tools.py"


def ensure_checkpoint(python: str) -> Path:
    sys.path.insert(0, str(REPO / "tools"))
    from make_2b_model import default_dir, is_complete  # type: ignore[import-not-found]

    out = default_dir()
    if not is_complete(out):
        log(f"building the 2B-shaped checkpoint into {out} (~1-2 min, ~5 GB RAM)")
        subprocess.run([python, str(REPO / "tools" / "make_2b_model.py"), str(out)],
                       check=True, stdout=subprocess.DEVNULL)
    return out


def ensure_gguf(python: str, checkpoint: Path, qtype: str, reconvert: bool) -> Path:
    out = cache_root() / f"gguf-{qtype}"
    marker = out / ".complete"
    if marker.is_file() and not reconvert:
        return out
    marker.unlink(missing_ok=True)
    if qtype.startswith(LLAMA_QUANTIZE_PREFIX):
        return _llama_quantize_pair(python, checkpoint, qtype, reconvert, out)
    vtype = VISION_TYPE[qtype]
    log(f"converting to {qtype} (vision {vtype}) into {out}")
    t0 = time.perf_counter()
    subprocess.run([python, "-m", "edgevlm.convert.cli", str(checkpoint), "-o", str(out),
                    "--type", qtype, "--vision-type", vtype, "-q"], check=True, cwd=str(REPO))
    marker.write_text(json.dumps({"type": qtype, "vision_type": vtype,
                                  "converted": time.ctime()}) + "\n")
    log(f"converted in {time.perf_counter() - t0:.0f} s")
    return out


def _llama_quantize_pair(python: str, checkpoint: Path, qtype: str, reconvert: bool,
                         out: Path) -> Path:
    """``lq-<type>``: llama.cpp's own ``llama-quantize <type>`` of our BF16 text file (its mix:
    e.g. its Q4_0 keeps the output matrix at Q6_K), beside our BF16 pair's F16 mmproj."""
    src = ensure_gguf(python, checkpoint, "bf16", reconvert)
    vision = ensure_gguf(python, checkpoint, "q4_0", reconvert)   # the F16 mmproj
    bin_dir = Path(ensure_tools(["llama-quantize"], "native"))
    out.mkdir(parents=True, exist_ok=True)
    ftype = qtype[len(LLAMA_QUANTIZE_PREFIX):].upper()
    log(f"llama-quantize {ftype} of {src / 'model.gguf'} into {out}")
    t0 = time.perf_counter()
    with open(cache_root() / "llama-quantize.log", "a") as fh:
        subprocess.run([str(bin_dir / "llama-quantize"), str(src / "model.gguf"),
                        str(out / "model.gguf"), ftype, str(os.cpu_count() or 2)],
                       check=True, stdout=fh, stderr=subprocess.STDOUT)
    mmproj = out / "mmproj.gguf"
    mmproj.unlink(missing_ok=True)
    os.symlink(vision / "mmproj.gguf", mmproj)
    (out / ".complete").write_text(json.dumps({"type": qtype, "by": "llama-quantize",
                                               "converted": time.ctime()}) + "\n")
    log(f"quantised in {time.perf_counter() - t0:.0f} s")
    return out


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {"platform": platform.platform(), "cores": os.cpu_count()}
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in lscpu.splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("Model name", "CPU(s)", "Thread(s) per core", "L3 cache"):
                info[key.strip()] = value.strip()
        flags = next((ln for ln in lscpu.splitlines() if ln.startswith("Flags")), "")
        info["simd"] = [f for f in ("avx2", "fma", "f16c", "avx512f", "avx512_bf16",
                                    "avx_vnni") if f" {f}" in flags]
    except OSError:
        pass
    with contextlib.suppress(ValueError, OSError):
        info["mem_total_gib"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
                                      / 2**30, 1)
    return info


def repo_state() -> dict[str, Any]:
    def git(*a: str) -> str:
        r = subprocess.run(["git", *a], capture_output=True, text=True, cwd=str(REPO))
        return r.stdout.strip()

    changed = git("status", "--porcelain", "--", "native", "daemon/edgevlm/engine")
    so = sorted((REPO / "daemon" / "edgevlm").glob("_native*.so"))
    built = (dt.datetime.fromtimestamp(so[0].stat().st_mtime).strftime("%Y-%m-%d %H:%M")
             if so else None)
    return {"commit": git("rev-parse", "--short", "HEAD"),
            "native_or_engine_modified": bool(changed), "native_module_built": built}
