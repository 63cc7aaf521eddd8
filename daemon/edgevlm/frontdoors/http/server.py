"""The HTTP server: aiohttp on its own thread and event loop, beside paho's network thread.

Routes: the OpenAI dialect under ``/v1`` (:mod:`.openai_api`), the Ollama dialect under
``/api`` (:mod:`.ollama_api`), ``GET /health``. With ``http.api_key`` every route but
``/health`` needs ``Authorization: Bearer <key>`` (compared in constant time; the key is never
logged). A body over ``limits.max_payload_bytes`` is refused by aiohttp before it is read.
Admission runs on the event loop (it is bounded, as on MQTT's network thread); the model runs on
the one worker, whose answer comes back through :class:`~.submit.HttpReply`.

Why aiohttp: one well-kept library that is both the server and the client a front door needs
(the allow-listed media fetch), asyncio-native streaming (SSE, NDJSON), ~15 MB and ~0.2 s to
import on a board, imported only when ``http.enabled`` is set.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import ssl
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from ...config_http import HttpConfig
from ...pipeline.cache import CacheStats
from . import ollama_api, openai_api, prometheus
from .errors import HttpError, from_answer, from_exception, headers_of, ollama_body, openai_body
from .media_fetch import MediaFetcher, substituted, with_placeholders
from .submit import HttpReply, Submitter

log = logging.getLogger(__name__)

# What a request's head may hold (aiohttp refuses more with a 400 before any handler runs):
# the request line and each header at most 8 KiB (nginx's large_client_header_buffers),
# at most 64 headers (the clients we serve send under 15); an idle keep-alive connection is
# closed after 75 s (nginx's keepalive_timeout), not aiohttp's hour.
HEADER_LIMITS: dict[str, Any] = {"max_line_size": 8190, "max_field_size": 8190,
                                 "max_headers": 64, "keepalive_timeout": 75.0}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
REPLY_KEY = web.RequestKey("edgevlm.reply", HttpReply)  # the request's reply, once queued


def _error_response(path: str, err: HttpError) -> web.Response:
    body = openai_body(err) if path.startswith("/v1") else ollama_body(err)
    return web.json_response(body, status=err.status, headers=headers_of(err))


class HttpFrontDoor:
    """The HTTP front door of one daemon: ``start()`` binds and serves, ``stop()`` closes."""

    def __init__(self, http: HttpConfig, submitter: Submitter,
                 card: ollama_api.ModelCard, *, max_body_bytes: int,
                 serving: Callable[[], bool], default_max_tokens: int = 512,
                 cache_stats: Callable[[], CacheStats | None] = lambda: None,
                 fetcher: MediaFetcher | None = None) -> None:
        self.http = http
        self.submitter = submitter
        self.card = card
        self.max_body_bytes = max_body_bytes
        self.serving = serving
        self.default_max_tokens = default_max_tokens
        self.cache_stats = cache_stats
        self.fetcher = fetcher or MediaFetcher([], max_body_bytes, 5.0)
        self.port: int | None = None  # bound port (http.port, or the free one for 0)
        self._requester = ("http:" + hashlib.sha256(http.api_key.encode()).hexdigest()[:16]
                           if http.api_key else "http")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="edgevlm-http", daemon=True)
        self._created = int(time.time())

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 15.0) -> None:
        """Serve; raises OSError (e.g. the port is taken) when it cannot bind."""
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError(f"the HTTP server did not start within {timeout:g} s")
        if self._failure is not None:
            raise self._failure
        scheme = "https" if self.http.cert else "http"
        log.info("http: serving the OpenAI and Ollama APIs on %s://%s:%d%s", scheme,
                 self.http.host, self.port, " (api key required)" if
                 self.http.api_key else "")
        if self.http.allow_without_key and self.http.api_key is None:
            log.warning("http: no api_key and http.allow_without_key: anyone who reaches "
                        "port %d can use the model", self.port)

    def stop(self) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stop.set)
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # reported to start(); never escapes the thread
            self._failure = exc
            self._ready.set()
        finally:
            loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        app = web.Application(client_max_size=self.max_body_bytes,
                              middlewares=[self._errors, self._auth])
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_post("/v1/chat/completions", self._openai_chat)
        app.router.add_get("/v1/models", self._openai_models)
        app.router.add_post("/api/generate", self._ollama_generate)
        app.router.add_post("/api/chat", self._ollama_chat)
        app.router.add_get("/api/tags", self._ollama_tags)
        app.router.add_post("/api/show", self._ollama_show)
        app.router.add_get("/api/version", self._ollama_version)
        # handler_cancellation: a client that disconnects cancels its handler, which
        # abandons its job (not started, or stopped at its next token)
        runner = web.AppRunner(app, access_log=None, handle_signals=False,
                               handler_cancellation=True, **HEADER_LIMITS)
        await runner.setup()
        context = None
        if self.http.cert and self.http.key:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(self.http.cert, self.http.key)
        site = web.TCPSite(runner, self.http.host, self.http.port, ssl_context=context)
        try:
            await site.start()
            addresses = runner.addresses  # the bound (host, port, ...) of each socket
            self.port = int(addresses[0][1]) if addresses else self.http.port
            self._ready.set()
            await self._stop.wait()
        finally:
            await runner.cleanup()

    # ------------------------------------------------------------------ middleware

    @web.middleware
    async def _errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPRequestEntityTooLarge:
            return _error_response(request.path, HttpError(
                413, "payload_too_large", f"the request body is over {self.max_body_bytes} "
                "bytes (limits.max_payload_bytes); send smaller images or fewer of them"))
        except web.HTTPException:
            raise
        except ConnectionResetError:  # a write to a client that went away: stop its job
            reply = request.get(REPLY_KEY)
            if reply is not None:
                self.submitter.abandon(reply)
            raise
        except Exception as exc:  # every error becomes the dialect's answer
            err = from_exception(exc)
            if err.type == "internal":
                log.error("http %s failed", request.path, exc_info=exc)
            return _error_response(request.path, err)

    @web.middleware
    async def _auth(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        key = self.http.api_key
        if key is not None and request.path != "/health":
            given = request.headers.get("Authorization", "")
            expected = f"Bearer {key}"
            if not hmac.compare_digest(given.encode(), expected.encode()):
                raise HttpError(401, "authentication_error", "missing or wrong API key: send "
                                "'Authorization: Bearer <http.api_key>'")
        return await handler(request)

    # ------------------------------------------------------------------ helpers

    async def _body(self, request: web.Request) -> tuple[dict[str, Any], int]:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError as exc:  # not JSON, not UTF-8, an int of > 4300 digits
            raise HttpError(400, "invalid_request", f"the body is not JSON ({exc})") from None
        except RecursionError:
            raise HttpError(400, "invalid_request", "the body is nested too deeply to "
                            "parse; send a JSON object with 'messages'") from None
        if not isinstance(body, dict):
            raise HttpError(400, "invalid_request", "the body must be a JSON object")
        return body, len(raw)

    def _submit(self, web_request: web.Request, request: dict[str, Any], size: int, *,
                fit_max_tokens: bool = False) -> HttpReply:
        reply = self.submitter.submit(request, size, self._requester,
                                      asyncio.get_running_loop(), fit_max_tokens=fit_max_tokens)
        web_request[REPLY_KEY] = reply
        task = asyncio.current_task()
        if task is not None:  # the handler cancelled (client gone): abandon the job
            task.add_done_callback(lambda t: self.submitter.abandon(reply)
                                   if t.cancelled() else None)
        return reply

    @staticmethod
    async def _answer(reply: HttpReply) -> dict[str, Any]:
        """The final answer's data (chunks skipped); HttpError for an error answer."""
        while True:
            kind, value = await reply.events.get()
            if kind == "done":
                return _data_of(value)

    # ------------------------------------------------------------------ routes

    async def _health(self, request: web.Request) -> web.Response:
        ok = self.serving()
        return web.json_response({"status": "ok" if ok else "unavailable"},
                                 status=200 if ok else 503)

    async def _metrics(self, request: web.Request) -> web.Response:
        metrics = self.submitter.metrics
        text = prometheus.render(self.card.name, metrics.snapshot(self.cache_stats()),
                                 metrics.totals())
        return web.Response(body=text.encode(), headers={"Content-Type": prometheus.CONTENT_TYPE})

    async def _openai_models(self, request: web.Request) -> web.Response:
        return web.json_response(openai_api.models(self.card.name, self.card.context,
                                                   self._created))

    async def _openai_chat(self, request: web.Request) -> web.StreamResponse:
        body, size = await self._body(request)
        proto = openai_api.chat_request(body, self.default_max_tokens)
        urls = self.fetcher.check(proto)  # every image URL on an allowed host
        if urls:  # the counts, text and max_tokens are checked before anything is fetched
            self.submitter.precheck(with_placeholders(proto), size, self._requester)
            fetched = await self.fetcher.fetch_all(urls)
            proto = substituted(proto, fetched)
            size += sum(len(data) for data in fetched.values())
        reply = self._submit(request, proto, size)
        cid = openai_api.completion_id()
        if not proto["stream"]:
            data = await self._answer(reply)
            return web.json_response(openai_api.completion(data, self.card.name, cid))
        created = int(time.time())
        kind, value = await reply.events.get()
        if kind == "done":  # failed before the first token: a plain error answer
            data = _data_of(value)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-cache"})
        await response.prepare(request)
        await response.write(openai_api.chunk(cid, self.card.name, created,
                                              {"role": "assistant", "content": ""}))
        while kind == "chunk":
            await response.write(openai_api.chunk(cid, self.card.name, created,
                                                  {"content": value}))
            kind, value = await reply.events.get()
        try:
            data = _data_of(value)
        except HttpError as err:  # after the first token: an error event, as OpenAI sends
            await response.write(openai_api.sse(openai_body(err)))
            await response.write(openai_api.SSE_DONE)
            return response
        await response.write(openai_api.chunk(cid, self.card.name, created, {},
                                              openai_api.finish_reason(data["finish_reason"])))
        if openai_api.include_usage(body):
            await response.write(openai_api.sse({
                "id": cid, "object": "chat.completion.chunk", "created": created,
                "model": self.card.name, "choices": [], "usage": openai_api.usage(data),
                "edgevlm": openai_api.extension(data)}))
        await response.write(openai_api.SSE_DONE)
        return response

    async def _ollama_generate(self, request: web.Request) -> web.StreamResponse:
        body, size = await self._body(request)
        return await self._ollama(request, body, ollama_api.generate_request(
            body, self.default_max_tokens), size, chat=False)

    async def _ollama_chat(self, request: web.Request) -> web.StreamResponse:
        body, size = await self._body(request)
        return await self._ollama(request, body, ollama_api.chat_request(
            body, self.default_max_tokens), size, chat=True)

    async def _ollama(self, request: web.Request, body: dict[str, Any], proto: dict[str, Any],
                      size: int, *, chat: bool) -> web.StreamResponse:
        started = time.perf_counter()
        # num_predict is a cap, as Ollama treats it: an answer is fitted to the context
        reply = self._submit(request, proto, size, fit_max_tokens=True)
        model = str(body.get("model") or self.card.name)

        def piece(text: str) -> dict[str, Any]:
            head = {"model": model, "created_at": ollama_api.now()}
            if chat:
                return {**head, "message": {"role": "assistant", "content": text}}
            return {**head, "response": text}

        if not proto["stream"]:
            data = await self._answer(reply)
            return web.json_response({**piece(data["text"]),
                                      **ollama_api.final_fields(data, started)})
        kind, value = await reply.events.get()
        if kind == "done":
            data = _data_of(value)
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        while kind == "chunk":
            await response.write(ollama_api.line({**piece(value), "done": False}))
            kind, value = await reply.events.get()
        try:
            data = _data_of(value)
        except HttpError as err:  # Ollama streams an error as one more line
            await response.write(ollama_api.line(ollama_body(err)))
            return response
        await response.write(ollama_api.line({**piece(""),
                                              **ollama_api.final_fields(data, started)}))
        return response

    async def _ollama_tags(self, request: web.Request) -> web.Response:
        return web.json_response(ollama_api.tags(self.card))

    async def _ollama_show(self, request: web.Request) -> web.Response:
        await self._body(request)
        return web.json_response(ollama_api.show(self.card))

    async def _ollama_version(self, request: web.Request) -> web.Response:
        from ... import __version__

        return web.json_response({"version": __version__})


def _data_of(response: Any) -> dict[str, Any]:
    """The ``data`` of an ok answer; HttpError of a failed one."""
    answer = response.model_dump(mode="json", exclude_none=True)
    if answer.get("status") != "ok":
        raise from_answer(answer.get("error") or {})
    return answer["data"]  # type: ignore[no-any-return]
