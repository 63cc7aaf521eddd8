"""edgevlm: a Qwen3-VL vision-language daemon for edge boards that speaks MQTT."""

from __future__ import annotations

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    """``__version__``, looked up on first use: importing ``importlib.metadata`` and scanning
    the installed distributions costs ~50 ms of every start-up that never asks for it."""
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            value = version("edgevlm")
        except PackageNotFoundError:  # pragma: no cover - running from a source tree
            value = "0.0.0+unknown"
        globals()["__version__"] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
