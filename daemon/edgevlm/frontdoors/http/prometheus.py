"""``GET /metrics``: the daemon's counters in the Prometheus text format (0.0.4).

vLLM's names where vLLM has the metric (``vllm:num_requests_waiting``,
``vllm:time_to_first_token_seconds``, ...; its histogram buckets too), so a Grafana board made
for vLLM reads a board; ``edgevlm_*`` for the rest (errors by type, the vision cache)."""

from __future__ import annotations

from typing import Any

from ...latency_histograms import Histogram, Totals

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class _Text:
    def __init__(self, model: str) -> None:
        self.model = _label(model)
        self.lines: list[str] = []

    def metric(self, name: str, kind: str, help_: str,
               samples: list[tuple[str, dict[str, str], float]]) -> None:
        self.lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
        for suffix, labels, value in samples:
            text = ",".join(f'{k}="{_label(v)}"' for k, v in
                            {"model_name": self.model, **labels}.items())
            self.lines.append(f"{name}{suffix}{{{text}}} {value:g}")

    def histogram(self, name: str, help_: str, h: Histogram) -> None:
        samples: list[tuple[str, dict[str, str], float]] = [
            ("_bucket", {"le": le}, n) for le, n in h.cumulative()]
        samples += [("_sum", {}, h.total), ("_count", {}, h.count)]
        self.metric(name, "histogram", help_, samples)


def render(model: str, snapshot: dict[str, Any], totals: Totals) -> str:
    """The exposition text of one daemon's ``Metrics.snapshot()`` and ``totals()``."""
    out = _Text(model)
    requests = snapshot["requests"]
    out.metric("vllm:num_requests_running", "gauge", "Requests being answered.",
               [("", {}, 1.0 if snapshot["busy"] else 0.0)])
    out.metric("vllm:num_requests_waiting", "gauge", "Requests waiting in the queue.",
               [("", {}, snapshot["queue_depth"])])
    out.metric("vllm:request_success_total", "counter", "Answered requests by finish reason.",
               [("", {"finished_reason": r}, n) for r, n in sorted(totals.finished.items())]
               or [("", {"finished_reason": "stop"}, 0)])
    out.metric("vllm:prompt_tokens_total", "counter", "Prompt tokens of answered requests.",
               [("", {}, totals.prompt_tokens)])
    out.metric("vllm:generation_tokens_total", "counter", "Tokens generated.",
               [("", {}, totals.generation_tokens)])
    out.histogram("vllm:time_to_first_token_seconds", "Time to the first token.",
                  totals.ttft_s)
    out.histogram("vllm:time_per_output_token_seconds", "Time per token after the first.",
                  totals.tpot_s)
    out.histogram("vllm:e2e_request_latency_seconds", "Whole answer, arrival to last token.",
                  totals.e2e_s)
    out.metric("edgevlm_requests_received_total", "counter", "Requests taken (MQTT and HTTP).",
               [("", {}, requests["received"])])
    out.metric("edgevlm_requests_errored_total", "counter", "Requests refused or failed, by "
               "error type.", [("", {"type": t}, n) for t, n in
                               sorted(requests["errors_by_type"].items())]
               or [("", {"type": "none"}, 0)])
    cache = snapshot["cache"]
    out.metric("edgevlm_vision_cache_hits_total", "counter", "Vision-feature cache hits.",
               [("", {}, cache["hits"])])
    out.metric("edgevlm_vision_cache_misses_total", "counter", "Vision-feature cache misses.",
               [("", {}, cache["misses"])])
    out.metric("edgevlm_vision_cache_bytes", "gauge", "Bytes held by the vision cache.",
               [("", {}, cache["bytes"])])
    if snapshot.get("rss_bytes") is not None:
        out.metric("process_resident_memory_bytes", "gauge", "Resident memory.",
                   [("", {}, snapshot["rss_bytes"])])
    return "\n".join(out.lines) + "\n"
