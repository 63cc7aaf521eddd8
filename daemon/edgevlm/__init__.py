"""edgevlm: a Qwen3-VL vision-language daemon for edge boards that speaks MQTT."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("edgevlm")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
