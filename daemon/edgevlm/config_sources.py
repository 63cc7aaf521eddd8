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
        except yaml.YAMLError as exc:  # without the snippet of the file: it shows a secret
            mark = getattr(exc, "problem_mark", None)
            why = getattr(exc, "problem", None) or "cannot parse it"
            where = f" (line {mark.line + 1})" if mark is not None else ""
            self.raw.problems.append(f"!secret {name} (line {line}): {self.secrets_path} is "
                                     f"not valid YAML: {why}{where}")
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
    value = loader.env[name]
    if value:  # masked like a !secret value: in errors and in Config.redacted()
        loader.raw.secret_values.add(value)
    return value


_TaggedLoader.add_constructor("!secret", _construct_secret)
_TaggedLoader.add_constructor("!env", _construct_env)


MAX_VALUES = 100_000  # values of a config once aliases are expanded (a real one has < 1000)


SECRET_TAGS = ("!secret", "!env")
_MERGE_TAG = "tag:yaml.org,2002:merge"


def _key(loader: _TaggedLoader, node: yaml.Node) -> Any:
    """A mapping key as the loader will build it (``yes`` and ``true`` are the same key);
    ``None`` for keys YAML allows but a config cannot have (a merge ``<<``, a list)."""
    if not isinstance(node, yaml.ScalarNode) or node.tag == _MERGE_TAG:
        return None
    key = loader.construct_object(node)
    try:
        hash(key)
    except TypeError:  # a !secret naming a list: the loader refuses it later
        return ("node", node.tag, node.value)
    return ("key", key)


def _duplicates(loader: _TaggedLoader, node: yaml.MappingNode, path: Loc,
                found: list[tuple[int, str]]) -> None:
    """Each key written twice in one mapping, as (line, problem): the loader would keep only
    the last (a second ``mqtt:`` section drops the first's host and password without a word)."""
    seen: dict[Any, list[tuple[yaml.Node, yaml.Node]]] = {}
    for key, value in node.value:
        ident = _key(loader, key)
        if ident is not None:
            seen.setdefault(ident, []).append((key, value))
    for pairs in seen.values():
        if len(pairs) < 2:
            continue
        name = ".".join(str(p) for p in (*path, pairs[0][0].value))
        lines = [key.start_mark.line + 1 for key, _ in pairs]
        again = ", ".join(str(n) for n in lines[1:-1]) + (" and " if len(lines) > 2 else "")
        again = f"line{'s' if len(lines) > 2 else ''} {again}{lines[-1]}"
        if not any(isinstance(value, yaml.MappingNode) for _, value in pairs):
            advice = "only the last value would count; keep one"
        elif len(lines) == 2:
            advice = "the second section would replace the first whole; merge them into one"
        else:
            advice = "the last section would replace the others whole; merge them into one"
        found.append((lines[0], f"{name} (line {lines[0]}): duplicate key, written again on "
                                f"{again}; {advice}"))


class _Walk:
    """Record the line of every value and which came from ``!secret``/``!env``; refuse
    recursive aliases and alias bombs; find keys written twice in a mapping."""

    def __init__(self, loader: _TaggedLoader, raw: RawConfig) -> None:
        self.loader, self.raw = loader, raw
        self.budget = MAX_VALUES
        self.active: set[int] = set()  # the mappings and lists around the current node
        self.checked: set[int] = set()  # mappings checked for duplicate keys
        self.duplicates: list[tuple[int, str]] = []

    def __call__(self, node: yaml.Node, path: Loc) -> None:
        self.budget -= 1
        if self.budget < 0:
            raise ConstructorError(None, None, f"more than {MAX_VALUES} values once aliases "
                                   "are expanded; write the values out", node.start_mark)
        if id(node) in self.active:
            raise ConstructorError(None, None, "an alias refers to a value that contains it",
                                   node.start_mark)
        self.raw.origins[path] = f"line {node.start_mark.line + 1}"
        if node.tag in SECRET_TAGS:
            self.raw.secret_paths.add(path)
        self.active.add(id(node))
        if isinstance(node, yaml.MappingNode):
            if id(node) not in self.checked:  # an aliased mapping once, at its anchor
                self.checked.add(id(node))
                _duplicates(self.loader, node, path, self.duplicates)
            for key, value in node.value:
                child = (*path, str(key.value))
                self(value, child)
                self.raw.origins[child] = f"line {key.start_mark.line + 1}"
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self(item, (*path, i))
        self.active.discard(id(node))


def read_yaml(text: str, secrets_path: Path | None, env: Mapping[str, str]) -> RawConfig:
    """Parse the config text; raises :class:`yaml.YAMLError` on bad syntax, values Python
    cannot hold, recursive aliases, alias bombs and nesting too deep to parse. Keys written
    twice and unresolvable ``!secret``/``!env`` are listed in ``problems``."""
    raw = RawConfig()
    loader = _TaggedLoader(text)
    loader.raw, loader.secrets_path, loader.env = raw, secrets_path, env
    try:
        node = loader.get_single_node()
        if node is None:
            return raw
        walk = _Walk(loader, raw)
        walk(node, ())
        raw.problems += [problem for _, problem in sorted(walk.duplicates)]
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
