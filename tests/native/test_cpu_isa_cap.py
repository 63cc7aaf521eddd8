"""``EDGEVLM_MAX_CPU_ISA`` caps the kernel set, so the AVX2 path can be measured on any x86 host.

The bench's pinned mode (``bench/bench_engine.py``, issue 27) runs edgevlm with
``EDGEVLM_MAX_CPU_ISA=avx2`` next to a llama.cpp built for AVX2 only. Each check runs in a
fresh process: the variable is read when a session picks its kernels.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODEL_DIR = REPO / "daemon" / "edgevlm" / "models" / "qwen3vl-demo"
_PROBE = """
import json
from edgevlm.core.native import ffi, lib
from edgevlm.engine import Engine
names = [ffi.string(lib.edgevlm_kernels_name(m)).decode()
         for m in (lib.EDGEVLM_KERNELS_BEST, lib.EDGEVLM_KERNELS_FAST)]
engine = Engine.load(%r, threads=2, context=512)
result = engine.generate([{"role": "user", "content": "Describe the picture."}],
                         max_tokens=8, temperature=0.0)
print(json.dumps({"names": names, "tokens": result.tokens}))
"""


def _probe(cap: str | None) -> dict[str, list]:
    env = {k: v for k, v in os.environ.items() if k != "EDGEVLM_MAX_CPU_ISA"}
    if cap is not None:
        env["EDGEVLM_MAX_CPU_ISA"] = cap
    out = subprocess.run([sys.executable, "-c", _PROBE % str(MODEL_DIR)], env=env,
                         capture_output=True, text=True, check=True, timeout=120)
    result: dict[str, list] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_scalar_cap_runs_the_reference_kernels_with_the_same_answer() -> None:
    best, scalar = _probe(None), _probe("scalar")
    assert scalar["names"] == ["scalar", "scalar"]
    assert best["names"][0] != "scalar"
    assert scalar["tokens"] == best["tokens"]


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the avx2 cap is an x86 setting")
def test_avx2_cap_leaves_out_the_avx512_sets() -> None:
    best, avx2 = _probe(None), _probe("avx2")
    assert avx2["names"] == ["avx2", "avx2"]
    assert avx2["tokens"] == best["tokens"]


def test_an_unknown_cap_changes_nothing() -> None:
    assert _probe("no-such-isa")["names"] == _probe(None)["names"]
