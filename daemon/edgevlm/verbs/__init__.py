"""The verbs: each a value (:class:`~.base.Verb`) in its own module, found here by name.

To add one: a module beside ``describe.py`` with its ``VERB``, a row in :data:`REGISTRY`, and
its tests; the front doors subscribe to and the worker dispatches on every verb listed here.
"""

from __future__ import annotations

from . import describe
from .base import Verb

REGISTRY: dict[str, Verb] = {verb.name: verb for verb in (describe.VERB,)}
VERB_NAMES: tuple[str, ...] = tuple(REGISTRY)


def get_verb(name: str) -> Verb:
    """The verb called ``name`` (KeyError: there is none)."""
    return REGISTRY[name]


__all__ = ["REGISTRY", "VERB_NAMES", "Verb", "get_verb"]
