"""The OpenAI dialect: ``POST /v1/chat/completions`` and ``GET /v1/models``.

A chat completion becomes a describe request: ``messages`` as they are (text, ``image_url``
data URLs — http(s) URLs of ``http.allowed_media_domains`` are fetched first,
:mod:`.media_fetch` — and edgevlm's own ``image``/``video_frames``/``vision_tokens``/``image_ref``
parts), ``max_completion_tokens`` (or ``max_tokens``), ``temperature``, ``top_p``, ``seed``,
``stop``, ``stream`` with ``stream_options.include_usage``; vLLM's ``top_k``,
``repetition_penalty`` and ``mm_processor_kwargs``. ``image_url.detail: "low"`` on every image
caps the request at OpenAI's low-detail size (512×512 pixels). Any other parameter is refused
with an OpenAI-shaped 400 naming it — never ignored. ``response_format`` (``json_object``,
``json_schema``) constrains the decoding (:mod:`edgevlm.structured`). The answer carries
OpenAI's ``usage`` and an ``edgevlm`` object with the per-stage metrics, the cache references
and, for a JSON answer, ``parsed``.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from .errors import HttpError

LOW_DETAIL_PIXELS = 512 * 512  # OpenAI's low-detail image: 512x512
SAMPLING = ("temperature", "top_p", "seed", "top_k", "repetition_penalty",
            "mm_processor_kwargs")
ACCEPTED = frozenset({"model", "messages", "max_tokens", "max_completion_tokens", "stop", "n",
                      "stream", "stream_options", "user", "frequency_penalty",
                      "presence_penalty", "response_format", "choices", *SAMPLING})
OWN_PARTS = frozenset({"text", "image", "video_frames", "vision_tokens", "image_ref"})
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


def _bad(message: str, param: str | None = None) -> HttpError:
    return HttpError(400, "invalid_request_error", message, param)


def _part(part: Any, where: str, details: list[str]) -> Any:
    if not isinstance(part, dict):
        raise _bad(f"{where} must be an object with a 'type'", where)
    kind = part.get("type")
    if kind == "image_url":
        url = part.get("image_url")
        if isinstance(url, dict):
            extra = set(url) - {"url", "detail"}
            if extra:
                raise _bad(f"{where}.image_url has unsupported keys {sorted(extra)}", where)
            details.append(str(url.get("detail", "auto")))
            return {"type": "image_url", "image_url": {"url": url.get("url")}}
        details.append("auto")
        return part
    if kind in OWN_PARTS:
        return part
    raise _bad(f"{where}: content part type {kind!r} is not supported; use text, image_url "
               "(a data: URL), video_frames, vision_tokens or image_ref", where)


def _message(message: Any, i: int, details: list[str]) -> dict[str, Any]:
    where = f"messages[{i}]"
    if not isinstance(message, dict):
        raise _bad(f"{where} must be an object", where)
    extra = set(message) - {"role", "content", "name"}
    if extra:
        raise _bad(f"{where} has unsupported keys {sorted(extra)} (tool calls are not "
                   "supported)", where)
    role = ROLES.get(str(message.get("role")))
    if role is None:
        raise _bad(f"{where}.role {message.get('role')!r} is not supported; use system, "
                   "developer, user or assistant", f"{where}.role")
    content = message.get("content")
    if isinstance(content, list):
        content = [_part(p, f"{where}.content[{j}]", details) for j, p in enumerate(content)]
    return {"role": role, "content": content}


def chat_request(body: dict[str, Any], default_max_tokens: int) -> dict[str, Any]:
    """The describe request (protocol form) of a chat completion body; HttpError (400) for
    what it cannot honour."""
    for key in body:
        if key not in ACCEPTED:
            raise _bad(f"unsupported parameter: '{key}'", key)
    if body.get("n", 1) != 1:
        raise _bad("only n=1 is supported", "n")
    for key in ("frequency_penalty", "presence_penalty"):
        if body.get(key, 0) not in (0, 0.0, None):
            raise _bad(f"{key} is not supported (only 0); use repetition_penalty", key)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("messages must be a non-empty list", "messages")
    details: list[str] = []
    request: dict[str, Any] = {"messages": [_message(m, i, details)
                                            for i, m in enumerate(messages)]}
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    request["max_tokens"] = max_tokens if max_tokens is not None else default_max_tokens
    for key in SAMPLING:
        if body.get(key) is not None:
            request[key] = body[key]
    if body.get("stop") is not None:
        request["stop"] = body["stop"]
    request["stream"] = bool(body.get("stream", False))
    if body.get("choices") is not None:  # edgevlm's extension: the model scores each
        request["choices"] = body["choices"]
    schema = _response_schema(body.get("response_format"))
    if schema is not None:
        request["schema"] = schema
    if details and all(d == "low" for d in details) and "mm_processor_kwargs" not in request:
        request["mm_processor_kwargs"] = {"max_pixels": LOW_DETAIL_PIXELS}
    return request


def _response_schema(response_format: Any) -> Any:
    """``response_format`` as the request's ``schema`` (None: free text)."""
    if response_format is None:
        return None
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return True
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict):
            raise _bad("response_format.json_schema must be an object with 'schema'",
                       "response_format")
        return spec.get("schema", True)
    raise _bad("response_format.type must be text, json_object or json_schema",
               "response_format")


def include_usage(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and bool(options.get("include_usage"))


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def finish_reason(reason: str) -> str:
    return "length" if reason == "length" else "stop"  # cancelled: stopped early


def usage(data: dict[str, Any]) -> dict[str, int]:
    u = data["usage"]
    return {"prompt_tokens": u["prompt_tokens"], "completion_tokens": u["completion_tokens"],
            "total_tokens": u["prompt_tokens"] + u["completion_tokens"]}


def extension(data: dict[str, Any]) -> dict[str, Any]:
    """edgevlm's own answer fields: per-stage metrics, cache references, vision tokens."""
    return {"metrics": data["metrics"], "cache": data.get("cache", []),
            "vision_tokens": data["usage"]["vision_tokens"],
            "finish_reason": data["finish_reason"], "parsed": data.get("parsed"),
            "choices": data.get("choices")}


def completion(data: dict[str, Any], model: str, cid: str) -> dict[str, Any]:
    return {"id": cid, "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": data["text"]},
                         "logprobs": None, "finish_reason": finish_reason(data["finish_reason"])}],
            "usage": usage(data), "edgevlm": extension(data)}


def chunk(cid: str, model: str, created: int, delta: dict[str, Any],
          reason: str | None = None) -> bytes:
    body = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}]}
    return sse(body)


def sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"


def models(model: str, context: int, created: int) -> dict[str, Any]:
    return {"object": "list", "data": [{"id": model, "object": "model", "created": created,
                                        "owned_by": "edgevlm", "max_model_len": context}]}
