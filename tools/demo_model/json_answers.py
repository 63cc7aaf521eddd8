"""The demo model's JSON answers: every task's answer as a one-field JSON object.

A structured request (``schema``, OpenAI ``response_format``, Ollama ``format``) constrains
decoding to the schema's JSON (``edgevlm.structured``), so the first answer token is always
``{`` and the grammar forces the key. A model that never saw JSON has no idea what follows
``{"count": `` — the free-text model answered 87 % of the held-out closed questions right and
39.5 % through a schema. Real Qwen3-VL checkpoints have seen plenty of JSON; the demo model
learns it in a short second stage (``train.py --init … --json-share``):

* the question is asked as usual (the daemon does not rewrite the prompt for a schema, like
  llama.cpp's server, vLLM and Ollama);
* the answer is ``{"<key>": <value>}`` in the daemon's layout (``structured.JSON_LAYOUT``:
  ``", "`` and ``": "``), the key drawn from :data:`KEYS` so the model learns to read the
  value off the question whatever the schema calls it;
* the ``{`` is part of the *prompt* (no loss on it): the model never learns to open a JSON
  object on its own, so a free-text answer stays free text, and after a ``{`` the grammar
  forced it knows what comes next.

The value's JSON type is the one a schema for the question would use: a boolean for "Is
there …?", an integer for counts, a string for the rest.
"""

from __future__ import annotations

import json

import numpy as np

from tools.demo_model.scenes import KINDS, PLURALS

JSON_SEED = 7  # the twins' own random stream: the base recipe's data are unchanged

# Keys a user's schema might give each task's answer (the kind's name is added for the
# questions that name one: {"cat": true}, {"cats": 2}).
KEYS: dict[str, tuple[str, ...]] = {
    "exists": ("present", "answer", "detected", "visible"),
    "count": ("count", "number", "objects", "total", "answer"),
    "count_kind": ("count", "number", "total", "answer"),
    "colour": ("colour", "color", "answer", "value"),
    "where": ("where", "position", "location", "side", "answer"),
    "what_at": ("object", "what", "answer", "thing"),
    "which_has": ("image", "which", "answer"),
    "caption": ("description", "caption", "scene", "summary"),
    "moved": ("moved", "motion", "event", "description"),
}


def _kind_in(prompt: str) -> str | None:
    words = prompt.rstrip("?").split()
    plurals = {PLURALS.get(k, k + "s"): k for k in KINDS}
    for word in words:
        if word in KINDS or word in plurals:
            return word
    return None


def json_value(task: str, answer: str) -> bool | int | str:
    """The answer as the JSON value a schema for this question would ask for."""
    if task == "exists":
        return answer == "yes"
    if task in ("count", "count_kind"):
        return int(answer)
    return answer


def json_answer(rng: np.random.Generator, task: str, prompt: str, answer: str) -> str:
    """``{"<key>": <value>}`` with a key drawn for the task (or the kind the prompt names)."""
    keys = list(KEYS[task])
    kind = _kind_in(prompt)
    if kind is not None and task in ("exists", "count_kind"):
        keys += [kind, kind]  # {"cat": true} is what a user writes most
    key = keys[int(rng.integers(len(keys)))]
    return json.dumps({key: json_value(task, answer)}, ensure_ascii=False)
