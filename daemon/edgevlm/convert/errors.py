"""Errors of ``edgevlm convert``: bad input (exit 2) versus a conversion that failed (exit 1)."""

from __future__ import annotations

from typing import ClassVar


class ConvertError(Exception):
    """The conversion failed (I/O error, disk full, an internal inconsistency)."""

    exit_code: ClassVar[int] = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConvertInputError(ConvertError):
    """The input is not a convertible Qwen3-VL checkpoint: missing files, another model
    family, an unsupported tensor dtype, inconsistent shapes. The message says what to fix."""

    exit_code: ClassVar[int] = 2
