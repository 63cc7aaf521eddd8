"""PeriodicThread: the one background loop of the bridge's health and the progress beacon."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from edgevlm.frontdoors.mqtt.periodic import PeriodicThread

log = logging.getLogger("tests.periodic")


def test_it_ticks_until_stopped_and_a_failing_tick_is_logged_not_fatal(
        caplog: pytest.LogCaptureFixture) -> None:
    calls: list[int] = []
    three = threading.Event()

    def tick() -> None:
        calls.append(len(calls))
        if len(calls) == 1:
            raise RuntimeError("boom")
        if len(calls) >= 3:
            three.set()

    loop = PeriodicThread("test-periodic", 0.01, tick, log=log, failure="the tick failed")
    with caplog.at_level(logging.ERROR, logger="tests.periodic"):
        loop.start()
        assert three.wait(5.0), "the loop stopped after the failing tick"
        loop.stop()
    assert not loop._thread.is_alive() and loop._thread.daemon
    assert loop._thread.name == "test-periodic"
    after = len(calls)
    time.sleep(0.05)  # five intervals
    assert len(calls) == after, "ticked after stop()"
    failures = [r for r in caplog.records if r.getMessage() == "the tick failed"]
    assert len(failures) == 1 and failures[0].exc_info is not None


def test_stop_before_start_is_harmless() -> None:
    PeriodicThread("test-periodic", 10.0, lambda: None, log=log, failure="x").stop()
