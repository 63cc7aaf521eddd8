"""LLM Vision (the HACS integration, valentinfrlch/ha-llmvision) against a real daemon, through
its two providers that can reach the board: "Ollama" and "Custom OpenAI".

Every request below is built by a function that mirrors LLM Vision's source at commit 85fcb983
(v1.7.0, custom_components/llmvision/), and sent as LLM Vision sends it: Home Assistant's
aiohttp session, ``session.post(url, headers=headers, json=data)`` (providers.py,
``Provider._post``, lines 523-547) and, for the Ollama handshake, ``session.get(url,
headers={})`` (providers.py, ``Ollama.validate``, lines 1749-1767). Each answer is read the way
LLM Vision reads it (``OpenAI._make_request``, lines 643-666; ``Ollama._make_request``, lines
1639-1654): anything but a 200 is an error whose message ``Provider._resolve_error`` (lines
549-587) takes from ``error`` (Ollama) or ``error.message`` (OpenAI).

The defaults are LLM Vision's: the service call's ``max_tokens`` is 3000 (__init__.py line 477;
services.yaml line 84), the config flow stores temperature 0.5 and top_p 0.9 (config_flow.py
lines 273-292 and 1083-1102; read by providers.py lines 171-172 and 462-480), keep_alive "5m"
and context length 2048 (config_flow.py lines 303-304), think off (line 293).
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import aiohttp
import pytest

from tests.helpers import image_bytes
from tests.http_api.conftest import API_KEY

MESSAGE = "Describe what you see."
# const.py lines 94-95 at commit 85fcb983: the system and title prompts when the Settings entry
# keeps LLM Vision's defaults.
DEFAULT_SYSTEM_PROMPT = (
    "Analyze the images and give a concise, objective event summary (<255 chars). Focus on "
    "people, pets, and moving objects; track changes across images. Exclude static details, "
    "avoid speculation, and follow user instructions.")
DEFAULT_TITLE_PROMPT = (
    "Generate a clear event title (<6 words) from the description. Use format: <Object> seen "
    "at <location>. Keep it concise, factual, and alert-ready. Include names if given. Avoid "
    "extra details or interpretations.")
# const.py line 158: the Ollama provider's URL.
ENDPOINT_OLLAMA = "{protocol}://{ip_address}:{port}/api/chat"
# The service call's default max_tokens (__init__.py line 477) and the title request's
# (providers.py, Provider.title_request, lines 515-521: call.max_tokens = 4096).
MAX_TOKENS = 3000
TITLE_MAX_TOKENS = 4096


def frames() -> list[str]:
    """Two camera frames as LLM Vision holds them: JPEG, base64 text (media_handlers.py lines
    43-44: ``img.save(..., format="JPEG")``, ``base64.b64encode(...).decode("utf-8")``)."""
    return [base64.b64encode(image_bytes(96, 64, seed=s)).decode("utf-8") for s in (1, 2)]


# ---------------------------------------------------------------- what LLM Vision sends


def send(method: str, url: str, headers: dict[str, str], data: dict[str, Any] | None = None
         ) -> tuple[int, Any]:
    """One request through aiohttp as Home Assistant's client session makes it
    (``session.post(url, headers=headers, json=data, timeout=...)``, providers.py lines
    530-536); the status and the JSON answer (or the text when it is not JSON)."""

    async def go() -> tuple[int, Any]:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
            if method == "GET":
                response = await session.get(url, headers=headers)
            else:
                response = await session.post(url, headers=headers, json=data)
            async with response:
                raw = await response.text()
                try:
                    return response.status, json.loads(raw)
                except ValueError:
                    return response.status, raw

    return asyncio.run(go())


def custom_openai_url(endpoint: str) -> str:
    """``OpenAI._get_request_url`` (providers.py lines 628-641): the "Custom Endpoint" field is
    used as it is, unless it ends in ``/v1``, which gets ``/chat/completions`` appended. The
    factory passes the field as ``base_url`` (providers.py lines 2121-2127)."""
    normalized = endpoint.rstrip("/")
    if normalized.endswith("/v1"):
        return f"{normalized}/chat/completions"
    return endpoint


def openai_headers(api_key: str) -> dict[str, str]:
    """``OpenAI._generate_headers`` (providers.py lines 622-626)."""
    return {"Content-type": "application/json", "Authorization": "Bearer " + api_key}


def openai_validate_body(model: str) -> dict[str, Any]:
    """The config flow's test completion when the provider is added (config_flow.py lines
    1138-1144 call ``OpenAI.validate``, providers.py lines 778-791): "Hi", no image, no
    max_tokens; an empty API key is refused before any request ("empty_api_key")."""
    return {"model": model,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]}


def openai_vision_body(model: str, message: str, base64_images: list[str],
                       filenames: list[str], max_tokens: int = MAX_TOKENS,
                       temperature: float = 0.5, top_p: float = 0.9,
                       structure: dict[str, Any] | None = None) -> dict[str, Any]:
    """``OpenAI._prepare_vision_data`` (providers.py lines 668-747): a text tag ("Image N:" or
    the filename) before each JPEG data URL (no ``detail``), the message last; the system
    prompt inserted first; ``max_completion_tokens``, ``temperature``, ``top_p``; with
    ``response_format: json`` and a structure, a strict ``json_schema`` response format with
    ``additionalProperties: false`` (lines 692-714). No reasoning_effort: it is sent only for
    OpenAI's gpt-5 names (lines 604-620, 678-684)."""
    payload: dict[str, Any] = {
        "model": model, "messages": [{"role": "user", "content": []}],
        "max_completion_tokens": max_tokens, "temperature": temperature, "top_p": top_p}
    if structure is not None:
        schema = dict(structure)
        if "additionalProperties" not in schema:
            schema["additionalProperties"] = False
        payload["response_format"] = {"type": "json_schema", "json_schema": {
            "name": "response", "schema": schema, "strict": True}}
    for image, filename in zip(base64_images, filenames, strict=True):
        tag = ("Image " + str(base64_images.index(image) + 1)) if filename == "" else filename
        payload["messages"][0]["content"].append({"type": "text", "text": tag + ":"})
        payload["messages"][0]["content"].append(
            {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{image}"}})
    payload["messages"][0]["content"].append({"type": "text", "text": message})
    payload["messages"].insert(0, {"role": "system", "content": DEFAULT_SYSTEM_PROMPT})
    return payload


def openai_title_body(model: str, description: str) -> dict[str, Any]:
    """``OpenAI._prepare_text_data`` (providers.py lines 749-776), sent by ``title_request``
    (lines 515-521) when the action has ``generate_title: true`` (providers.py lines
    256-263): the title prompt, then "Create a title for this text: " + the description,
    with ``max_completion_tokens`` 4096."""
    return {"model": model, "messages": [
        {"role": "user", "content": [{"type": "text", "text": DEFAULT_TITLE_PROMPT}]},
        {"role": "user", "content": [{"type": "text", "text": description}]}],
        "max_completion_tokens": TITLE_MAX_TOKENS, "temperature": 0.5, "top_p": 0.9}


def openai_response_text(status: int, answer: Any) -> str:
    """What ``OpenAI._make_request`` (providers.py lines 643-666) takes from a 200:
    ``choices[0].message.content``, a string (None is "invalid_response")."""
    assert status == 200, answer
    choices = answer.get("choices")
    assert isinstance(choices, list) and choices and isinstance(choices[0], dict)
    message = choices[0].get("message")
    assert isinstance(message, dict)
    text = message.get("content")
    assert isinstance(text, str)
    return text


def ollama_url(ip_address: str, port: int, https: bool = False) -> str:
    """``Ollama._make_request`` (providers.py lines 1639-1647): ENDPOINT_OLLAMA with the
    config flow's "IP address", "Port" and "HTTPS" fields."""
    return ENDPOINT_OLLAMA.format(ip_address=ip_address, port=port,
                                  protocol="https" if https else "http")


def ollama_vision_body(model: str, message: str, base64_images: list[str],
                       max_tokens: int = MAX_TOKENS) -> dict[str, Any]:
    """``Ollama._prepare_vision_data`` (providers.py lines 1656-1708), posted to ``/api/chat``:
    besides ``messages`` (the message with the frames in ``images``) it carries the top-level
    ``system``, ``prompt`` (the empty tuple ``()``, which aiohttp's ``json.dumps`` writes as
    ``[]``) and ``images`` of Ollama's ``/api/generate``; ``stream: false``; ``keep_alive``
    and ``options.num_ctx`` from the config entry; ``think`` only for qwen3.5/qwen3-vl names
    with the "Think" switch on (lines 1633-1637), off by default."""
    return {
        "model": model,
        "system": DEFAULT_SYSTEM_PROMPT,
        "messages": [{"role": "user", "content": message, "images": base64_images}],
        "prompt": (),
        "images": base64_images,
        "stream": False,
        "keep_alive": "5m",
        "think": False,
        "options": {"num_predict": max_tokens, "temperature": 0.5, "top_p": 0.9,
                    "num_ctx": 2048},
    }


def ollama_title_body(model: str, description: str) -> dict[str, Any]:
    """``Ollama._prepare_text_data`` (providers.py lines 1710-1747), the title request
    (``title_request``, lines 515-521: ``num_predict`` 4096)."""
    return {"model": model, "messages": [{"role": "user", "content": DEFAULT_TITLE_PROMPT},
                                         {"role": "user", "content": description}],
            "stream": False, "keep_alive": "5m", "think": False,
            "options": {"num_predict": TITLE_MAX_TOKENS, "temperature": 0.5, "top_p": 0.9,
                        "num_ctx": 2048}}


def ollama_response_text(status: int, answer: Any) -> str:
    """What ``Ollama._make_request`` (providers.py lines 1648-1654) takes from a 200:
    ``message.content``."""
    assert status == 200, answer
    assert isinstance(answer, dict)
    text = answer.get("message", {}).get("content")
    assert isinstance(text, str)
    return text


def board_port(service: Any) -> int:
    return int(service.http.port)


# ---------------------------------------------------------------- Custom OpenAI


@pytest.mark.parametrize("endpoint", ["{url}/v1/chat/completions", "{url}/v1"])
def test_custom_openai_handshake_and_vision_request_with_the_boards_key(
        http_service: Any, endpoint: str) -> None:
    """The board with ``http.api_key``; LLM Vision's "API key" field holds that key. Both
    spellings of "Custom Endpoint" that reach the board's route."""
    service = http_service({"http.api_key": API_KEY})
    url = custom_openai_url(endpoint.format(url=service.http_url))
    assert url == service.http_url + "/v1/chat/completions"
    headers = openai_headers(API_KEY)

    assert openai_response_text(*send("POST", url, headers, openai_validate_body("qwen3-vl")))

    body = openai_vision_body("qwen3-vl", MESSAGE, frames(), ["", ""])
    answer = send("POST", url, headers, body)
    assert openai_response_text(*answer)
    assert answer[1]["edgevlm"]["vision_tokens"] > 0 and len(answer[1]["edgevlm"]["cache"]) == 2


def test_custom_openai_without_a_key_on_the_board_takes_a_dummy_key(http_service: Any) -> None:
    """The config flow requires an API key (config_flow.py lines 1066-1068; providers.py line
    791 refuses an empty one); its text says to enter a dummy such as "openai" when none is
    needed (translations/en.json, custom_openai step). A board without ``http.api_key``
    ignores the header. Filenames tag the frames when ``include_filename`` is on."""
    service = http_service()
    url = custom_openai_url(service.http_url + "/v1/chat/completions")
    headers = openai_headers("openai")
    assert openai_response_text(*send("POST", url, headers, openai_validate_body("gpt-4o-mini")))
    body = openai_vision_body("gpt-4o-mini", MESSAGE, frames(), ["front_door", "driveway"])
    assert openai_response_text(*send("POST", url, headers, body))


def test_custom_openai_with_a_wrong_key_is_an_error_llm_vision_can_read(
        http_service: Any) -> None:
    """A 401 whose ``error.message`` ``Provider._resolve_error`` (providers.py lines 575-584)
    shows; the config flow answers "handshake_failed"."""
    service = http_service({"http.api_key": API_KEY})
    status, answer = send("POST", service.http_url + "/v1/chat/completions",
                          openai_headers("openai"), openai_validate_body("qwen3-vl"))
    assert status == 401
    assert "API key" in answer["error"]["message"]


def test_custom_openai_structured_request(http_service: Any) -> None:
    """``response_format: json`` with a ``structure``: the strict json_schema (providers.py
    lines 692-714); LLM Vision parses ``response_text`` with ``json.loads`` into
    ``structured_response`` (lines 285-298)."""
    service = http_service({"http.api_key": API_KEY})
    structure = {"type": "object", "properties": {"person": {"type": "boolean"}},
                 "required": ["person"]}
    body = openai_vision_body("qwen3-vl", "Is there a person?", frames()[:1], [""],
                              structure=structure)
    assert body["response_format"]["json_schema"]["schema"]["additionalProperties"] is False
    text = openai_response_text(*send("POST", service.http_url + "/v1/chat/completions",
                                      openai_headers(API_KEY), body))
    assert isinstance(json.loads(text)["person"], bool)


def test_custom_openai_title_request_over_the_context_is_an_error_llm_vision_reads(
        http_service: Any) -> None:
    """LLM Vision's title request asks max_completion_tokens 4096 (providers.py lines
    515-521, 749-776 at 85fcb983). Over the OpenAI API the board refuses prompt + max_tokens
    over the context as OpenAI and vLLM do (400 ``context_length_exceeded``, docs/http.md),
    and LLM Vision shows ``error.message`` (providers.py lines 575-584) and titles the event
    "Event Detected"; the analysis itself is unaffected."""
    service = http_service({"http.api_key": API_KEY})
    body = openai_title_body("qwen3-vl", "Create a title for this text: A person at the door.")
    status, answer = send("POST", service.http_url + "/v1/chat/completions",
                          openai_headers(API_KEY), body)
    assert status == 400 and answer["error"]["code"] == "context_length_exceeded", answer
    assert "max_tokens 4096" in answer["error"]["message"]


# ---------------------------------------------------------------- Ollama


def test_ollama_handshake_is_get_api_tags_without_a_key(http_service: Any) -> None:
    """The config flow's check (config_flow.py lines 344-358, ``Ollama.validate``,
    providers.py lines 1749-1767): ``GET {protocol}://{ip}:{port}/api/tags`` with no headers;
    only the status is read (200)."""
    service = http_service()
    status, answer = send("GET", f"http://127.0.0.1:{board_port(service)}/api/tags", {})
    assert status == 200 and answer["models"]


def test_ollama_provider_sends_no_key_so_a_keyed_board_refuses_it(http_service: Any) -> None:
    """The Ollama provider has no API-key field and posts with ``headers={}`` (providers.py
    line 1648; the factory passes ``api_key=""``, lines 2107-2119): a board with
    ``http.api_key`` answers 401 to the handshake and to the request alike."""
    service = http_service({"http.api_key": API_KEY})
    status, _ = send("GET", f"http://127.0.0.1:{board_port(service)}/api/tags", {})
    assert status == 401
    status, answer = send("POST", ollama_url("127.0.0.1", board_port(service)), {},
                          ollama_title_body("qwen3-vl", "A person at the door."))
    assert status == 401 and "API key" in answer["error"]


def test_ollama_provider_vision_request(http_service: Any) -> None:
    """LLM Vision's Ollama provider posts /api/chat with top-level 'system', 'prompt': [] and
    'images' (providers.py lines 1656-1708 at 85fcb983), fields /api/chat does not define:
    ignored, as Ollama ignores them (ollama_api.py ``_check_common``); the images of the
    message are the ones described."""
    service = http_service()
    body = ollama_vision_body("qwen3-vl", MESSAGE, frames())
    assert json.loads(json.dumps(body))["prompt"] == []  # what aiohttp sends for ()
    status, answer = send("POST", ollama_url("127.0.0.1", board_port(service)), {}, body)
    assert ollama_response_text(status, answer)
    assert answer["edgevlm"]["vision_tokens"] > 0


def test_ollama_provider_title_request(http_service: Any) -> None:
    """LLM Vision's title request asks num_predict 4096 (providers.py lines 515-521,
    1710-1747 at 85fcb983), over the 4096-token context with its prompt. Over the Ollama API
    ``num_predict`` is a cap, as Ollama treats it: the answer is fitted to the context."""
    service = http_service()
    body = ollama_title_body("qwen3-vl", "Create a title for this text: A person at the door.")
    status, answer = send("POST", ollama_url("127.0.0.1", board_port(service)), {}, body)
    assert ollama_response_text(status, answer)
    assert answer["prompt_eval_count"] + 4096 > service.engine.context  # it did not fit
