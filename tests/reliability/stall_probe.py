"""A witness for the machine's own pauses: a separate process that sleeps 2 ms at a time and
records every wake-up that came more than ``threshold_ms`` late.

A shared virtual machine stops its guest now and then (the host schedules other guests); such
a pause delays the daemon, the broker and the load client alike, and at a load of rho the queue
it leaves takes rho / (1 - rho) times the pause to drain (3x at 75 %). The soak reports the
pauses next to its latency tail, so a tail made by the machine is told apart from one made by
the daemon. The probe runs at the default priority, needs ~1 % of a core, and uses
CLOCK_MONOTONIC (the same clock as the ledger).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PROBE = r"""
import sys, time
threshold = float(sys.argv[1]) / 1e3
out = open(sys.argv[2], "w", buffering=1)
last = time.monotonic()
while True:
    time.sleep(0.002)
    now = time.monotonic()
    late = now - last - 0.002
    if late > threshold:
        out.write(f"{last:.4f} {late * 1e3:.1f}\n")
    last = now
"""


class StallProbe:
    def __init__(self, path: Path, threshold_ms: float = 20.0) -> None:
        self.path = path
        self.proc = subprocess.Popen([sys.executable, "-c", PROBE, str(threshold_ms), str(path)])

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def stalls(self, start: float, end: float) -> list[tuple[float, float]]:
        """(when, how many ms late) of the pauses that began in [start, end)."""
        out = []
        for line in self.path.read_text().splitlines():
            at, ms = (float(v) for v in line.split())
            if start <= at < end:
                out.append((at, ms))
        return out
