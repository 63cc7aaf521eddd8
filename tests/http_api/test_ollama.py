"""The Ollama dialect, driven by the ``ollama`` package (the client Frigate's ``ollama``
provider and Home Assistant's Ollama integration use)."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import ollama
import pytest

from tests.helpers import image_bytes
from tests.http_api.conftest import API_KEY

PROMPT = "Describe the person in the picture."

# Frigate's ollama provider (frigate/genai/ollama.py at commit 13abc4c9):
# LOCAL_OPTIMIZED_OPTIONS (lines 23-29) are sent with every request; _init_provider calls
# client.show(model) first (line 54) with "Authorization: Bearer <api_key>" when a key is set
# (_auth_headers, lines 34-38); _send calls provider.generate(model, prompt, images=[jpeg
# bytes], **options).
FRIGATE_OPTIONS = {"options": {"temperature": 0.5, "repeat_penalty": 1.05,
                               "presence_penalty": 0.3}}


def client(service: Any, **kwargs: Any) -> ollama.Client:
    return ollama.Client(host=service.http_url, timeout=60, **kwargs)


def test_frigates_ollama_provider_end_to_end(http_service: Any) -> None:
    service = http_service({"http.api_key": API_KEY})
    api = client(service, headers={"Authorization": "Bearer " + API_KEY})
    shown = api.show("qwen3-vl")
    assert "vision" in (shown.capabilities or [])
    thumbnails = [image_bytes(96, 64, seed=3), image_bytes(80, 80, seed=4)]
    result = api.generate("qwen3-vl", PROMPT, images=thumbnails, **FRIGATE_OPTIONS)
    assert result["done"] and result["done_reason"] in ("stop", "length")
    assert result["response"] and result["eval_count"] >= 1
    assert result["prompt_eval_count"] > 0
    with pytest.raises(ollama.ResponseError) as info:
        client(service).generate("qwen3-vl", PROMPT)  # no key
    assert info.value.status_code == 401


def test_generate_streams_ndjson_by_default_with_the_same_text(http_service: Any) -> None:
    service = http_service()
    api = client(service)
    picture = [image_bytes(64, 64, seed=5)]
    whole = api.generate("m", PROMPT, images=picture, stream=False,
                         options={"num_predict": 8, "temperature": 0})
    parts = list(api.generate("m", PROMPT, images=picture,
                              options={"num_predict": 8, "temperature": 0}, stream=True))
    assert parts[-1]["done"] and not any(p["done"] for p in parts[:-1])
    assert "".join(p["response"] for p in parts) == whole["response"]
    assert parts[-1]["eval_count"] == whole["eval_count"]


def test_chat_with_images_streaming_and_not(http_service: Any) -> None:
    service = http_service()
    api = client(service)
    messages = [{"role": "system", "content": "Answer briefly."},
                {"role": "user", "content": PROMPT, "images": [image_bytes(64, 48, seed=6)]}]
    whole = api.chat("m", messages=messages, options={"num_predict": 6, "temperature": 0})
    assert whole.message.role == "assistant" and whole.done
    streamed = list(api.chat("m", messages=messages, stream=True,
                             options={"num_predict": 6, "temperature": 0}))
    assert "".join(p.message.content or "" for p in streamed) == whole.message.content


def test_list_show_and_version(http_service: Any) -> None:
    service = http_service({"http.model_name": "qwen3-vl:demo"})
    api = client(service)
    (model,) = api.list().models
    assert model.model == "qwen3-vl:demo" and model.details.format == "gguf"
    assert model.size and model.size > 0
    with urllib.request.urlopen(service.http_url + "/api/version", timeout=10) as response:
        assert "version" in json.loads(response.read())


def test_home_assistants_ollama_conversation_call(http_service: Any, tmp_path: Any) -> None:
    """The call Home Assistant's Ollama integration makes for a conversation or AI task with
    an image attachment (home-assistant/core homeassistant/components/ollama/entity.py at
    commit 0d0db908: ``_convert_content`` lines 86-139, the attachment as
    ``ollama.Image(value=attachment.path)`` at line 128; ``_async_handle_chat_log`` from line
    208, its ``client.chat(...)`` at lines 247-271): an ``AsyncClient.chat`` with
    ``ollama.Message`` objects, ``tools=None`` without an LLM API, ``stream=True``,
    ``keep_alive=-1``, ``options={"num_ctx": ...}``, ``think`` unset and ``format=None``.
    The client is ``ollama.AsyncClient(host=<url>, verify=...)`` with no headers
    (ollama/__init__.py at 0c1c865a, line 50), and the models come from its ``list()``
    (config_flow.py at 8215faea, ``async_step_user``)."""
    import asyncio

    service = http_service({"http.model_name": "qwen3-vl:demo"})
    attachment = tmp_path / "snapshot.jpg"
    attachment.write_bytes(image_bytes(96, 64, seed=8))

    async def converse() -> tuple[list[str], str]:
        api = ollama.AsyncClient(host=service.http_url, timeout=60)
        names = [m.model for m in (await api.list()).models]
        stream = await api.chat(
            model=names[0],
            messages=[ollama.Message(role="system", content="You are a home assistant."),
                      ollama.Message(role="user", content="Who is at the door?",
                                     images=[ollama.Image(value=str(attachment))])],
            tools=None, stream=True, keep_alive=-1, options={"num_ctx": 8192}, think=None,
            format=None)
        pieces = [chunk async for chunk in stream]
        assert pieces[-1].done and pieces[-1].done_reason in ("stop", "length")
        return names, "".join(p.message.content or "" for p in pieces)

    names, text = asyncio.run(converse())
    assert names == ["qwen3-vl:demo"] and text


def test_num_predict_is_a_cap_fitted_to_the_context_as_ollama_does(http_service: Any) -> None:
    """Ollama stops an answer at its context; a client that asks num_predict as a ceiling
    (LLM Vision's 4096-token title request) is answered, cut to what fits: short texts are
    fitted at admission, long ones (over 4 KiB, counted by the worker) there. The OpenAI API
    refuses the same request, as OpenAI and vLLM do; a prompt that alone overflows the
    context is refused by both."""
    import openai

    service = http_service()
    context = service.engine.context
    tokenizer = service.engine.tokenizer

    def words(n: int) -> str:
        return " ".join(f"z{i}q" for i in range(n))

    base = client(service).generate(model="m", prompt="hi", stream=False,
                                    options={"num_predict": 1})
    template = base.prompt_eval_count - len(tokenizer.encode_text("hi"))
    # prompts leaving 3 tokens of the context: "a" * n is n tokens in n bytes (a short text,
    # fitted at admission), " the" * n is n tokens in 4n bytes (a long one, by the worker)
    for unit in ("a", " the"):
        text = "Describe: " + unit * (context - 3 - template - 10)
        text += unit * (context - 3 - template - len(tokenizer.encode_text(text)))
        assert len(tokenizer.encode_text(text)) == context - 3 - template
        answer = client(service).generate(model="m", prompt=text, stream=False,
                                          options={"num_predict": 4096, "temperature": 0})
        assert answer.prompt_eval_count == context - 3, unit
        assert answer.eval_count is not None and answer.eval_count <= 3
        with pytest.raises(openai.BadRequestError) as refused:
            openai.OpenAI(base_url=service.http_url + "/v1", api_key="k").chat.completions.create(
                model="m", messages=[{"role": "user", "content": text}], max_tokens=4096)
        assert refused.value.code == "context_length_exceeded"
    with pytest.raises(ollama.ResponseError) as overflow:
        client(service).generate(model="m", prompt=words(900), stream=False,
                                 options={"num_predict": 16})
    assert overflow.value.status_code == 400 and "context" in overflow.value.error


def test_fields_a_route_does_not_define_are_ignored_as_ollama_does(http_service: Any) -> None:
    """Ollama's server ignores JSON fields a route does not define; LLM Vision sends
    /api/generate's system, prompt and images to /api/chat (tests/http_api/test_llmvision.py)."""
    service = http_service()
    body = json.dumps({"model": "m", "stream": False, "no_such_field": 1, "system": "x",
                       "messages": [{"role": "user", "content": PROMPT}],
                       "options": {"num_predict": 3}}).encode()
    request = urllib.request.Request(service.http_url + "/api/chat", body,
                                      {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        answer = json.loads(response.read())
    assert answer["done"] and answer["message"]["content"]
