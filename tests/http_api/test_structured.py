"""Structured answers (issue 25, first part): a JSON schema or a regex constrains the
decoding, over MQTT (``schema``, ``regex``), OpenAI (``response_format``, through the
``openai`` client's own ``parse``) and Ollama (``format``). Every answer is validated by
``jsonschema``, independently of the grammar engine (llguidance)."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import ollama
import openai
import pydantic
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from tests.helpers import image, image_bytes, text, user_request

REPLY = "edgevlm/clients/structured/reply"
# closed objects and bounded numbers, as OpenAI's strict mode asks: an open object lets a
# small model add keys until max_tokens
COUNT = {"type": "object", "properties": {"count": {"type": "integer", "minimum": 0,
                                                    "maximum": 99}},
         "required": ["count"], "additionalProperties": False}
SCHEMAS = [
    COUNT,
    {"type": "object", "properties": {"cat": {"type": "boolean"}}, "required": ["cat"],
     "additionalProperties": False},
    {"type": "object", "properties": {"kind": {"enum": ["nobody", "person", "vehicle"]},
                                      "colours": {"type": "array", "items": {"type": "string",
                                                                             "maxLength": 12},
                                                  "maxItems": 3}},
     "required": ["kind", "colours"], "additionalProperties": False},
    {"type": "array", "items": {"type": "integer", "minimum": -9, "maximum": 9}, "minItems": 1,
     "maxItems": 4},
    {"type": "string", "maxLength": 20},
]


def ask_mqtt(service: Any, mqtt_client: Any, **fields: Any) -> dict[str, Any]:
    client = mqtt_client()
    client.sub(REPLY)
    props = Properties(PacketTypes.PUBLISH)
    props.ResponseTopic = REPLY
    client.pub(f"edgevlm/{service.node_id}/request/describe",
               user_request(image(image_bytes(96, 64, seed=4)), text("How many objects?"),
                            **fields), properties=props)
    (answer,) = client.inbox.json(REPLY)
    return answer


def test_every_schema_answer_over_mqtt_parses_and_validates(http_service: Any,
                                                            mqtt_client: Any) -> None:
    service = http_service()
    for i, schema in enumerate(SCHEMAS):
        answer = ask_mqtt(service, mqtt_client, id=f"s-{i}", schema=schema, max_tokens=64,
                          temperature=0.8, seed=i)
        assert answer["status"] == "ok", answer
        data = answer["data"]
        assert data["finish_reason"] == "stop", data  # the grammar ended it
        jsonschema.validate(json.loads(data["text"]), schema)
        assert data["parsed"] == json.loads(data["text"])


def test_a_regex_answer_matches_it(http_service: Any, mqtt_client: Any) -> None:
    service = http_service()
    answer = ask_mqtt(service, mqtt_client, id="re", regex="(yes|no), [0-9]{1,2}",
                      max_tokens=16)
    assert answer["status"] == "ok", answer
    import re

    assert re.fullmatch(r"(yes|no), [0-9]{1,2}", answer["data"]["text"]), answer
    assert answer["data"].get("parsed") is None


def test_an_unsupported_schema_feature_is_named_before_the_model_runs(
        http_service: Any, mqtt_client: Any, engine_calls: list[Any]) -> None:
    service = http_service()
    answer = ask_mqtt(service, mqtt_client, id="bad", schema={
        "type": "object", "if": {"properties": {"a": {"const": 1}}},
        "then": {"required": ["b"]}})
    assert answer["status"] == "error"
    assert answer["error"]["type"] == "invalid_request"
    assert '"if"' in answer["error"]["message"]
    assert engine_calls == []


class Count(pydantic.BaseModel):
    count: int = pydantic.Field(ge=0, le=99)


def test_openai_parse_with_a_pydantic_model(http_service: Any) -> None:
    """The openai client's ``parse``: it sends ``response_format`` as a strict json_schema
    made from the model, and parses the answer into it."""
    service = http_service()
    api = openai.OpenAI(base_url=service.http_url + "/v1", api_key="x", max_retries=0,
                        timeout=60)
    completion = api.chat.completions.parse(
        model="m", response_format=Count, max_tokens=32,
        messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,"
                                                + __import__("base64").b64encode(
                                                    image_bytes(64, 64)).decode()}},
            {"type": "text", "text": "How many objects?"}]}])
    parsed = completion.choices[0].message.parsed
    assert isinstance(parsed, Count)
    json_mode = api.chat.completions.create(
        model="m", max_tokens=160, temperature=0, response_format={"type": "json_object"},
        messages=[{"role": "user", "content": "Describe a parcel as JSON."}])
    # any object: nothing bounds its keys, so this greedy answer is one that closed in time
    assert json_mode.choices[0].finish_reason == "stop", json_mode
    value = json.loads(json_mode.choices[0].message.content or "")
    assert isinstance(value, dict)
    assert json_mode.model_extra["edgevlm"]["parsed"] == value  # type: ignore[index]


def test_ollama_format_json_and_schema(http_service: Any) -> None:
    service = http_service()
    api = ollama.Client(host=service.http_url, timeout=60)
    picture = [image_bytes(80, 60, seed=2)]
    shaped = api.generate("m", "How many objects?", images=picture, format=COUNT,
                          options={"num_predict": 32}, stream=False)
    jsonschema.validate(json.loads(shaped["response"]), COUNT)
    # any object (format "json"): greedy, and long enough for this answer to close
    chat = api.chat("m", messages=[{"role": "user", "content": "Is there a cat?",
                                    "images": picture}], format="json",
                    options={"num_predict": 160, "temperature": 0})
    assert chat.done_reason == "stop", chat
    assert isinstance(json.loads(chat.message.content or ""), dict)


@pytest.mark.parametrize("schema", [{"type": "object", "dependentSchemas": {"a": {}}},
                                    {"type": "string", "format": "uri-reference"}])
def test_unsupported_features_over_openai_are_a_400(http_service: Any,
                                                    schema: dict[str, Any]) -> None:
    service = http_service()
    api = openai.OpenAI(base_url=service.http_url + "/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.BadRequestError) as info:
        api.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=4,
            response_format={"type": "json_schema", "json_schema": {"name": "s",
                                                                    "schema": schema}})
    assert "not supported" in info.value.body["message"]  # type: ignore[index]
    assert info.value.body["param"] is None  # type: ignore[index]


def test_choices_over_mqtt_and_openai(http_service: Any, mqtt_client: Any) -> None:
    service = http_service()
    kinds = ["nobody", "a person", "a vehicle"]
    answer = ask_mqtt(service, mqtt_client, id="pick", choices=kinds)
    assert answer["status"] == "ok", answer
    data = answer["data"]
    assert data["text"] in kinds and data["text"] == data["choices"][0]["text"]
    assert sorted(c["text"] for c in data["choices"]) == sorted(kinds)
    assert sum(c["probability"] for c in data["choices"]) == pytest.approx(1.0, abs=1e-4)
    api = openai.OpenAI(base_url=service.http_url + "/v1", api_key="x", max_retries=0)
    over_http = api.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Yes or no?"}],
        extra_body={"choices": ["yes", "no"]})
    ext = over_http.model_extra["edgevlm"]  # type: ignore[index]
    assert over_http.choices[0].message.content == ext["choices"][0]["text"]
    bad = ask_mqtt(service, mqtt_client, id="both", choices=["a", "b"], regex="a|b")
    assert bad["status"] == "error" and "one of schema, regex and choices" in \
        bad["error"]["message"]
