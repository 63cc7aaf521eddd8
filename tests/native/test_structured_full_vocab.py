"""Structured answers on a full-vocabulary model (issue 25): the real Qwen vocabulary (151,643
ranks + the Qwen3 added tokens) on a tiny random-weight Qwen3-VL, so the grammar engine masks
the whole vocabulary as on Qwen3-VL-2B. 20 varied schemas x 10 prompts: every answer parses
and validates (``jsonschema``), whatever the random model would rather say."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from edgevlm.convert.cli import main as convert_main
from edgevlm.engine import Engine
from tests.qwen3vl_checkpoints import legacy_config_dict, write_numpy_checkpoint
from tests.qwen_tokenizers import qwen_reference_tokenizer

WORD = {"type": "string", "maxLength": 12}
SMALL = {"type": "integer", "minimum": 0, "maximum": 99}


def closed(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties),
            "additionalProperties": False}


SCHEMAS: list[dict[str, Any]] = [
    closed(count=SMALL),
    closed(cat=SMALL | {"maximum": 1}),
    closed(person={"type": "boolean"}),
    closed(person={"type": "boolean"}, count=SMALL),
    closed(kind={"enum": ["nobody", "person", "vehicle", "animal"]}),
    closed(colour={"enum": ["red", "green", "blue", "white", "black"]}, count=SMALL),
    closed(label=WORD),
    closed(label=WORD, confidence={"type": "integer", "minimum": 0, "maximum": 100}),
    closed(objects={"type": "array", "items": WORD, "maxItems": 3}),
    closed(boxes={"type": "array", "maxItems": 2,
                  "items": closed(x=SMALL, y=SMALL, w=SMALL, h=SMALL)}),
    closed(where={"enum": ["left", "centre", "right"]}, moving={"type": "boolean"}),
    closed(summary={"type": "string", "maxLength": 40}),
    closed(parcel={"type": "boolean"}, carrier={"enum": ["dhl", "ups", "post", "unknown"]}),
    closed(people=closed(adults=SMALL, children=SMALL)),
    closed(alarm={"type": "boolean"}, reason={"anyOf": [WORD, {"type": "null"}]}),
    closed(tags={"type": "array", "items": {"enum": ["car", "cat", "dog", "person"]},
                 "minItems": 1, "maxItems": 4}),
    closed(door={"const": "front"}, open={"type": "boolean"}),
    {"type": "array", "items": SMALL, "minItems": 1, "maxItems": 5},
    {"enum": ["yes", "no", "unsure"]},
    closed(time={"type": "string", "pattern": "^[0-2][0-9]:[0-5][0-9]$"}),
]
PROMPTS = ["Is anyone at the door?", "How many cars are there?", "Describe the scene.",
           "What colour is the car?", "Is the garage open?", "Was a parcel delivered?",
           "Who is on the left?", "Count the people.", "Is the cat inside?",
           "What happens in the yard?"]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    root = tmp_path_factory.mktemp("full-vocab")
    tok = qwen_reference_tokenizer()
    write_numpy_checkpoint(root / "ckpt", tok, legacy_config_dict(tok))
    assert convert_main([str(root / "ckpt"), "-o", str(root / "gguf"), "--type", "f16",
                         "--quiet"]) == 0
    loaded = Engine.load(root / "gguf", threads=2, context=1024)
    assert loaded.tokenizer.backend.get_vocab_size() > 151_000
    return loaded


def test_the_schemas_compile() -> None:
    from edgevlm.structured import compile_grammar

    assert len(SCHEMAS) == 20
    for schema in SCHEMAS:
        assert compile_grammar(schema) is not None


@pytest.mark.parametrize("index", range(len(SCHEMAS)))
def test_every_answer_parses_and_validates(engine: Engine, index: int) -> None:
    schema = SCHEMAS[index]
    for seed, prompt in enumerate(PROMPTS):
        result = engine.generate([{"role": "user", "content": prompt}], max_tokens=160,
                                 temperature=1.0, seed=seed, schema=schema)
        assert result.finish_reason == "stop", (schema, prompt, result.text)
        value = json.loads(result.text)
        jsonschema.validate(value, schema)
        assert result.parsed == value


def test_the_forced_text_is_spelled_as_the_tokenizer_spells_it(engine: Engine) -> None:
    """A key the grammar forces goes in as the tokenizer's own tokens: sampled from the mask,
    a random model spells ``"description_of_the_scene"`` in whatever pieces it ranks first —
    text no model was trained on."""
    schema = closed(description_of_the_scene=WORD, is_anyone_at_the_front_door=SMALL)
    backend = engine.tokenizer.backend
    for seed, prompt in enumerate(PROMPTS):
        result = engine.generate([{"role": "user", "content": prompt}], max_tokens=80,
                                 temperature=1.0, seed=seed, schema=schema)
        head = '{"description_of_the_scene": "'
        k = next(k for k in range(1, len(result.tokens) + 1)
                 if len(backend.decode(result.tokens[:k])) >= len(head) - 1)
        spelled = backend.decode(result.tokens[:k])
        assert spelled.startswith(head[:-1]), result.text
        assert backend.encode(spelled, add_special_tokens=False).ids == result.tokens[:k]
