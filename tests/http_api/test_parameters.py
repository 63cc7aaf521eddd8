"""The request parameters the HTTP front door implements, each sent by the client library
that sends it (``openai``, ``ollama``) or, for what the libraries hide (the raw SSE text),
by ``httpx``: ``max_completion_tokens``, ``top_p``, ``stop``, ``n``, ``seed``, the
``[DONE]`` line, an error after the stream began, edgevlm's ``vision_tokens`` and
``image_ref`` parts, and the ``http.allow_without_key`` opt-in."""

from __future__ import annotations

import itertools
import json
from typing import Any

import httpx
import ollama
import openai
import pytest

from edgevlm.config import ConfigError, validate_config
from edgevlm.demo import load_samples
from tests.helpers import data_url, image, image_bytes, text
from tests.http_api.conftest import API_KEY

SAMPLE = load_samples()[0]
PHOTO = SAMPLE.image.read_bytes()
QUESTION = "Describe the scene."
_ids = itertools.count()


def client(service: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=service.http_url + "/v1", api_key="unused", max_retries=0,
                         timeout=120)


def ask(service: Any, content: Any = QUESTION, **params: Any) -> Any:
    return client(service).chat.completions.create(
        model="m", messages=[{"role": "user", "content": content}], **params)


def with_photo(photo: bytes = PHOTO) -> list[dict[str, Any]]:
    return [{"type": "image_url", "image_url": {"url": data_url(photo)}},
            {"type": "text", "text": QUESTION}]


@pytest.fixture
def over_mqtt(mqtt_client: Any) -> Any:
    """``ask(service, content, reply=..., **fields)``: the MQTT describe answer (whole)."""
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    mqtt = mqtt_client()

    def send(service: Any, content: list[dict[str, Any]], reply: str | None = None,
             **fields: Any) -> dict[str, Any]:
        n = next(_ids)
        reply = reply or f"edgevlm/clients/params/{n}"
        mqtt.sub(reply)
        props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        props.ResponseTopic = reply
        mqtt.pub(f"edgevlm/{service.node_id}/request/describe",
                 {"v": 1, "id": f"params-{n}", "messages": [{"role": "user",
                                                            "content": content}], **fields},
                 properties=props)
        (answer,) = mqtt.inbox.json(reply, timeout=120,
                                    where=lambda a: a.get("id") == f"params-{n}")
        return answer  # type: ignore[no-any-return]

    return send


# ---------------------------------------------------------------- answer length


def test_max_completion_tokens_limits_the_answer_like_max_tokens(http_service: Any) -> None:
    service = http_service()
    by_new = ask(service, max_completion_tokens=2, temperature=0)
    by_old = ask(service, max_tokens=2, temperature=0)
    assert by_new.usage.completion_tokens == 2 and by_new.choices[0].finish_reason == "length"
    assert by_new.choices[0].message.content == by_old.choices[0].message.content
    # both given: max_completion_tokens wins (OpenAI deprecates max_tokens in its favour)
    both = ask(service, max_tokens=12, max_completion_tokens=2, temperature=0)
    assert both.usage.completion_tokens == 2
    assert both.choices[0].message.content == by_new.choices[0].message.content


# ---------------------------------------------------------------- sampling


def test_top_p_narrowed_to_the_best_token_decodes_greedily(http_service: Any) -> None:
    service = http_service()
    greedy = ask(service, max_tokens=10, temperature=0)
    nucleus = ask(service, max_tokens=10, temperature=1.5, top_p=1e-6, seed=7)
    assert nucleus.choices[0].message.content == greedy.choices[0].message.content
    with pytest.raises(openai.BadRequestError):
        ask(service, max_tokens=2, top_p=1.5)  # out of (0, 1]


def test_the_same_seed_gives_the_same_sampled_answer(http_service: Any) -> None:
    service = http_service()
    runs = {seed: [ask(service, max_tokens=12, temperature=1.0, seed=seed)
                   .choices[0].message.content for _ in range(2)] for seed in (1, 2, 3, 4)}
    assert all(a == b for a, b in runs.values()), runs
    assert len({a for a, _ in runs.values()}) > 1, runs  # the seed does change the sampling


def test_ollama_options_seed_gives_the_same_sampled_answer(http_service: Any) -> None:
    service = http_service()
    api = ollama.Client(host=service.http_url, timeout=120)

    def generate(seed: int) -> str:  # text only: the demo model is sure of its pictures
        return str(api.generate("m", QUESTION, stream=False, options={
            "num_predict": 12, "temperature": 1.0, "seed": seed})["response"])

    runs = {seed: [generate(seed), generate(seed)] for seed in (1, 2, 3, 4)}
    assert all(a == b for a, b in runs.values()), runs
    assert len({a for a, _ in runs.values()}) > 1, runs


def test_stop_ends_the_answer_before_the_stop_string(http_service: Any) -> None:
    service = http_service()
    whole = ask(service, max_tokens=16, temperature=0).choices[0].message.content
    assert whole is not None and len(whole.split()) >= 3, whole
    stop = " " + whole.split()[2]  # the third word, with its space
    cut = whole[:whole.index(stop)]
    answer = ask(service, max_tokens=16, temperature=0, stop=[stop])
    assert answer.choices[0].message.content == cut
    assert answer.choices[0].finish_reason == "stop"
    alone = ask(service, max_tokens=16, temperature=0, stop=stop)  # a string, not a list
    assert alone.choices[0].message.content == cut


def test_n_other_than_one_is_refused_by_name(http_service: Any) -> None:
    service = http_service()
    with pytest.raises(openai.BadRequestError) as info:
        ask(service, max_tokens=2, n=2)
    assert info.value.status_code == 400
    body: dict[str, Any] = info.value.body  # type: ignore[assignment]
    assert body["param"] == "n" and body["type"] == "invalid_request_error"
    assert ask(service, max_tokens=2, n=1).choices  # n=1 is fine


# ---------------------------------------------------------------- the raw stream


def test_a_raw_sse_stream_ends_with_the_done_line(http_service: Any) -> None:
    service = http_service()
    body = {"model": "m", "max_tokens": 6, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": with_photo()}]}
    with httpx.stream("POST", service.http_url + "/v1/chat/completions", json=body,
                      timeout=120) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        raw = response.read().decode()
    assert raw.endswith("\n\ndata: [DONE]\n\n"), raw[-200:]
    events = raw.split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]"
    assert all(e.startswith("data: ") for e in events[:-1]), raw
    objects = [json.loads(e.removeprefix("data: ")) for e in events[:-2]]
    assert all(o["object"] == "chat.completion.chunk" for o in objects)
    assert objects[-1]["choices"] == [] and objects[-1]["usage"]["completion_tokens"] >= 1
    assert objects[-2]["choices"][0]["finish_reason"] in ("stop", "length")


def test_an_error_after_the_stream_began_is_an_error_event_then_done(
        http_service: Any, demo_engine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(*args: Any, on_text: Any = None, **kwargs: Any) -> Any:
        if on_text is not None:
            on_text("A partial")  # the stream has begun
        raise RuntimeError("the engine failed mid-answer")

    monkeypatch.setattr(demo_engine, "generate_prepared", failing)
    service = http_service()
    body = {"model": "m", "max_tokens": 6, "stream": True,
            "messages": [{"role": "user", "content": QUESTION}]}
    with httpx.stream("POST", service.http_url + "/v1/chat/completions", json=body,
                      timeout=120) as response:
        assert response.status_code == 200  # the headers went out with the first token
        raw = response.read().decode()
    events = [e.removeprefix("data: ") for e in raw.split("\n\n") if e]
    assert events[-1] == "[DONE]", raw
    error = json.loads(events[-2])["error"]
    assert error["type"] and error["message"], error
    assert "".join(json.loads(e)["choices"][0]["delta"].get("content", "")
                   for e in events[:-2]) == "A partial"
    # the openai client raises the error event rather than ending the stream quietly
    pieces = []
    with pytest.raises(openai.APIError):
        for event in client(service).chat.completions.create(**body):  # type: ignore[call-overload]
            pieces += [c.delta.content or "" for c in event.choices]
    assert "".join(pieces) == "A partial"


# ---------------------------------------------------------------- edgevlm's own parts


def test_a_vision_tokens_part_answers_like_mqtt_and_like_the_image(
        http_service: Any, demo_engine: Any, over_mqtt: Any) -> None:
    """Features made as ``edgevlm encode`` makes them (Engine.encode_image, then
    encode_vision_tokens), sent as an OpenAI content part."""
    from edgevlm.wire.vision_tokens import encode_vision_tokens

    service = http_service()
    payload = encode_vision_tokens(demo_engine.encode_image(PHOTO))
    part = {"type": "vision_tokens", "vision_tokens": payload}
    answer = ask(service, [part, {"type": "text", "text": QUESTION}], max_tokens=8,
                 temperature=0)
    extension = answer.model_extra["edgevlm"]
    assert extension["metrics"]["encode_ms"] == 0 and extension["vision_tokens"] > 0
    mqtt = over_mqtt(service, [part, text(QUESTION)], max_tokens=8, temperature=0)
    assert mqtt["status"] == "ok", mqtt
    assert answer.choices[0].message.content == mqtt["data"]["text"]
    assert answer.usage.prompt_tokens == mqtt["data"]["usage"]["prompt_tokens"]
    via_image = ask(service, with_photo(), max_tokens=8, temperature=0)
    assert extension["vision_tokens"] == via_image.model_extra["edgevlm"]["vision_tokens"]
    assert answer.usage.prompt_tokens == via_image.usage.prompt_tokens


def test_an_image_ref_from_an_earlier_answer_answers_like_the_image(
        http_service: Any, over_mqtt: Any) -> None:
    service = http_service()
    photo = image_bytes(96, 80, seed=11)
    first = ask(service, with_photo(photo), max_tokens=8, temperature=0)
    (entry,) = first.model_extra["edgevlm"]["cache"]
    ref = entry["key"]
    again = ask(service, [{"type": "image_ref", "image_ref": ref},
                          {"type": "text", "text": QUESTION}], max_tokens=8, temperature=0)
    assert again.choices[0].message.content == first.choices[0].message.content
    assert again.usage.prompt_tokens == first.usage.prompt_tokens
    assert again.model_extra["edgevlm"]["cache"][0]["hit"] is True
    # the MQTT path answers the same with its own reference to the same picture
    reply = "edgevlm/clients/params-ref/reply"
    mqtt_first = over_mqtt(service, [image(photo), text(QUESTION)], reply=reply,
                           max_tokens=8, temperature=0)
    mqtt_ref = mqtt_first["data"]["cache"][0]["key"]
    mqtt_again = over_mqtt(service, [{"type": "image_ref", "image_ref": mqtt_ref},
                                     text(QUESTION)], reply=reply, max_tokens=8,
                           temperature=0)
    assert mqtt_again["status"] == "ok", mqtt_again
    assert mqtt_again["data"]["text"] == again.choices[0].message.content
    # a reference is a capability of the route it was given to: the HTTP one finds
    # nothing over MQTT
    stolen = over_mqtt(service, [{"type": "image_ref", "image_ref": ref}, text(QUESTION)],
                       reply=reply, max_tokens=8)
    assert stolen["status"] == "error" and stolen["error"]["type"] == "cache_miss", stolen


# ---------------------------------------------------------------- binding without a key


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "board.lan"])
def test_binding_beyond_loopback_without_a_key_needs_the_opt_in(host: str) -> None:
    with pytest.raises(ConfigError, match=r"http\.allow_without_key"):
        validate_config({"http": {"enabled": True, "host": host}}, "test")
    validate_config({"http": {"enabled": True, "host": host, "allow_without_key": True}},
                    "test")
    validate_config({"http": {"enabled": True, "host": host, "api_key": API_KEY}}, "test")


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.5"])
def test_loopback_needs_neither_key_nor_opt_in(host: str) -> None:
    validate_config({"http": {"enabled": True, "host": host}}, "test")


def test_the_opt_in_serves_on_all_interfaces_without_a_key(http_service: Any) -> None:
    service = http_service({"http.host": "0.0.0.0", "http.allow_without_key": True})
    assert ask(service, max_tokens=2).choices[0].message.content is not None
