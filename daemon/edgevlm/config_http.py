"""The ``http:`` section: the HTTP front door (OpenAI- and Ollama-compatible API,
:mod:`edgevlm.frontdoors.http`). Off by default."""

from __future__ import annotations

import ipaddress

from pydantic import BaseModel, ConfigDict, Field, model_validator

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def is_loopback(host: str) -> bool:
    """Whether binding to ``host`` keeps the server to this machine."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class HttpConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(default=False, description="serve the OpenAI- and Ollama-compatible "
                          "HTTP API beside MQTT (the same queue and model)")
    host: str = Field(default="127.0.0.1", min_length=1, description="address to listen on; "
                      "anything but loopback needs api_key (or allow_without_key)")
    port: int = Field(default=11434, ge=0, le=65535, description="TCP port (11434: "
                      "Ollama's, so its clients find the board with only the host changed; "
                      "0: a free one, logged)")
    default_max_tokens: int = Field(default=512, ge=1, le=32768, description="answer length "
                                    "when a request names none (OpenAI's max_tokens, "
                                    "Ollama's num_predict)")
    api_key: str | None = Field(default=None, min_length=16, description="every route but "
                                "/health needs 'Authorization: Bearer <api_key>'")
    allow_without_key: bool = Field(default=False, description="listen beyond loopback "
                                    "without api_key (anyone on the network may use the model)")
    model_name: str | None = Field(default=None, min_length=1, description="the model's name "
                                   "in /v1/models and /api/tags (default: the model file's)")
    allowed_media_domains: list[str] = Field(
        default_factory=list, description="host names whose http(s) image URLs are fetched "
        "(exact names; empty: only data: URLs); a redirect must stay on these hosts and never "
        "reach a private, loopback or link-local address")
    media_fetch_timeout_s: float = Field(default=5.0, gt=0, le=120, description="the whole "
                                         "fetch of one image URL, redirects included")
    cert: str | None = Field(default=None, description="TLS certificate (PEM) to serve https")
    key: str | None = Field(default=None, description="TLS private key (PEM) for cert")

    @model_validator(mode="after")
    def _safe_binding(self) -> HttpConfig:
        if (self.enabled and self.api_key is None and not self.allow_without_key
                and not is_loopback(self.host)):
            raise ValueError(f"host {self.host!r} opens the model to the network without a "
                             "key; set http.api_key (16+ characters), or "
                             "http.allow_without_key: true to allow that, or host 127.0.0.1")
        if (self.cert is None) != (self.key is None):
            raise ValueError("http.cert and http.key go together (both, or neither)")
        return self
