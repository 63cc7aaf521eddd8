"""Every configuration key is documented, shows its real default in etc/edgevlm.yaml, and is
read by some code (issue 19: ``model.family`` and ``model.min_pixels`` were validated and
documented, but nothing read them; the example set ``media.max_image_pixels`` 19x above the
default while saying it showed the defaults)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from edgevlm.config import CameraConfig, Config, TLSConfig

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "daemon" / "edgevlm"
EXAMPLE = ROOT / "etc" / "edgevlm.yaml"
DOCS = ROOT / "docs" / "configuration.md"
DIFFERS_ON_PURPOSE = "differs from the default on purpose"


def schema_keys(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, field) of every leaf of the schema; a camera's keys as ``cameras.*.key``."""
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        annotation = field.annotation
        if model is Config and name == "cameras":
            yield from schema_keys(CameraConfig, "cameras.*.")
        elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from schema_keys(annotation, f"{key}.")
        elif name == "tls":
            yield key, field
            yield from schema_keys(TLSConfig, f"{key}.")
        else:
            yield key, field


KEYS = dict(schema_keys(Config))


# --------------------------------------------------------------------------- documented


def example_lines() -> list[str]:
    return EXAMPLE.read_text(encoding="utf-8").splitlines()


def test_every_key_is_in_the_example_and_the_reference() -> None:
    example = EXAMPLE.read_text(encoding="utf-8")
    docs = DOCS.read_text(encoding="utf-8")
    missing_example = [k for k in KEYS if not re.search(
        rf"^\s*#?\s*{re.escape(k.split('.')[-1])}:", example, re.M)]
    missing_docs = [k for k in KEYS if f"`{k.replace('cameras.*.', 'cameras.<name>.')}`" not in docs
                    and f"`{k}`" not in docs and f"`{k.split('.')[-1]}`" not in docs]
    assert not missing_example, f"keys missing from etc/edgevlm.yaml: {missing_example}"
    assert not missing_docs, f"keys missing from docs/configuration.md: {missing_docs}"


def test_the_example_states_the_real_defaults() -> None:
    """Every value set in etc/edgevlm.yaml equals the schema's default, unless its line says
    it differs on purpose (copying the example must not change a limit by surprise)."""
    data = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    defaults = Config().model_dump(mode="python")
    parsed = Config.model_validate(data).model_dump(mode="python")
    lines = example_lines()
    wrong = []
    for section, values in data.items():
        if not isinstance(values, dict):
            assert parsed[section] == defaults[section], f"{section}: {values!r} is not the default"
            continue
        for key in values:
            if parsed[section][key] == defaults[section][key]:
                continue
            line = next((ln for ln in lines if re.match(rf"\s+{re.escape(key)}:", ln)), "")
            if DIFFERS_ON_PURPOSE not in line:
                wrong.append(f"{section}.{key}: example {parsed[section][key]!r}, default "
                             f"{defaults[section][key]!r}")
    assert not wrong, "etc/edgevlm.yaml says it shows the defaults, but: " + "; ".join(wrong)


def test_the_default_check_would_catch_a_changed_value(tmp_path: Path) -> None:
    """The comparison above on the old example's mistake (40000000 vs 2097152)."""
    data = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    data["media"]["max_image_pixels"] = 40_000_000
    assert Config.model_validate(data).media.max_image_pixels != Config().media.max_image_pixels


# --------------------------------------------------------------------------- consumed


SECTION_CLASSES = {"model": "ModelConfig", "limits": "LimitsConfig", "media": "MediaConfig",
                   "cache": "CacheConfig", "mqtt": "MQTTConfig",
                   "homeassistant": "HomeAssistantConfig", "zeroconf": "ZeroconfConfig",
                   "cameras.*": "CameraConfig", "mqtt.tls": "TLSConfig",
                   "frigate": "FrigateConfig", "http": "HttpConfig"}


class Reads(ast.NodeVisitor):
    """Which ``section.key`` the code reads. A value is read through
    - a chain ``<anything>.<section>.<key>`` (``self.config.mqtt.host``),
    - a name bound to a section (``mqtt = config.mqtt``; ``for name, cam in
      config.cameras.items()``; ``cam = cameras.get(name)``; a parameter annotated with the
      section's class), then ``name.key``,
    - ``self.key`` in a method of the section's class that the code calls,
    - a property of a Protocol whose docstring names the section's class
      (``sources.CameraSettings``: "What this module reads of ``config.CameraConfig``") that its
      module reads as ``.key``.
    """

    def __init__(self) -> None:
        self.aliases: dict[str, str] = {}  # name -> section, per module
        self.reads: set[str] = set()
        self.attrs: set[str] = set()  # every ``.name`` read in the module

    @staticmethod
    def section_of(node: ast.AST, aliases: dict[str, str]) -> str | None:
        if isinstance(node, ast.Attribute):
            if node.attr in ("model", "limits", "media", "cache", "mqtt", "homeassistant",
                             "zeroconf", "cameras", "frigate", "http"):
                return node.attr
            if node.attr == "tls":
                return "mqtt.tls"
        if isinstance(node, ast.Name):
            return aliases.get(node.id)
        return None

    def visit_Assign(self, node: ast.Assign) -> None:
        section = self.section_of(node.value, self.aliases)
        value = node.value
        if (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
                and value.func.attr == "get"
                and self.section_of(value.func.value, self.aliases) == "cameras"):
            section = "cameras.*"  # ``cam = self.cameras.get(name)``
        for target in node.targets:
            if section and isinstance(target, ast.Name):
                self.aliases[target.id] = section
        self.generic_visit(node)

    def visit_For(self, node: ast.For) -> None:
        it = node.iter
        if (isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute)
                and it.func.attr in ("items", "values")
                and self.section_of(it.func.value, self.aliases) == "cameras"):
            target = node.target
            if isinstance(target, ast.Tuple):
                target = target.elts[-1]
            if isinstance(target, ast.Name):
                self.aliases[target.id] = "cameras.*"
        self.generic_visit(node)

    def visit_arg(self, node: ast.arg) -> None:
        text = ast.unparse(node.annotation) if node.annotation else ""
        for section, cls in SECTION_CLASSES.items():
            if re.search(rf"\b{cls}\b", text):
                self.aliases[node.arg] = section

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.attrs.add(node.attr)
        section = self.section_of(node.value, self.aliases)
        if section:
            self.reads.add(f"{section}.{node.attr}")
        self.generic_visit(node)


def consumed_keys() -> set[str]:
    modules = [p for p in PACKAGE.rglob("*.py") if "convert" not in p.parts]
    trees = {p: ast.parse(p.read_text(encoding="utf-8")) for p in modules}
    reads: set[str] = set()
    attrs: dict[Path, set[str]] = {}
    for path, tree in trees.items():
        visitor = Reads()
        visitor.visit(tree)  # twice: an alias bound in a later method is known the 2nd time
        visitor.visit(tree)
        reads |= visitor.reads
        attrs[path] = visitor.attrs
    called = set().union(*(a for p, a in attrs.items() if p.name != "config.py"))
    for path, tree in trees.items():
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            doc = ast.get_docstring(cls) or ""
            for section, name in SECTION_CLASSES.items():
                if path.name == "config.py" and cls.name == name:  # its methods the code calls
                    for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef)):
                        if fn.name in called:
                            reads |= {f"{section}.{a.attr}" for a in ast.walk(fn)
                                      if isinstance(a, ast.Attribute)
                                      and isinstance(a.value, ast.Name) and a.value.id == "self"}
                if f"config.{name}" in doc and any(  # a Protocol standing for the section
                        isinstance(b, ast.Name) and b.id == "Protocol" for b in cls.bases):
                    declared = {fn.name for fn in cls.body if isinstance(fn, ast.FunctionDef)}
                    reads |= {f"{section}.{d}" for d in declared if _read_outside(tree, cls, d)}
    return reads


def _read_outside(tree: ast.Module, protocol: ast.ClassDef, attr: str) -> bool:
    inside = {id(n) for n in ast.walk(protocol)}
    return any(isinstance(n, ast.Attribute) and n.attr == attr and id(n) not in inside
               for n in ast.walk(tree))


def test_every_key_is_read_by_some_code() -> None:
    consumed = consumed_keys()
    unread = sorted(k for k in KEYS if k not in consumed)
    assert not unread, (f"documented keys that no code reads: {unread}; wire them through "
                        "or remove them from the schema, etc/edgevlm.yaml and the docs")


def test_the_read_check_finds_an_unread_key(tmp_path: Path) -> None:
    """The check itself: a key read nowhere is reported (a module that reads only
    ``config.model.path`` consumes nothing else of ``model``)."""
    visitor = Reads()
    visitor.visit(ast.parse("def f(config):\n    m = config.model\n    return m.path\n"))
    assert visitor.reads == {"model.path"}
