"""The answers equal the MQTT path's for the same request (issue 24, "Done when"): each HTTP
dialect — the ``openai`` and ``ollama`` client packages, Frigate's two-thumbnail body,
streaming — is asked the same question about the same pictures as
``edgevlm/<node>/request/describe``, greedily (temperature 0) with the same ``max_tokens``, and
gives the same text and the same token counts."""

from __future__ import annotations

import itertools
from typing import Any

import ollama
import openai
import pytest

from edgevlm.demo import load_samples
from tests.helpers import data_url, image, image_bytes, text, user_request
from tests.http_api.test_openai import frigate_openai_body

SAMPLE = load_samples()[0]  # a real photograph of the bundled samples (front_door.jpg)
PHOTO = SAMPLE.image.read_bytes()
MAX_TOKENS = 8
_ids = itertools.count()


def openai_client(service: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=service.http_url + "/v1", api_key="unused", max_retries=0,
                         timeout=120)


def ollama_client(service: Any) -> ollama.Client:
    return ollama.Client(host=service.http_url, timeout=120)


@pytest.fixture
def over_mqtt(mqtt_client: Any) -> Any:
    """``ask(service, messages, **fields)``: the ``data`` of the MQTT describe answer."""
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    mqtt = mqtt_client()

    def ask(service: Any, messages: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
        n = next(_ids)
        reply = f"edgevlm/clients/parity/{n}"
        mqtt.sub(reply)
        props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        props.ResponseTopic = reply
        request = {"v": 1, "id": f"parity-{n}", "messages": messages, **fields}
        mqtt.pub(f"edgevlm/{service.node_id}/request/describe", request, properties=props)
        (answer,) = mqtt.inbox.json(reply, timeout=120)
        assert answer["status"] == "ok", answer
        return answer["data"]  # type: ignore[no-any-return]

    return ask


GREEDY = {"max_tokens": MAX_TOKENS, "temperature": 0}


def test_an_openai_image_data_url_answers_like_mqtt(http_service: Any, over_mqtt: Any) -> None:
    service = http_service()
    answer = openai_client(service).chat.completions.create(
        model="m", max_tokens=MAX_TOKENS, temperature=0, messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": data_url(PHOTO)}},
            {"type": "text", "text": SAMPLE.prompt}]}])
    mqtt = over_mqtt(service, user_request(image(PHOTO), text(SAMPLE.prompt))["messages"],
                     **GREEDY)
    assert answer.choices[0].message.content == mqtt["text"]
    assert answer.usage is not None
    assert answer.usage.prompt_tokens == mqtt["usage"]["prompt_tokens"]
    assert answer.usage.completion_tokens == mqtt["usage"]["completion_tokens"]
    assert answer.model_extra["edgevlm"]["vision_tokens"] == (  # type: ignore[index]
        mqtt["usage"]["vision_tokens"])


def test_frigates_two_thumbnail_openai_body_answers_like_mqtt(http_service: Any,
                                                             over_mqtt: Any) -> None:
    """Frigate's body (``frigate_openai_body``: frigate/genai/openai.py, ``OpenAIClient._send``,
    lines 39-86 at commit 01a7ec10) marks every image ``detail: "low"``, which the front door
    turns into OpenAI's low-detail cap; the MQTT request says the same with
    ``mm_processor_kwargs``."""
    service = http_service()
    thumbnails = [image_bytes(96, 64, seed=1), image_bytes(64, 96, seed=2)]
    prompt = "Describe the person."
    body = frigate_openai_body("qwen3-vl", prompt, thumbnails)
    answer = openai_client(service).chat.completions.create(**body, max_tokens=MAX_TOKENS,
                                                            temperature=0)
    mqtt = over_mqtt(service, user_request(text(prompt), *map(image, thumbnails))["messages"],
                     mm_processor_kwargs={"max_pixels": 512 * 512}, **GREEDY)
    assert answer.choices[0].message.content == mqtt["text"]
    assert answer.usage is not None
    assert answer.usage.prompt_tokens == mqtt["usage"]["prompt_tokens"]
    assert answer.usage.completion_tokens == mqtt["usage"]["completion_tokens"]


def test_ollama_generate_with_images_answers_like_mqtt(http_service: Any,
                                                       over_mqtt: Any) -> None:
    service = http_service()
    pictures = [PHOTO, image_bytes(80, 64, seed=4)]
    result = ollama_client(service).generate(
        "qwen3-vl", SAMPLE.prompt, images=pictures, stream=False,
        options={"num_predict": MAX_TOKENS, "temperature": 0})
    mqtt = over_mqtt(service, user_request(*map(image, pictures),
                                           text(SAMPLE.prompt))["messages"], **GREEDY)
    assert result["response"] == mqtt["text"]
    assert result["prompt_eval_count"] == mqtt["usage"]["prompt_tokens"]
    assert result["eval_count"] == mqtt["usage"]["completion_tokens"]


def test_ollama_chat_with_images_answers_like_mqtt(http_service: Any, over_mqtt: Any) -> None:
    service = http_service()
    system = "Answer briefly."
    result = ollama_client(service).chat("qwen3-vl", stream=False, messages=[
        {"role": "system", "content": system},
        {"role": "user", "content": SAMPLE.prompt, "images": [PHOTO]}],
        options={"num_predict": MAX_TOKENS, "temperature": 0})
    mqtt = over_mqtt(service, [{"role": "system", "content": system},
                               {"role": "user", "content": [image(PHOTO), text(SAMPLE.prompt)]}],
                     **GREEDY)
    assert result.message.content == mqtt["text"]
    assert result.prompt_eval_count == mqtt["usage"]["prompt_tokens"]
    assert result.eval_count == mqtt["usage"]["completion_tokens"]


def test_a_streamed_openai_answer_concatenates_to_the_mqtt_answer(http_service: Any,
                                                                  over_mqtt: Any) -> None:
    service = http_service()
    pieces, usage = [], None
    for event in openai_client(service).chat.completions.create(
            model="m", max_tokens=MAX_TOKENS, temperature=0, stream=True,
            stream_options={"include_usage": True}, messages=[{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": data_url(PHOTO)}},
                {"type": "text", "text": SAMPLE.prompt}]}]):
        if event.usage is not None:
            usage = event.usage
        pieces += [choice.delta.content or "" for choice in event.choices]
    mqtt = over_mqtt(service, user_request(image(PHOTO), text(SAMPLE.prompt))["messages"],
                     **GREEDY)
    assert "".join(pieces) == mqtt["text"]
    assert usage is not None
    assert usage.prompt_tokens == mqtt["usage"]["prompt_tokens"]
    assert usage.completion_tokens == mqtt["usage"]["completion_tokens"]
