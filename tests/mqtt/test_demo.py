"""``edgevlm demo`` as a user runs it: a subprocess, no configuration, every sample answered,
and a run that ends with how many answers match the scene, nothing after it (issue 19)."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from typing import Any

import pytest

from edgevlm import demo
from edgevlm.demo import load_samples, matches
from tests.mqtt.conftest import Broker, mosquitto_binary

SUMMARY_LINE = re.compile(r"^(\d+)/(\d+) answers match the scene$")


def run_demo(*argv: str) -> tuple[list[dict[str, Any]], subprocess.CompletedProcess[str]]:
    """The per-sample records of ``edgevlm demo --json``; checks the final summary object and
    that nothing went to stderr (a good run ends quietly)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGEVLM_")}
    proc = subprocess.run([sys.executable, "-m", "edgevlm", "demo", "--json", "--threads", "1",
                           *argv], capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr == ""
    *records, summary = [json.loads(line) for line in proc.stdout.splitlines()]
    check_summary(records, summary)
    return records, proc


def check_summary(records: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    assert all("summary" not in r for r in records)
    for r in records:
        assert r["match"] == (r["status"] == "ok" and matches(r["text"], r["truth"])), r
    assert summary == {"summary": True, "samples": len(load_samples()),
                       "answered": sum(r["status"] == "ok" for r in records),
                       "match": sum(r["match"] for r in records)}


def check_every_sample_answered(lines: list[dict[str, Any]]) -> None:
    samples = load_samples()
    assert [line["sample"] for line in lines] == [s.name for s in samples]
    for line in lines:
        assert line["status"] == "ok", line
        assert isinstance(line["text"], str) and line["model"]
        metrics = line["metrics"]
        assert isinstance(metrics, dict) and metrics["total_ms"] > 0
    assert {line["via"] for line in lines} == {"request", "camera"}


def test_an_answer_matches_the_truth_up_to_case_and_whitespace() -> None:
    assert matches(" Yes\n", "yes")
    assert matches("a red  cat", "A red cat")
    assert not matches("a red cat.", "a red cat")
    assert not matches("a red", "a red cat")
    assert not matches(None, "nothing")


def test_demo_with_a_private_mosquitto() -> None:
    if mosquitto_binary() is None:
        pytest.fail("mosquitto is not installed (apt-get install mosquitto)")
    lines, _ = run_demo("--broker-kind", "mosquitto")
    check_every_sample_answered(lines)


def test_demo_with_the_embedded_broker() -> None:
    lines, _ = run_demo("--broker-kind", "embedded")
    check_every_sample_answered(lines)


def test_demo_with_the_embedded_broker_ends_quietly_every_time(
        caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    """In-process, repeated: the daemon's and the embedded broker's shutdowns log nothing at
    WARNING or above (they raced into paho's and asyncio's ERROR lines)."""
    caplog.set_level(logging.WARNING)
    for _ in range(5):
        out: list[str] = []
        assert demo.run_demo(json_output=True, out=out.append, broker_kind="embedded",
                             threads=1) == 0
        *records, summary = [json.loads(line) for line in out]
        check_summary(records, summary)
        assert summary["answered"] == len(load_samples())
    problems = [f"{r.name}: {r.getMessage()}" for r in caplog.records
                if r.levelno >= logging.WARNING]
    assert problems == []
    assert capsys.readouterr().err == ""


def test_demo_uses_a_configured_broker_that_answers(broker: Broker) -> None:
    lines, _ = run_demo("--broker", f"{broker.host}:{broker.port}")
    check_every_sample_answered(lines)
    assert "edgevlm-demo" in broker.log()  # the daemon connected to this broker


def test_demo_text_output_names_each_sample_and_ends_with_the_matches() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGEVLM_")}
    proc = subprocess.run([sys.executable, "-m", "edgevlm", "demo", "--threads", "1",
                           "--broker-kind", "embedded"], capture_output=True, text=True,
                          timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr == ""
    samples = load_samples()
    for sample in samples:
        assert sample.name in proc.stdout
    assert "total" in proc.stdout
    lines = proc.stdout.splitlines()
    answers = [line.removeprefix("      -> ") for line in lines if line.startswith("      -> ")]
    truths = [line.strip().removeprefix("(the scene shows: ").removesuffix(")")
              for line in lines if line.strip().startswith("(the scene shows: ")]
    assert truths == [s.truth for s in samples] and len(answers) == len(samples)
    expected = sum(matches(a, t) for a, t in zip(answers, truths, strict=True))
    assert lines[-2] == f"edgevlm demo: {len(samples)}/{len(samples)} samples answered"
    found = SUMMARY_LINE.match(lines[-1])
    assert found is not None, lines[-3:]
    assert (int(found[1]), int(found[2])) == (expected, len(samples))
