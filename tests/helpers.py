"""Test helpers: real image files made with Pillow, and request builders."""

from __future__ import annotations

import base64
import contextlib
import io
import socketserver
import threading
from collections.abc import Iterator
from typing import Any, TypeVar

import numpy as np
from PIL import Image


def image_bytes(width: int, height: int, fmt: str = "JPEG", seed: int = 0, **save: Any) -> bytes:
    """A real encoded image: gradients plus noise, so codecs have something to chew on."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([(x * 255 // max(width - 1, 1)), (y * 255 // max(height - 1, 1)),
                     ((x + y) * 127 // max(width + height - 2, 1))], axis=-1)
    noise = rng.integers(0, 32, size=(height, width, 3))
    pixels = np.clip(base + noise, 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(buf, fmt, **save)
    return buf.getvalue()


def data_url(data: bytes, mime: str = "image/jpeg") -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode()


def user_request(*parts: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"v": 1, "id": "req-1", "messages": [{"role": "user", "content": list(parts)}],
            **fields}


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def image(data: bytes, mime: str = "image/jpeg") -> dict[str, Any]:
    return {"type": "image", "image": data_url(data, mime)}


Server = TypeVar("Server", bound=socketserver.BaseServer)


@contextlib.contextmanager
def serving(server: Server) -> Iterator[Server]:
    """``server`` answering on a thread of its own until the block ends (a real HTTP server
    standing for Frigate, an image host, ...)."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def describe_image_greedily(files: Any) -> Any:
    """The interop tests' probe: an engine on ``files`` (a ModelFiles pair) answers a 150×90 PNG
    + "Describe this image." with 4 greedy tokens and their logits (a GenerationResult)."""
    from edgevlm.engine import Engine

    messages = [{"role": "user", "content": [
        {"type": "image", "image": image_bytes(150, 90, "PNG")},
        {"type": "text", "text": "Describe this image."}]}]
    engine = Engine(files, threads=2, context=512)
    return engine.generate(messages, max_tokens=4, temperature=0.0, want_logits=True)
