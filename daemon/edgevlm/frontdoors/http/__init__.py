"""The HTTP front door: an OpenAI- and Ollama-compatible API on the same admission, queue,
worker and model as MQTT, so Frigate, LLM Vision and Home Assistant's Ollama integration use
the board with no new code (docs/http.md).

``server`` runs aiohttp on its own thread and event loop (auth, body limit, ``/health``);
``openai_api`` and ``ollama_api`` translate each dialect to a describe request and its
answer back; ``submit`` admits it and queues it with an :class:`~.submit.HttpReply`;
``errors`` is the one place that turns a wire error into an HTTP status and body.
"""
