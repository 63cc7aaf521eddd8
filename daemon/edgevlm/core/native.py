"""The only door to the C core: loads ``edgevlm._native`` and maps C status codes to Python
exceptions (the one place that does so)."""

from __future__ import annotations

import importlib
from typing import Any

from ..wire.errors import ContextLengthExceeded, DeadlineExceeded, EdgevlmError, InternalError

try:
    _native: Any = importlib.import_module("edgevlm._native")   # built by cffi, no stubs
except ImportError as exc:  # pragma: no cover - a broken install
    raise ImportError("the edgevlm native core is not built; reinstall with `pip install .` "
                      f"(a C compiler is needed): {exc}") from exc

ffi: Any = _native.ffi
lib: Any = _native.lib

STATUS_NAMES = {
    lib.EDGEVLM_OK: "ok",
    lib.EDGEVLM_ERR_ARGUMENT: "bad argument",
    lib.EDGEVLM_ERR_IO: "I/O error",
    lib.EDGEVLM_ERR_FORMAT: "malformed model file",
    lib.EDGEVLM_ERR_UNSUPPORTED: "unsupported model",
    lib.EDGEVLM_ERR_NOMEM: "out of memory",
    lib.EDGEVLM_ERR_CONTEXT_FULL: "context full",
    lib.EDGEVLM_ERR_CANCELLED: "cancelled",
    lib.EDGEVLM_ERR_NO_VISION: "no vision encoder",
    lib.EDGEVLM_ERR_INVALID_INPUT: "invalid input",
}


class ModelLoadError(EdgevlmError):
    """A model pair that cannot be loaded: missing, malformed or unsupported files."""

    code = 500
    type = "internal"

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class EngineCancelled(DeadlineExceeded):
    """The running call was cancelled (deadline or shutdown)."""


def raise_for_status(status: int, message: str) -> None:
    """Raise the exception of a non-OK status with the core's message."""
    if status == lib.EDGEVLM_OK:
        return
    name = STATUS_NAMES.get(status, f"status {status}")
    if status == lib.EDGEVLM_ERR_CONTEXT_FULL:
        raise ContextLengthExceeded(f"{message} (model.context)")
    if status == lib.EDGEVLM_ERR_CANCELLED:
        raise EngineCancelled(f"generation cancelled: {message}")
    raise InternalError(f"native core: {name}: {message}")


def load_error(status: int, message: str) -> ModelLoadError:
    name = STATUS_NAMES.get(status, f"status {status}")
    return ModelLoadError(f"{name}: {message}", status)


def c_string(buf: Any) -> str:
    return str(ffi.string(buf).decode("utf-8", "replace"))
