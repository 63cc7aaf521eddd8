"""``edgevlm demo`` as a user runs it: a subprocess, no configuration, every sample answered."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from edgevlm.demo import load_samples
from tests.mqtt.conftest import Broker, mosquitto_binary


def run_demo(*argv: str) -> tuple[list[dict[str, object]], subprocess.CompletedProcess[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGEVLM_")}
    proc = subprocess.run([sys.executable, "-m", "edgevlm", "demo", "--json", "--threads", "1",
                           *argv], capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines()], proc


def check_every_sample_answered(lines: list[dict[str, object]]) -> None:
    samples = load_samples()
    assert [line["sample"] for line in lines] == [s.name for s in samples]
    for line in lines:
        assert line["status"] == "ok", line
        assert isinstance(line["text"], str) and line["model"]
        metrics = line["metrics"]
        assert isinstance(metrics, dict) and metrics["total_ms"] > 0
    assert {line["via"] for line in lines} == {"request", "camera"}


def test_demo_with_a_private_mosquitto() -> None:
    if mosquitto_binary() is None:
        pytest.fail("mosquitto is not installed (apt-get install mosquitto)")
    lines, _ = run_demo("--broker-kind", "mosquitto")
    check_every_sample_answered(lines)


def test_demo_with_the_embedded_broker() -> None:
    lines, _ = run_demo("--broker-kind", "embedded")
    check_every_sample_answered(lines)


def test_demo_uses_a_configured_broker_that_answers(broker: Broker) -> None:
    lines, _ = run_demo("--broker", f"{broker.host}:{broker.port}")
    check_every_sample_answered(lines)
    assert "edgevlm-demo" in broker.log()  # the daemon connected to this broker


def test_demo_text_output_names_each_sample_and_its_timing() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGEVLM_")}
    proc = subprocess.run([sys.executable, "-m", "edgevlm", "demo", "--threads", "1",
                           "--broker-kind", "embedded"], capture_output=True, text=True,
                          timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for sample in load_samples():
        assert sample.name in proc.stdout
    assert "total" in proc.stdout and "answered" in proc.stdout
