"""The engine bench's ttft and cold stages, run for real on the bundled demo model.

Only edgevlm: llama.cpp's side needs the bench venv (a ~50 min source build), which CI does
not have; its code runs in the bench itself. What is checked here is what the bench reports
and promises: a repeated image is a cache hit that skips the vision encoder, the cold start's
phases add up to its total, memory and the KV size are read, and the tables render (the
plots need matplotlib, which only the bench venv has).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from edgevlm.models import demo_model_dir

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import engine_driver  # noqa: E402
import engine_report  # noqa: E402
import stage_cold  # noqa: E402
import stage_threads  # noqa: E402
import stage_ttft  # noqa: E402


@pytest.fixture
def args(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> argparse.Namespace:
    monkeypatch.setenv("EDGEVLM_BENCH_CACHE", str(tmp_path))  # worker logs go there
    monkeypatch.setattr(engine_driver, "PAUSE_S", 0.0)
    monkeypatch.setattr(stage_cold, "PAUSE_S", 0.0)
    return argparse.Namespace(engines=["edgevlm"], runs=1, threads=1, ctx=512, batch=128,
                              cold_ctx=256, cold_cache=True, edgevlm_python=sys.executable)


def test_ttft_stage_hit_skips_the_encoder(args: argparse.Namespace) -> None:
    out = stage_ttft.run_ttft("demo", demo_model_dir(), args, "")
    e = out["engines"]["edgevlm"]
    miss, hit = e["miss"], e["hit"]
    assert len(miss["runs_ms"]) == len(hit["runs_ms"]) == 1
    assert miss["encoder_calls"] == 1 and miss["cache_hit"] is False
    assert hit["encoder_calls"] == 0 and hit["cache_hit"] is True and hit["encode_ms"] == 0
    assert miss["encode_ms"] > 0 and miss["image_tokens"] > 0
    assert miss["prompt_tokens"] == hit["prompt_tokens"] > miss["image_tokens"]
    assert "ratio" not in out  # no llama.cpp in this run
    md = "\n".join(stage_ttft.markdown(out))
    assert "edgevlm, cached image" in md and "vision encoder calls 0" in md


def test_cold_stage_phases_memory_and_report(args: argparse.Namespace) -> None:
    out = stage_cold.run_cold("demo", demo_model_dir(), args, "")
    e = out["engines"]["edgevlm"]
    assert out["modes"] == ["warm", "cold"]
    for mode in out["modes"]:
        r = e[mode]
        phases = sum(r[p] for p in stage_cold.PHASES)
        assert r["ms"] == pytest.approx(phases, rel=1e-6)
        assert 0 < r["load_to_answer_ms"] < r["ms"]
        assert r["answer_tokens"] >= 1 and r["prompt_tokens"] > 0
        assert r["rss_load_mib"] == pytest.approx(r["anon_load_mib"] + r["file_load_mib"],
                                                  abs=1)
    kv = e["kv"]  # f32 K and V of every layer at the allocated context
    assert kv["n_ctx"] == 256 and kv["bytes_per_value"] == 4
    assert e["kv_mib"] == pytest.approx(2 * kv["n_layer"] * 256 * kv["n_head_kv"]
                                        * kv["head_dim"] * 4 / 2**20)
    assert e["budget_mib"] == pytest.approx(out["files_mib"] + e["kv_mib"] + 200, abs=0.1)
    md = "\n".join(stage_cold.markdown(out))
    assert "| edgevlm | cold |" in md


def test_thread_scaling_table() -> None:
    entry = {"ms": 100.0, "tok_s": 10.0, "cpu_ms": 90.0, "runs_ms": [100.0]}

    def type_run(scale: float) -> dict[str, object]:
        ops = {op: {**entry, "tok_s": 10.0 * scale, "ms": 100.0 / scale}
               for op in ("pp16", "vit64")}
        return {"engines": {"edgevlm": {"ops": ops}, "llama.cpp": {"ops": ops}},
                "ratios": {"llama.cpp": {"pp16": 1.0, "vit64": 1.0}}}

    report = {
        "meta": {"date": "2026-01-01 00:00", "runs": 1, "threads": 2, "ops": [], "ctx": 1024,
                 "batch": 512, "loadavg_start": [0.1], "loadavg_end": [0.1]},
        "machine": {"Model name": "cpu", "cores": 2}, "versions": {}, "types": [],
        "threads": {"type": "q8_0", "ops": ["pp16", "vit64"], "threads": [1, 2],
                    "by_threads": {"1": type_run(1.0), "2": type_run(1.8)}}}
    md = engine_report.markdown(report)
    assert "| prefill 16 (tok/s) | 2 | 18.0 | 1.80× |" in md
    assert "| ViT 64×64 (ms) | 2 | 56 | 1.80× |" in md
    assert stage_threads.default_threads(2) == [1, 2]
    assert stage_threads.default_threads(12) == [1, 2, 4, 8, 12]


def test_llama_mtmd_gets_the_vit_ops_and_a_ratio_column() -> None:
    ops = ["pp128", "tg64", "vit448"]
    plan = {e: [op for op in ops if engine_driver.runs_op(e, op)]
            for e in ("edgevlm", "llama-bench", "llama-mtmd")}
    assert plan == {"edgevlm": ops, "llama-bench": ["pp128", "tg64"], "llama-mtmd": ["vit448"]}

    def entry(ms: float, **kw: float) -> dict[str, float]:
        return {"ms": ms, "runs_ms": [ms], **kw}

    ours = {"pp128": entry(1000.0, tok_s=128.0), "tg64": entry(2000.0, tok_s=32.0),
            "vit448": entry(1000.0, image_tokens=196)}
    engines = {"edgevlm": ours,
               "llama-bench": {"pp128": entry(2000.0, tok_s=64.0),
                               "tg64": entry(1000.0, tok_s=64.0)},
               "llama-mtmd": {"vit448": entry(1500.0, image_tokens=196)}}
    t = {"type": "q4_0", "vision_type": "f16", "ratios_fast": {},
         "engines": {e: {"ops": o, "rss_after_load_mib": 1.0, "peak_rss_mib": 2.0}
                     for e, o in engines.items()}}
    t["engines"]["edgevlm"]["settings"] = {"precision": "exact"}   # what auto resolved to
    # run_type's ratios: the peer's time / edgevlm's (> 1: edgevlm faster), ms for the ViT too
    t["ratios"] = {p: {op: engines[p][op]["ms"] / ours[op]["ms"] for op in engines[p]}
                   for p in ("llama-bench", "llama-mtmd")}
    report = {"meta": {"date": "2026-01-01 00:00", "runs": 1, "threads": 2, "ops": ops,
                       "ctx": 1024, "batch": 512, "isa": "avx2", "loadavg_start": [0.1],
                       "loadavg_end": [0.1]},
              "machine": {"Model name": "cpu", "cores": 2}, "versions": {}, "types": [t]}
    md = engine_report.markdown(report)
    assert ("| type | measurement | edgevlm | llama-bench | edgevlm / llama-bench | llama-mtmd "
            "| edgevlm / llama-mtmd |") in md
    assert "| q4_0 | ViT 448×448 (ms), 196 tok | 1000 | — |  | 1500 | 1.50 |" in md
    assert "| q4_0 | decode 64 (tok/s) | 32.0 | 64.0 | **0.50** | — |  |" in md
    assert "llama-mtmd: the ViT only" in md
    assert "edgevlm: the default precision, auto (q4_0 exact)" in md
