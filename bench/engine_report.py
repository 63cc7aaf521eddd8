"""The engine bench's report: the Markdown tables and the plots of every stage."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import stage_camera
import stage_cold
import stage_threads
import stage_ttft
from engine_common import FLOOR, llama_python, log, op_fmt, op_label, op_value
from engine_driver import ENGINES, OURS, PEERS, RATIO_KEY


def _auto_names(report: dict[str, Any]) -> str:
    """What the default precision resolved to, type by type ("q4_k_m fast, f16 exact")."""
    names = [f"{t['type']} {t['engines']['edgevlm'].get('settings', {}).get('precision', '?')}"
             for t in report["types"] if "edgevlm" in t["engines"]]
    return ", ".join(names) or "not run"


def markdown(report: dict[str, Any]) -> str:
    m, meta = report["machine"], report["meta"]
    peers = [p for p in PEERS if any(p in t["engines"] for t in report["types"])]
    ours = [o for o in OURS if any(o in t["engines"] for t in report["types"])]
    lines = [f"### Qwen3-VL-2B shape, {meta['threads']} threads — {meta['date']}", "",
             f"Machine: {m.get('Model name', '?')}, {m.get('cores')} cores "
             f"({', '.join(m.get('simd', []))}), {m.get('mem_total_gib', '?')} GiB; load "
             f"average {meta['loadavg_start'][0]:.2f} at start, {meta['loadavg_end'][0]:.2f} at "
             f"end. Medians of {meta['runs']} runs, engines alternating per measurement; "
             f"context {meta['ctx']}, prefill batch {meta['batch']}."
             + (" **Both engines pinned to the AVX2 code path** (edgevlm "
                "EDGEVLM_MAX_CPU_ISA=avx2, llama.cpp's tools built with AVX2/FMA/F16C only)."
                if meta.get("isa") == "avx2" else ""), ""]
    head = "| type | measurement |" + "".join(f" {o} |" for o in ours)
    rule = "|---|---|" + "---|" * len(ours)
    for p in peers:
        head += f" {p} |" + "".join(f" {o} / {p} |" for o in ours)
        rule += "---|" * (1 + len(ours))
    if report["types"]:
        lines += [head, rule]
    for t in report["types"]:
        eng = t["engines"]
        for op in meta["ops"]:
            label = op_label(op)
            if op.startswith("vit"):
                counts = {eng[x]["ops"][op]["image_tokens"] for x in eng
                          if "image_tokens" in eng[x]["ops"].get(op, {})}
                label += ", " + "/".join(f"{c:.0f}" for c in sorted(counts)) + " tok"
            row = f"| {t['type']} | {label} |" + "".join(
                f" {op_fmt(eng.get(o, {}).get('ops', {}).get(op), op)} |" for o in ours)
            for p in peers:
                row += f" {op_fmt(eng.get(p, {}).get('ops', {}).get(op), op)} |"
                for o in ours:
                    r = t.get(RATIO_KEY[o], {}).get(p, {}).get(op)
                    rs = "" if r is None else (f"**{r:.2f}**" if r < FLOOR else f"{r:.2f}")
                    row += f" {rs} |"
            lines.append(row)

        def mem(x: dict[str, Any], vs_bench: bool = "llama-bench" in eng) -> str:
            if "peak_rss_mib" not in x:
                return "—"
            text = ""
            if x.get("mmproj_rss_mib") and vs_bench:   # the files llama-bench loads
                v = x["mmproj_rss_mib"]
                text = (f" (text model: {x['rss_after_load_mib'] - v:.0f} / "
                        f"{x['peak_rss_mib'] - v:.0f})")
            return f"{x['rss_after_load_mib']:.0f} / {x['peak_rss_mib']:.0f}{text}"

        row = f"| {t['type']} | RSS after load / peak (MiB) |" + "".join(
            f" {mem(eng.get(o, {}))} |" for o in ours)
        for p in peers:
            row += f" {mem(eng.get(p, {}))} |" + " |" * len(ours)
        lines.append(row)
    if report["types"]:
        lines += ["", "Ratios are speed ratios edgevlm / peer (> 1: edgevlm faster); **bold**: "
                  f"below {FLOOR} (issue 6's targets). edgevlm: the default precision, auto "
                  "(" + _auto_names(report) + "); edgevlm-exact, edgevlm-fast: that precision "
                  "(fast: llama.cpp's rounding of prefill/ViT activations). Vision tower storage: "
                  + ", ".join(f"{t['type']} → {t['vision_type']}" for t in report["types"])
                  + " (transformers: the bf16 checkpoint)." + _peer_notes(peers), ""]
    lines += stage_sections(report)
    lines += ["Versions: " + "; ".join(f"{k}: {v}" for k, v in report["versions"].items())]
    return "\n".join(lines) + "\n"


def _peer_notes(peers: list[str]) -> str:
    """How the peers that are llama.cpp's own tools were timed (their empty cells: the ops
    they do not measure)."""
    notes = {"llama-bench": " llama-bench: prefill and decode, a `llama-bench -r 1` process "
                            "per measurement, its own `avg_ns`.",
             "llama-mtmd": " llama-mtmd: the ViT only, a `llama-mtmd-cli -n 1` process per "
                           "measurement on the same pair and image, its own \"mtmd batch "
                           "encoding done in N ms\" (whole ms; load, image decoding, "
                           "preprocessing and prefill excluded)."}
    return "".join(notes[p] for p in peers if p in notes)


def stage_sections(report: dict[str, Any]) -> list[str]:
    """The ttft / camera / cold / threads stages' tables, for those that ran."""
    lines: list[str] = []
    if report.get("ttft"):
        lines += stage_ttft.markdown(report["ttft"])
    if report.get("camera"):
        lines += stage_camera.markdown(report["camera"])
    if report.get("cold"):
        lines += stage_cold.markdown(report["cold"])
    if report.get("threads"):
        lines += stage_threads.markdown(report["threads"])
    return lines


def plot(report: dict[str, Any], path: Path) -> None:
    """``path``: the engine stage's bars by type (when it ran); ``<path>-stages.png``: the
    other stages' panels (when any ran)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if report["types"]:
        _plot_engine(report, path, plt)
    if any(report.get(s) for s in ("ttft", "camera", "cold", "threads")):
        _plot_stages(report, stages_png(path), plt)


def stages_png(path: Path) -> Path:
    return path.with_name(path.stem + "-stages.png")


def _plot_stages(report: dict[str, Any], path: Path, plt: Any) -> None:
    panels: list[Any] = []
    if report.get("ttft"):
        panels.append(lambda ax: stage_ttft.draw(ax, report["ttft"]))
    if report.get("camera"):
        panels.append(lambda ax: stage_camera.draw(ax, report["camera"]))
    if report.get("cold"):
        panels.append(lambda ax: stage_cold.draw(ax, report["cold"]))
    scaling = report.get("threads")
    n = len(panels) + (len(scaling["ops"]) if scaling else 0)
    fig, axes = plt.subplots(1, n, figsize=(3.6 * n, 4.0), squeeze=False)
    for ax, draw in zip(axes[0], panels, strict=False):
        draw(ax)
    if scaling:
        stage_threads.draw(list(axes[0][len(panels):]), scaling)
    meta = report["meta"]
    fig.suptitle(f"Qwen3-VL-2B shape, {meta['date']}, median of {meta['runs']} — "
                 f"{report['machine'].get('Model name', '')}, load average "
                 f"{meta['loadavg_start'][0]:.1f}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_engine(report: dict[str, Any], path: Path, plt: Any) -> None:
    ops = report["meta"]["ops"]
    types = [t["type"] for t in report["types"]]
    engines = [e for e in ENGINES if any(e in t["engines"] for t in report["types"])]
    fig, axes = plt.subplots(1, len(ops), figsize=(3.3 * len(ops), 4.0), squeeze=False)
    width = 0.8 / len(engines)
    colors = {"edgevlm": "#1f77b4", "edgevlm-exact": "#6baed6", "edgevlm-fast": "#9ecae1",
              "llama.cpp": "#ff7f0e", "llama-bench": "#d62728", "llama-mtmd": "#fdae6b",
              "transformers": "#2ca02c"}
    for ax, op in zip(axes[0], ops, strict=True):
        for k, engine in enumerate(engines):
            xs, vals = [], []
            for i, t in enumerate(report["types"]):
                v = op_value(t["engines"].get(engine, {}).get("ops", {}).get(op), op)
                if v is not None:
                    xs.append(i + (k - (len(engines) - 1) / 2) * width)
                    vals.append(v)
            ax.bar(xs, vals, width, label=engine, color=colors.get(engine))
        ax.set_xticks(range(len(types)), types)
        ax.set_title(op_label(op) + (" — lower is better" if op.startswith("vit") else ""),
                     fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    meta = report["meta"]
    fig.suptitle(f"Qwen3-VL-2B shape, {meta['threads']} threads, {meta['date']}, median of "
                 f"{meta['runs']} — {report['machine'].get('Model name', '')}, load average "
                 f"{meta['loadavg_start'][0]:.1f}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_plot(report_path: Path, png: Path) -> None:
    """The PNG, drawn here if matplotlib is importable, else by the bench venv's python."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        py = llama_python()
        if py.exists():
            cli = Path(__file__).resolve().parent / "bench_engine.py"
            done = subprocess.run([str(py), str(cli), "--plot", str(report_path), str(png)],
                                  check=False)
            if done.returncode != 0:
                log(f"the plot failed (exit {done.returncode}); redraw with --render")
        else:
            log("no matplotlib: skipping the plot")
        return
    plot(json.loads(report_path.read_text()), png)

