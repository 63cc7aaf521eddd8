"""Model families by GGUF ``general.architecture`` (the C side has its own table,
native/src/models/). To add one: a module beside ``qwen3vl.py`` with its ``FAMILY`` (and its
sizing rules in :mod:`edgevlm.vision.sizing`), a row in :data:`REGISTRY`, and its tests."""

from __future__ import annotations

from . import qwen3vl
from .base import ModelFamily

REGISTRY: dict[str, ModelFamily] = {f.architecture: f for f in (qwen3vl.FAMILY,)}


def family_for(architecture: str) -> ModelFamily:
    """The family of a GGUF ``general.architecture``; ValueError naming the supported ones."""
    try:
        return REGISTRY[architecture]
    except KeyError:
        raise ValueError(f"model architecture {architecture!r} is not supported; edgevlm "
                         f"runs {', '.join(sorted(REGISTRY))}") from None


__all__ = ["REGISTRY", "ModelFamily", "family_for"]
