"""The Ollama dialect: ``POST /api/generate``, ``POST /api/chat`` (both with ``images``,
NDJSON streaming on unless ``"stream": false``, as Ollama does), ``GET /api/tags``,
``POST /api/show``, ``GET /api/version``.

``options``: ``num_predict`` (``max_tokens``; -1 and -2: the default), ``temperature``,
``top_p``, ``top_k``, ``seed``, ``repeat_penalty``, ``stop``. Other options (``num_ctx``,
``presence_penalty``, ...) are ignored with a log line, as Ollama ignores an option its runner
lacks — Frigate's Ollama provider sends ``presence_penalty`` on every request. The board holds
one model: ``model`` names it for the client, any name is served by it (as llama.cpp's server
does). ``format`` (``"json"`` or a JSON schema) constrains the decoding
(:mod:`edgevlm.structured`).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .errors import HttpError

log = logging.getLogger(__name__)

OPTIONS = {"num_predict": "max_tokens", "temperature": "temperature", "top_p": "top_p",
           "top_k": "top_k", "seed": "seed", "repeat_penalty": "repetition_penalty",
           "stop": "stop"}
GENERATE_KEYS = frozenset({"model", "prompt", "images", "system", "stream", "options",
                           "keep_alive", "format", "think", "raw", "context", "suffix",
                           "template"})
CHAT_KEYS = frozenset({"model", "messages", "stream", "options", "keep_alive", "format",
                       "think", "tools"})


@dataclass(frozen=True)
class ModelCard:
    """What the model listings say about the one model of the board."""

    name: str
    family: str          # GGUF general.architecture
    context: int
    size: int            # bytes of the model files
    quantization: str
    digest: str          # the model's fingerprint
    modified_at: str

    @property
    def details(self) -> dict[str, Any]:
        return {"parent_model": "", "format": "gguf", "family": self.family,
                "families": [self.family], "parameter_size": "",
                "quantization_level": self.quantization}


def _bad(message: str) -> HttpError:
    return HttpError(400, "invalid_request", message)


def _check_common(body: dict[str, Any], allowed: frozenset[str]) -> None:
    """Fields the route does not define are ignored, with a log line, as Ollama's server
    ignores them (Go's JSON decoding): LLM Vision's Ollama provider sends ``/api/generate``'s
    ``system``, ``prompt`` and ``images`` to ``/api/chat`` (tests/http_api/test_llmvision.py)."""
    ignored = sorted(key for key in body if key not in allowed)
    if ignored:
        log.info("ignoring field(s) %s that this Ollama route does not define (as Ollama "
                 "does)", ", ".join(repr(k) for k in ignored))
    if body.get("think"):
        raise _bad("think is not supported by this model; leave it out or set it to false")
    if body.get("tools"):
        raise _bad("tools are not supported")


def _sampling(body: dict[str, Any], default_max_tokens: int) -> dict[str, Any]:
    options = body.get("options") or {}
    if not isinstance(options, dict):
        raise _bad("options must be an object")
    out: dict[str, Any] = {"max_tokens": default_max_tokens}
    ignored = []
    for key, value in options.items():
        ours = OPTIONS.get(key)
        if ours is None:
            ignored.append(key)
        elif value is not None and not (key == "num_predict" and value in (-1, -2)):
            out[ours] = value
    if ignored:
        log.info("ollama options ignored (not used by edgevlm): %s", ", ".join(sorted(ignored)))
    return out


def _images(images: Any, where: str) -> list[dict[str, Any]]:
    if images is None:
        return []
    if not isinstance(images, list) or not all(isinstance(i, str) for i in images):
        raise _bad(f"{where} must be a list of base64 strings")
    return [{"type": "image", "image": {"b64": image}} for image in images]


def generate_request(body: dict[str, Any], default_max_tokens: int) -> dict[str, Any]:
    """The describe request (protocol form) of an ``/api/generate`` body."""
    _check_common(body, GENERATE_KEYS)
    if body.get("raw") or body.get("context") or body.get("suffix") or body.get("template"):
        raise _bad("raw, context, suffix and template are not supported")
    prompt = body.get("prompt") or ""
    if not isinstance(prompt, str):
        raise _bad("prompt must be a string")
    messages: list[dict[str, Any]] = []
    if body.get("system"):
        messages.append({"role": "system", "content": str(body["system"])})
    messages.append({"role": "user", "content": [*_images(body.get("images"), "images"),
                                                 {"type": "text", "text": prompt}]})
    return {"messages": messages, **_sampling(body, default_max_tokens), **_format(body),
            "stream": body.get("stream", True) is not False}


def _format(body: dict[str, Any]) -> dict[str, Any]:
    """Ollama's ``format`` ("json", or a JSON schema) as the request's ``schema``."""
    value = body.get("format")
    if value in (None, ""):
        return {}
    if value == "json":
        return {"schema": True}
    if isinstance(value, dict):
        return {"schema": value}
    raise _bad('format must be "json" or a JSON schema object')


def chat_request(body: dict[str, Any], default_max_tokens: int) -> dict[str, Any]:
    """The describe request (protocol form) of an ``/api/chat`` body."""
    _check_common(body, CHAT_KEYS)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("messages must be a non-empty list")
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise _bad(f"messages[{i}] must be an object")
        extra = {k for k, v in message.items() if v not in (None, [], "")} - {
            "role", "content", "images", "thinking"}
        if extra:
            raise _bad(f"messages[{i}] has unsupported fields {sorted(extra)}")
        role = message.get("role")
        if role not in ("system", "user", "assistant"):
            raise _bad(f"messages[{i}].role {role!r} is not supported; use system, user or "
                       "assistant")
        content = message.get("content") or ""
        if not isinstance(content, str):
            raise _bad(f"messages[{i}].content must be a string")
        images = _images(message.get("images"), f"messages[{i}].images")
        out.append({"role": role, "content": [*images, {"type": "text", "text": content}]
                    if images else content})
    return {"messages": out, **_sampling(body, default_max_tokens), **_format(body),
            "stream": body.get("stream", True) is not False}


def now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def final_fields(data: dict[str, Any], started: float) -> dict[str, Any]:
    """Ollama's closing fields, in nanoseconds, from the answer's metrics."""
    m = data["metrics"]
    u = data["usage"]
    ns = 1_000_000
    decode_ms = max(m["total_ms"] - m["ttft_ms"], 0.0)
    return {"done": True, "done_reason": "length" if data["finish_reason"] == "length"
            else "stop",
            "total_duration": int((time.perf_counter() - started) * 1e9),
            "load_duration": 0, "prompt_eval_count": u["prompt_tokens"],
            "prompt_eval_duration": int((m["ttft_ms"] + m["queue_ms"]) * ns),
            "eval_count": u["completion_tokens"], "eval_duration": int(decode_ms * ns),
            "edgevlm": {"metrics": m, "cache": data.get("cache", []),
                        "vision_tokens": u["vision_tokens"]}}


def line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def tags(card: ModelCard) -> dict[str, Any]:
    return {"models": [{"name": card.name, "model": card.name, "modified_at": card.modified_at,
                        "size": card.size, "digest": card.digest, "details": card.details}]}


def show(card: ModelCard) -> dict[str, Any]:
    return {"modelfile": "", "parameters": "", "template": "", "details": card.details,
            "model_info": {"general.architecture": card.family,
                           f"{card.family}.context_length": card.context},
            "capabilities": ["completion", "vision"], "modified_at": card.modified_at}
