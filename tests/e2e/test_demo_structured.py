"""Structured answers on the shipped demo model (issue 25's bar): over the first 200
held-out questions with a closed set of answers (yes/no, counts, colours, places, which
image), a JSON schema answer and a ``choices`` answer are each within 2 points of the free-
text answer's accuracy, and every schema answer parses and validates (``jsonschema``).

The model learnt one-field JSON answers in its second training stage
(``tools/demo_model/json_answers.py``); before it, the same questions were 39.5 % right
through a schema against 87 % as free text. Reproduce with
``python tools/demo_model/evaluate_structured.py`` (the same items and code, ~16 s).
"""

from __future__ import annotations

from typing import Any

import pytest

from edgevlm.engine import Engine
from edgevlm.models import demo_model_dir
from tools.demo_model.evaluate_structured import evaluate, held_out_items


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    engine = Engine.load(demo_model_dir(), threads=2, context=1024)
    return evaluate(engine, held_out_items(200))


def test_every_schema_answer_parses_and_validates(report: dict[str, Any]) -> None:
    assert report["valid_json"] == 1.0


@pytest.mark.parametrize("way", ["schema", "choices"])
def test_a_structured_answer_is_as_accurate_as_free_text(report: dict[str, Any], way: str) -> None:
    accuracy = report["accuracy"]
    print(f"\n[demo model] {report['items']} closed questions: free text {accuracy['text']:.1%}, "
          f"{way} {accuracy[way]:.1%}")
    assert accuracy["text"] >= 0.85, report["per_task"]
    assert abs(accuracy[way] - accuracy["text"]) <= 0.02, report["per_task"]
