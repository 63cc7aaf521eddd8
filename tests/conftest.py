"""Shared fixtures."""

from __future__ import annotations

from typing import Any

import pytest

from edgevlm.wire import strict_base64
from tests.helpers import image_bytes


@pytest.fixture
def jpeg_640x480() -> bytes:
    return image_bytes(640, 480)


@pytest.fixture
def decoded_lengths(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Lengths of every text handed to strict_base64.decode or decode_into during the test."""
    lengths: list[int] = []
    real, real_into = strict_base64.decode, strict_base64.decode_into

    def spy(text: str | bytes) -> bytes:
        lengths.append(len(text))
        return real(text)

    def spy_into(text: str | bytes, out: Any) -> int:
        lengths.append(len(text))
        return real_into(text, out)

    monkeypatch.setattr(strict_base64, "decode", spy)
    monkeypatch.setattr(strict_base64, "decode_into", spy_into)
    return lengths
