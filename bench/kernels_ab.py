#!/usr/bin/env python3
"""Two builds of ``bench_kernels`` side by side: old and new alternating, paired medians.

    make -C native BUILD=/tmp/old bench     # in a worktree of the old commit
    make -C native bench                    # this checkout
    python bench/kernels_ab.py --old /tmp/old/bench_kernels --new native/build/bench_kernels \\
        --types iq4_xs --tok 1 --threads 1,2 --rounds 7

Each round runs both binaries once per thread count (the order flips every round, so a slow
stretch of a shared VM falls on both), each run ``bench_kernels --types T --tok N --threads K
--no-stream --runs 5``. Printed per shape and thread count: the median GB/s of weights (wall
clock) of each binary over the rounds and the median of the per-round new / old ratios.
``--json`` prints the same as one object. Kernel changes quote this table
(bench/README-kernels.md).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys

LINE = re.compile(r"^(\S+)\s+(\d+x\d+)\s+n_tok=(\d+)\s+threads=(\d+)\s+([\d.]+) ms\s+([\d.]+) GB/s")


def run(binary: str, types: str, tok: int, threads: int) -> dict[tuple[str, str], float]:
    """(type, shape) -> GB/s of one bench_kernels run."""
    out = subprocess.run([binary, "--types", types, "--tok", str(tok), "--threads", str(threads),
                          "--no-stream", "--runs", "5"], capture_output=True, text=True,
                         check=True).stdout
    return {(m[1], m[2]): float(m[6]) for m in map(LINE.match, out.splitlines()) if m}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, help="the old build's bench_kernels")
    ap.add_argument("--new", required=True, help="the new build's bench_kernels")
    ap.add_argument("--types", default="iq4_xs", help="weight types, comma-separated")
    ap.add_argument("--tok", type=int, default=1, help="tokens per product (1: decode)")
    ap.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    ap.add_argument("--rounds", type=int, default=7, help="old/new alternations (default 7)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    threads = [int(t) for t in args.threads.split(",")]
    samples: dict[tuple[str, str, int], dict[str, list[float]]] = {}
    for r in range(args.rounds):
        order = [("old", args.old), ("new", args.new)]
        for name, binary in order if r % 2 == 0 else order[::-1]:
            for t in threads:
                for (wtype, shape), gbs in run(binary, args.types, args.tok, t).items():
                    samples.setdefault((wtype, shape, t), {"old": [], "new": []})[name].append(gbs)
        print(f"round {r + 1}/{args.rounds}", file=sys.stderr)
    rows = []
    for (wtype, shape, t), got in sorted(samples.items()):
        ratios = [n / o for o, n in zip(got["old"], got["new"], strict=False) if o > 0]
        rows.append({"type": wtype, "shape": shape, "threads": t,
                     "old_gbs": round(statistics.median(got["old"]), 1),
                     "new_gbs": round(statistics.median(got["new"]), 1),
                     "ratio": round(statistics.median(ratios), 2), "new_samples": got["new"]})
    if args.json:
        print(json.dumps({"tok": args.tok, "rounds": args.rounds, "rows": rows}))
        return 0
    print("| product | threads | old GB/s | new GB/s | new / old (paired median) |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['type']} {row['shape']} | {row['threads']} | {row['old_gbs']} | "
              f"{row['new_gbs']} | {row['ratio']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
