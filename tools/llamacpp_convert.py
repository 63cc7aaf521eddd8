#!/usr/bin/env python3
"""Convert a Qwen3-VL checkpoint with llama.cpp's own converter, for interop checks.

    python tools/llamacpp_convert.py HF_DIR OUT_DIR [--outtype f32|f16|bf16|q8_0]

writes ``OUT_DIR/model.gguf`` and ``OUT_DIR/mmproj.gguf`` by running llama.cpp's
``convert_hf_to_gguf.py`` twice (text, then ``--mmproj``), with llama.cpp's own ``gguf-py``.

The converter comes from the llama-cpp-python source distribution on PyPI, which vendors
llama.cpp (no other network access is needed):

    pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d DIR

and only ``vendor/llama.cpp/convert_hf_to_gguf.py``, ``vendor/llama.cpp/conversion/`` (the
per-architecture classes the script imports) and ``vendor/llama.cpp/gguf-py/`` are extracted,
to ``~/.cache/edgevlm/llama-cpp-python-0.3.36/`` (``EDGEVLM_LLAMACPP_CACHE`` overrides). The
first run takes a minute or two (pip prepares the sdist's metadata); later runs reuse the cache.
The converter needs torch, transformers and numpy (the ``reference`` extra).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path

logger = logging.getLogger("llamacpp_convert")

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
_VENDOR = "vendor/llama.cpp/"
_WANTED = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/")
_COMPLETE = ".complete"


def cache_dir() -> Path:
    override = os.environ.get("EDGEVLM_LLAMACPP_CACHE")
    if override:
        return Path(override)
    return (Path.home() / ".cache" / "edgevlm"
            / f"llama-cpp-python-{LLAMA_CPP_PYTHON_VERSION}")


def download_sdist(dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
           f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}", "-d", str(dest)]
    logger.info("downloading the llama-cpp-python %s sdist: %s", LLAMA_CPP_PYTHON_VERSION,
                " ".join(cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    found = sorted(dest.glob("llama_cpp_python-*.tar.gz"))
    if not found:  # pip may fail after saving (metadata step); the archive is what we need
        raise RuntimeError(f"pip download failed (exit {proc.returncode}):\n"
                           f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return found[0]


def extract_vendored(sdist: Path, target: Path, wanted: tuple[str, ...] | None = None) -> None:
    """The sdist's vendored llama.cpp tree (only the paths starting with one of ``wanted``,
    or all of it) into ``target``; a member that would land outside it is refused."""
    with tarfile.open(sdist, "r:gz") as tar:
        for member in tar.getmembers():
            _, _, rel = member.name.partition("/")
            if not rel.startswith(_VENDOR) or not (member.isfile() or member.isdir()):
                continue
            inner = rel[len(_VENDOR):]
            if wanted is not None and not inner.startswith(wanted):
                continue
            path = (target / inner).resolve()
            if not path.is_relative_to(target.resolve()):
                raise RuntimeError(f"unsafe path in {sdist.name}: {member.name}")
            if member.isdir():
                path.mkdir(parents=True, exist_ok=True)
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            assert source is not None
            with source, open(path, "wb") as out:
                shutil.copyfileobj(source, out)
            path.chmod(member.mode & 0o755 | 0o644)


def _extract(sdist: Path, target: Path) -> None:
    extract_vendored(sdist, target, _WANTED)
    if not (target / "convert_hf_to_gguf.py").is_file() or not (target / "gguf-py").is_dir():
        raise RuntimeError(f"{sdist.name} has no vendored llama.cpp converter")


def ensure_converter() -> Path:
    """The directory holding llama.cpp's ``convert_hf_to_gguf.py``, downloaded once."""
    target = cache_dir()
    if (target / _COMPLETE).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        staging = Path(tmp) / "extract"
        staging.mkdir()
        _extract(download_sdist(Path(tmp)), staging)
        (staging / _COMPLETE).write_text(LLAMA_CPP_PYTHON_VERSION + "\n")
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    return target


# Runs in the child: imports the converter once and converts every job (importing torch and
# transformers dominates a run, so one process does all of them).
_DRIVER = """
import sys
jobs = [line.split("\\t") for line in sys.stdin.read().splitlines() if line]
import convert_hf_to_gguf
for argv in jobs:
    sys.argv = ["convert_hf_to_gguf.py", *argv]
    convert_hf_to_gguf.main()
"""


def run_converter(hf_dir: Path, out_dir: Path,
                  outtypes: Sequence[str] = ("f16",)) -> dict[str, tuple[Path, Path]]:
    """Run llama.cpp's converter for the text model and the mmproj at each ``outtype``.

    One type writes ``out_dir/model.gguf`` + ``out_dir/mmproj.gguf``; several write
    ``out_dir/<type>/…``. Returns ``{outtype: (model, mmproj)}``."""
    converter = ensure_converter()
    results: dict[str, tuple[Path, Path]] = {}
    jobs: list[list[str]] = []
    for outtype in outtypes:
        target = out_dir if len(outtypes) == 1 else out_dir / outtype
        target.mkdir(parents=True, exist_ok=True)
        results[outtype] = (target / "model.gguf", target / "mmproj.gguf")
        for extra, out in (([], results[outtype][0]), (["--mmproj"], results[outtype][1])):
            jobs.append([str(hf_dir), "--outfile", str(out), "--outtype", outtype, *extra])
    env = {k: v for k, v in os.environ.items() if k != "NO_LOCAL_GGUF"}
    env["PYTHONPATH"] = os.pathsep.join([str(converter), str(converter / "gguf-py")])
    proc = subprocess.run([sys.executable, "-c", _DRIVER], input="\n".join(
        "\t".join(job) for job in jobs), capture_output=True, text=True, env=env, check=False)
    missing = [str(p) for pair in results.values() for p in pair if not p.is_file()]
    if proc.returncode != 0 or missing:
        raise RuntimeError(f"llama.cpp's converter failed (exit {proc.returncode}) on {hf_dir}"
                           f"{'; missing ' + ', '.join(missing) if missing else ''}\n"
                           f"{proc.stderr[-6000:]}")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("hf_dir", type=Path)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--outtype", default="f16", choices=["f32", "f16", "bf16", "q8_0"])
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        text, mmproj = run_converter(args.hf_dir, args.out_dir, [args.outtype])[args.outtype]
    except RuntimeError as exc:
        print(f"llamacpp_convert: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {text} and {mmproj}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
