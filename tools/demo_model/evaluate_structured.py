#!/usr/bin/env python3
"""Structured answers on the demo model's held-out scenes (issue 25): free text vs a JSON
schema vs scored choices, on the same questions.

For the held-out items whose answer is a closed set (``exists``, ``count``, ``count_kind``,
``colour``, ``where``, ``which_has``), greedy decoding answers each question three ways on the
shipped F32 model (or ``--gguf``), with the same prompt:

* free text, as ``evaluate.py`` scores it (exactly right and stopped);
* a JSON schema (``{"cat": boolean}`` for "Is there a cat?", ``{"count": integer 0-9}``,
  ``{"colour": enum}``, ``{"where": enum}``, ``{"image": enum}``): right when the parsed value
  is the answer; every answer must parse and validate (``jsonschema``);
* ``choices`` (``yes``/``no``, ``0``-``9``, the colours, the slots, ``first``/``second``):
  right when the most probable choice is the answer.

Usage: ``python tools/demo_model/evaluate_structured.py [--items 200] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tools.demo_model.scenes import COLOURS, SLOTS, TEST_SEED, Item, make_item  # noqa: E402

TASKS = ("exists", "count", "count_kind", "colour", "where", "which_has")
DIGITS = [str(n) for n in range(10)]


def shape(item: Item) -> tuple[str, dict[str, Any], list[str]]:
    """(the JSON key, the schema, the choices) of an item's question."""
    spec: dict[str, Any]
    if item.task == "exists":  # "Is there a cat?" -> {"cat": true}
        key, spec, choices = item.prompt.rstrip("?").split()[-1], {"type": "boolean"}, [
            "yes", "no"]
    elif item.task in ("count", "count_kind"):
        key, spec, choices = "count", {"type": "integer", "minimum": 0, "maximum": 9}, DIGITS
    elif item.task == "colour":
        key, spec, choices = "colour", {"enum": list(COLOURS)}, list(COLOURS)
    elif item.task == "which_has":
        key, spec, choices = "image", {"enum": ["first", "second"]}, ["first", "second"]
    else:
        key, spec, choices = "where", {"enum": list(SLOTS)}, list(SLOTS)
    schema = {"type": "object", "properties": {key: spec}, "required": [key],
              "additionalProperties": False}
    return key, schema, choices


def as_answer(item: Item, value: Any) -> str:
    if item.task == "exists":
        return "yes" if value is True else "no" if value is False else "?"
    return str(value)


def held_out_items(count: int) -> list[Item]:
    """The first ``count`` held-out items whose task is one of :data:`TASKS`."""
    items: list[Item] = []
    index = 0
    while len(items) < count:
        item = make_item(TEST_SEED, index)
        index += 1
        if item.task in TASKS:
            items.append(item)
    return items


def evaluate(engine: Any, items: list[Item]) -> dict[str, Any]:
    """Each item answered three ways (free text, a schema, choices); the report."""
    import jsonschema  # type: ignore[import-untyped]

    right = {"text": 0, "schema": 0, "choices": 0}
    valid = 0
    per_task: dict[str, dict[str, int]] = {}
    for item in items:
        key, schema, choices = shape(item)
        messages = item.edgevlm_messages()
        free = engine.generate(messages, max_tokens=32, temperature=0.0)
        shaped = engine.generate(messages, max_tokens=32, temperature=0.0, schema=schema)
        picked = engine.generate(messages, choices=choices)
        value = shaped.parsed
        try:
            jsonschema.validate(value, schema)
            valid += 1
        except jsonschema.ValidationError:
            value = None
        outcome = {"text": free.finish_reason == "stop" and free.text == item.answer,
                   "schema": value is not None and as_answer(item, value[key]) == item.answer,
                   "choices": picked.text == item.answer}
        task = per_task.setdefault(item.task, {"items": 0, "text": 0, "schema": 0,
                                               "choices": 0})
        task["items"] += 1
        for way, ok in outcome.items():
            right[way] += ok
            task[way] += ok
    n = len(items)
    return {"items": n, "seed": TEST_SEED, "valid_json": valid / n,
            "right": right, "accuracy": {way: right[way] / n for way in right},
            "per_task": per_task}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=200, help="held-out items of the "
                        "closed-answer tasks to ask")
    parser.add_argument("--gguf", type=Path, default=None,
                        help="model directory (default: the shipped demo model)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from edgevlm.engine import Engine
    from edgevlm.models import demo_model_dir

    engine = Engine.load(args.gguf or demo_model_dir(), threads=2, context=1024)
    report = evaluate(engine, held_out_items(args.items))
    if args.json:
        print(json.dumps(report, indent=2))
        return
    n, right = report["items"], report["right"]
    print(f"{n} held-out items ({', '.join(TASKS)}); schema answers that parse and validate: "
          f"{round(report['valid_json'] * n)}/{n}")
    for way in ("text", "schema", "choices"):
        print(f"  {way:8s} {right[way]:4d}/{n} = {right[way] / n:.1%}")
    for task, counts in sorted(report["per_task"].items()):
        print(f"    {task:11s} " + "  ".join(f"{w} {counts[w]}/{counts['items']}"
                                            for w in ("text", "schema", "choices")))


if __name__ == "__main__":
    main()
