"""The inference engine: the only user of the native core."""

from .engine import Engine, GenerationResult

__all__ = ["Engine", "GenerationResult"]
