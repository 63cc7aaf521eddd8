"""Fuzzing the four parsers that read untrusted input (issue 7): the MQTT request admission,
the ``vision_tokens`` decoder, the config loader and the Frigate event parser.

Each target gets 10,000 hypothesis examples in CI (``EDGEVLM_LONG=1``: 50,000), biased to
near-valid inputs mutated from the committed corpus (tests/reliability/corpus/<target>/), plus
byte edits and raw bytes. The property (tests/fuzz/python/targets.py): the input parses to a
valid object, or raises the error type the callers catch, with a message; never another
exception, never a hang (the deadline). The corpus entries themselves run first, every time.
The long coverage-guided runs are atheris (tests/fuzz/python/, tests/fuzz/long_run.sh).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings

from tests.fuzz.python.strategies import inputs
from tests.fuzz.python.targets import CHECKS, TARGETS, seeds
from tests.reliability.profile import LONG

EXAMPLES = 50_000 if LONG else 10_000
FUZZ = settings(max_examples=EXAMPLES, deadline=timedelta(seconds=2), database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])


@pytest.mark.parametrize("target", TARGETS)
def test_corpus_entries_keep_the_property(target: str) -> None:
    entries = seeds(target)
    assert len(entries) >= 4, f"the {target} corpus is missing"
    for data in entries:
        CHECKS[target](data)


@FUZZ
@given(inputs("request"))
def test_fuzz_request_parser(data: bytes) -> None:
    CHECKS["request"](data)


@FUZZ
@given(inputs("vision_tokens"))
def test_fuzz_vision_tokens_decoder(data: bytes) -> None:
    CHECKS["vision_tokens"](data)


@FUZZ
@given(inputs("config"))
def test_fuzz_config_loader(data: bytes) -> None:
    CHECKS["config"](data)


@FUZZ
@given(inputs("frigate"))
def test_fuzz_frigate_payload_parser(data: bytes) -> None:
    CHECKS["frigate"](data)
