"""The HTTP front door's tests run a real daemon (a Mosquitto broker, the demo model) with
``http.enabled`` and drive it with the client libraries Frigate, LLM Vision and Home
Assistant use: ``openai`` and ``ollama``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.mqtt.conftest import (  # noqa: F401 - the fixtures the daemon needs
    broker,
    demo_engine,
    engine_calls,
    make_config,
    make_service,
    mqtt_client,
)

API_KEY = "test-key-0123456789abcdef"


@pytest.fixture
def http_service(make_service: Callable[..., Any]) -> Callable[..., Any]:  # noqa: F811
    """A started daemon with the HTTP front door on a free port; keyword arguments are dotted
    config overrides. Its base URL: ``service.http_url``."""

    def make(overrides: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        service = make_service({"http.enabled": True, "http.port": 0, **(overrides or {})},
                               **kwargs)
        assert service.http is not None and service.http.port
        service.http_url = f"http://127.0.0.1:{service.http.port}"
        return service

    return make
