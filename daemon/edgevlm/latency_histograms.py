"""Cumulative latency histograms and token counters for ``GET /metrics`` (Prometheus), beside
the windowed percentiles of :mod:`edgevlm.metrics`. Bucket bounds follow vLLM's for the same
metrics, so dashboards made for a vLLM server read a board too."""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field

TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                  5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
TPOT_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
                  5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
E2E_BUCKETS_S = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)


@dataclass
class Histogram:
    """Counts per upper bound (not cumulative here; :meth:`cumulative` is), sum and count."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)  # the last: +Inf

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def cumulative(self) -> list[tuple[str, int]]:
        """(``le`` label, observations at or below it), ``+Inf`` last."""
        out, running = [], 0
        for bound, n in zip((*map(repr, self.bounds), "+Inf"), self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out

    def copy(self) -> Histogram:
        twin = Histogram(self.bounds)
        twin.counts, twin.total, twin.count = list(self.counts), self.total, self.count
        return twin


@dataclass
class Totals:
    """Everything ``/metrics`` reports that only grows."""

    ttft_s: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS_S))
    tpot_s: Histogram = field(default_factory=lambda: Histogram(TPOT_BUCKETS_S))
    e2e_s: Histogram = field(default_factory=lambda: Histogram(E2E_BUCKETS_S))
    prompt_tokens: int = 0
    generation_tokens: int = 0
    finished: Counter[str] = field(default_factory=Counter)  # finish reason -> answers

    def answered(self, ttft_ms: float, tpot_ms: float, total_ms: float, prompt_tokens: int,
                 completion_tokens: int, finish_reason: str) -> None:
        self.ttft_s.observe(ttft_ms / 1e3)
        if completion_tokens > 1:
            self.tpot_s.observe(tpot_ms / 1e3)
        self.e2e_s.observe(total_ms / 1e3)
        self.prompt_tokens += prompt_tokens
        self.generation_tokens += completion_tokens
        self.finished[finish_reason] += 1

    def copy(self) -> Totals:
        return Totals(self.ttft_s.copy(), self.tpot_s.copy(), self.e2e_s.copy(),
                      self.prompt_tokens, self.generation_tokens, Counter(self.finished))
