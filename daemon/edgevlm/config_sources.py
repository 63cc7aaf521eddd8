"""Where configuration values come from: the YAML file, ``!secret``/``!env``, env and flags.

Every value is tagged with its origin (``line 12``, ``from env EDGEVLM_MQTT__PORT``,
``from override mqtt.port``) so a validation error can say where the bad value was written.
Values taken from ``!secret``, ``!env`` and environment variables are text; pydantic converts
``"1883"`` to an integer where a field wants one, and a password like ``0123`` stays as written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError

Loc = tuple[str | int, ...]
ENV_PREFIX = "EDGEVLM_"
ENV_SEPARATOR = "__"


@dataclass
class RawConfig:
    """A config mapping before validation, with the origin of each key and the secret values."""

    data: Any = field(default_factory=dict)  # a mapping once validated
    origins: dict[Loc, str] = field(default_factory=dict)
    secret_values: set[str] = field(default_factory=set)
    secret_paths: set[Loc] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)

    def origin_of(self, loc: Loc) -> str | None:
        """The origin of the longest known prefix of ``loc``."""
        for end in range(len(loc), -1, -1):
            if loc[:end] in self.origins:
                return self.origins[loc[:end]]
        return None

    def set_path(self, path: Loc, value: Any, origin: str) -> None:
        """Set ``value`` at ``path``, creating (or replacing non-mapping) sections on the way."""
        if not isinstance(self.data, dict):
            self.data = {}
        node = self.data
        for key in path[:-1]:
            child = node.get(str(key))
            if not isinstance(child, dict):
                child = node[str(key)] = {}
            node = child
        node[str(path[-1])] = value
        for known in [k for k in self.origins if k[:len(path)] == path]:
            del self.origins[known]
        self.secret_paths = {p for p in self.secret_paths if p[:len(path)] != path}
        self.origins[path] = origin


# libyaml's parser (PyYAML's wheels ship it) when present: 3-4x faster than the pure-Python one
# and it refuses nesting deeper than 1000 levels itself; the constructors stay Python's.
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _TaggedLoader(_SafeLoader):  # type: ignore[misc,valid-type]
    """SafeLoader + ``!secret name`` (secrets.yaml beside the file) and ``!env VAR``."""

    raw: RawConfig
    secrets_path: Path | None
    env: Mapping[str, str]
    _secrets: dict[str, Any] | None = None

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """SafeLoader's, with a YAML error at the value's line for a scalar Python refuses
        (an integer of more than 4300 digits, a date like 2024-13-45) instead of ValueError."""
        try:
            return super().construct_object(node, deep)
        except ValueError as exc:
            raise ConstructorError(None, None, f"cannot read the value {str(node.value)[:40]!r}"
                                   f": {str(exc)[:100]}", node.start_mark) from None

    def secrets(self, line: int, name: str) -> dict[str, Any] | None:
        if self._secrets is not None:
            return self._secrets
        if self.secrets_path is None:
            self.raw.problems.append(f"!secret {name} (line {line}): secrets need a config "
                                     "file; secrets.yaml is read from its directory")
            return None
        try:
            loaded = yaml.load(self.secrets_path.read_text(encoding="utf-8"),
                               Loader=yaml.BaseLoader)  # every value as text
        except OSError as exc:
            self.raw.problems.append(f"!secret {name} (line {line}): cannot read "
                                     f"{self.secrets_path}: {exc.strerror}")
            return None
        except yaml.YAMLError as exc:
            self.raw.problems.append(f"!secret {name} (line {line}): {self.secrets_path} is "
                                     f"not valid YAML: {exc}")
            return None
        self._secrets = loaded if isinstance(loaded, dict) else {}
        return self._secrets


def _construct_secret(loader: _TaggedLoader, node: yaml.Node) -> Any:
    name = str(loader.construct_scalar(node))
    line = node.start_mark.line + 1
    secrets = loader.secrets(line, name)
    if secrets is None:
        return None
    if name not in secrets:
        loader.raw.problems.append(f"!secret {name} (line {line}): no secret named {name!r} "
                                   f"in {loader.secrets_path}")
        return None
    value = secrets[name]
    if isinstance(value, str):
        loader.raw.secret_values.add(value)
    return value


def _construct_env(loader: _TaggedLoader, node: yaml.Node) -> Any:
    name = str(loader.construct_scalar(node))
    if name not in loader.env:
        loader.raw.problems.append(f"!env {name} (line {node.start_mark.line + 1}): the "
                                   f"environment variable {name} is not set")
        return None
    return loader.env[name]


_TaggedLoader.add_constructor("!secret", _construct_secret)
_TaggedLoader.add_constructor("!env", _construct_env)


MAX_VALUES = 100_000  # values of a config once aliases are expanded (a real one has < 1000)


def _walk(node: yaml.Node, path: Loc, raw: RawConfig, budget: list[int],
          active: set[int]) -> None:
    """Record the line of every value; refuse recursive aliases and alias bombs."""
    budget[0] -= 1
    if budget[0] < 0:
        raise ConstructorError(None, None, f"more than {MAX_VALUES} values once aliases are "
                               "expanded; write the values out", node.start_mark)
    if id(node) in active:
        raise ConstructorError(None, None, "an alias refers to a value that contains it",
                               node.start_mark)
    raw.origins[path] = f"line {node.start_mark.line + 1}"
    if node.tag == "!secret":
        raw.secret_paths.add(path)
    active.add(id(node))
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            child = (*path, str(key.value))
            _walk(value, child, raw, budget, active)
            raw.origins[child] = f"line {key.start_mark.line + 1}"
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, (*path, i), raw, budget, active)
    active.discard(id(node))


def read_yaml(text: str, secrets_path: Path | None, env: Mapping[str, str]) -> RawConfig:
    """Parse the config text; raises :class:`yaml.YAMLError` on bad syntax, values Python
    cannot hold, recursive aliases, alias bombs and nesting too deep to parse."""
    raw = RawConfig()
    loader = _TaggedLoader(text)
    loader.raw, loader.secrets_path, loader.env = raw, secrets_path, env
    try:
        node = loader.get_single_node()
        if node is None:
            return raw
        _walk(node, (), raw, [MAX_VALUES], set())
        data = loader.construct_document(node)
    except RecursionError:
        raise yaml.YAMLError("the document is nested too deeply") from None
    finally:
        loader.dispose()
    raw.data = data  # validated by the caller: it must be a mapping
    return raw


def env_value(text: str) -> Any:
    """An environment value: flow-style lists and maps are YAML; scalars stay text."""
    try:
        parsed = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if parsed is None or isinstance(parsed, list | dict):
        return parsed
    return text


def apply_env(raw: RawConfig, env: Mapping[str, str]) -> None:
    """``EDGEVLM_MQTT__HOST=x`` sets ``mqtt.host``; ``__`` nests, names are lower-cased."""
    for name in sorted(env):
        if not name.startswith(ENV_PREFIX) or ENV_SEPARATOR not in name:
            continue
        parts = name[len(ENV_PREFIX):].lower().split(ENV_SEPARATOR)
        if not all(parts):
            raw.problems.append(f"{name}: empty key in the variable name; write "
                                "EDGEVLM_<SECTION>__<KEY>")
            continue
        raw.set_path(tuple(parts), env_value(env[name]), f"from env {name}")


def apply_overrides(raw: RawConfig, overrides: Mapping[str, Any]) -> None:
    """``{"mqtt.host": "x"}`` (command-line flags) sets ``mqtt.host``."""
    for dotted, value in overrides.items():
        parts = tuple(dotted.split("."))
        if not all(parts):
            raw.problems.append(f"{dotted}: not a dotted key like mqtt.host")
            continue
        raw.set_path(parts, value, f"from override {dotted}")
