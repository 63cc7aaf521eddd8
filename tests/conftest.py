"""Shared fixtures."""

from __future__ import annotations

import pytest

from tests.helpers import image_bytes


@pytest.fixture
def jpeg_640x480() -> bytes:
    return image_bytes(640, 480)
