"""How the configuration is shown: a bad one as :class:`ConfigError`, one line per problem
naming key, value and origin (``limits.max_queue = -1 (line 12): ...``), and every secret as
``***`` there and in ``edgevlm config`` (:func:`redact`, used by ``Config.redacted``)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from .config_sources import Loc, RawConfig

SECRET_KEYS = frozenset({"password", "key", "secret", "token", "api_key"})
REDACTED = "***"


def redact(value: Any, path: Loc, secret_paths: set[Loc], secret_values: frozenset[str],
           hidden: set[str] | None = None, inherited: bool = False) -> Any:
    """``value`` (at ``path``) with every secret as ``***``: passwords and keys by name, what
    came from ``!secret``/``!env`` (all of it, when a whole section did) and every string
    equal to a ``!secret``/``!env`` value. ``hidden`` collects the texts it masked."""
    inherited = inherited or path in secret_paths
    if isinstance(value, dict):
        return {k: redact(v, (*path, k), secret_paths, secret_values, hidden, inherited)
                for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, (*path, i), secret_paths, secret_values, hidden, inherited)
                for i, v in enumerate(value)]
    if value is None:
        return None
    if (inherited or (path and str(path[-1]) in SECRET_KEYS)
            or (isinstance(value, str) and value in secret_values)):
        if hidden is not None:
            hidden.add(str(value))
        return REDACTED
    return value


class ConfigError(ValueError):
    """The configuration is invalid; ``problems`` lists each with path, value and origin."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"invalid configuration in {source}:\n{lines}")


_NOISE = ("function-before", "function-after", "int", "str", "literal", "float", "bool",
          "TLSConfig", "none")


def validation_problems(exc: ValidationError, raw: RawConfig) -> list[str]:
    """One line per validation error: key, value and origin, with secrets as ``***``."""
    secret_values = frozenset(raw.secret_values)
    problems = []
    for err in exc.errors(include_url=False):
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and (
            "[" in p or p in _NOISE)))
        key = ".".join(str(p) for p in loc) or "(top level)"
        origin = raw.origin_of(loc)
        where = f" ({origin})" if origin else ""
        hidden: set[str] = set()
        inherited = (any(loc[:end] in raw.secret_paths for end in range(len(loc)))
                     or (bool(loc) and str(loc[-1]) in SECRET_KEYS))  # a password as a list
        shown = redact(err.get("input"), loc, raw.secret_paths, secret_values, hidden,
                       inherited)
        value = "" if err["type"] == "missing" else f" = {shown!r}".replace("'***'", "***")
        message = err["msg"].removeprefix("Value error, ")
        for text in sorted(hidden - {""}, key=len, reverse=True):  # a validator may quote it
            message = re.sub(rf"(?<!\w){re.escape(text)}(?!\w)", REDACTED, message)
        if err["type"] == "extra_forbidden":
            message = "unknown key; check the spelling against etc/edgevlm.yaml"
        problems.append(f"{key}{value}{where}: {message}")
    return problems
