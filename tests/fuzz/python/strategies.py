"""Hypothesis generators for the Python fuzz targets: seeds from the corpus mutated near
validity (fields dropped, replaced by wrong types, huge numbers, NaN, odd unicode, lone
surrogates, deep nesting, long strings), byte-level edits of the seeds, and raw bytes.

Hypothesis draws one 64-bit seed per example; the mutation itself runs in plain Python from
that seed (``random.Random``), which keeps hypothesis' own cost per example low enough for
10,000 examples per target in CI. A failing example is reproduced from the seed hypothesis
prints: ``_build(target, seed)``.
"""

from __future__ import annotations

import functools
import json
import random
from functools import cache
from typing import Any

import yaml
from hypothesis import strategies as st

from .targets import seeds

HUGE_INTS = [2**31, 2**63, 2**64, -(2**63) - 1, 10**30, -1, 0, 1, 4096, 4097]
FLOATS = [float("nan"), float("inf"), -float("inf"), -0.0, 1e308, 5e-324, 0.5, 240.0001]
ODD_TEXT = ["", " ", "\x00", "\ud800", "\udfff", "\U0001f600", "e\u0301", "\u202e", "é" * 3,
            "{camera}", "{0}", "{sub_label!z}", "{", "data:", "data:image/png;base64,", "====",
            "QUJD====", "QR==", "AAAA", "text", "image", "vision_tokens", "end", "person",
            "../../etc/passwd", "$SYS/#", "+/#", "null", "1" * 5000]
KEYS = ["type", "id", "grid", "tokens_b64", "ds_b64", "dtype", "layout", "after", "camera",
        "label", "messages", "content", "extra", "\ud800"]


def _scalar(rng: random.Random, small: bool) -> Any:
    kind = rng.randrange(8)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.choice(HUGE_INTS)
    if kind == 2:
        return rng.randint(-3, 20)
    if kind == 3:
        return rng.choice(FLOATS)
    if kind == 4:
        return rng.choice(ODD_TEXT)
    if kind == 5:
        return "".join(chr(rng.choice([rng.randrange(32, 127), rng.randrange(0x10FFFF)]))
                       for _ in range(rng.randrange(12)))
    if kind == 6:
        return "A" * rng.choice([3, 100, 2000] if small else [3, 100, 5000, 70_000])
    return rng.choice([[], {}, [None], {"type": None}])


def _deep(rng: random.Random, leaf: Any, small: bool) -> Any:
    for i in range(rng.choice([2, 10, 40] if small else [2, 30, 400, 3000])):
        leaf = [leaf] if i % 2 else {"a": leaf}
    return leaf


def mutate(rng: random.Random, value: Any, small: bool = False) -> Any:
    """``value`` with one change at a random place of its tree; ``small``: strings and nesting
    kept short (YAML: PyYAML takes ~10 ms per 50 KB)."""
    if isinstance(value, dict) and value and rng.random() < 0.75:
        key = rng.choice(sorted(value))
        return {**value, key: mutate(rng, value[key], small)}
    if isinstance(value, list) and value and rng.random() < 0.75:
        i = rng.randrange(len(value))
        return [*value[:i], mutate(rng, value[i], small), *value[i + 1:]]
    op = rng.randrange(7)
    if op == 0 and isinstance(value, dict) and value:  # drop a field
        key = rng.choice(sorted(value))
        return {k: v for k, v in value.items() if k != key}
    if op == 1 and isinstance(value, dict):  # add a field
        return {**value, rng.choice(KEYS): _scalar(rng, small)}
    if op == 2 and isinstance(value, list):  # repeat the elements
        return value * rng.choice([0, 2, 5, 40])
    if op == 3:
        return _deep(rng, value, small)
    if op == 4 and isinstance(value, str):  # cut or edit a string
        i = rng.randrange(len(value) + 1)
        return value[:i] + rng.choice(["", "=", "\ud800", "A", "\x00", "é", "==", "+"])
    if op == 5 and isinstance(value, int | float) and not isinstance(value, bool):
        return rng.choice([str(value), [value], value * 2**40, -value, value + 0.5])
    return _scalar(rng, small)


def edit_bytes(rng: random.Random, data: bytes) -> bytes:
    """``data`` with a few bytes replaced, inserted or removed, or cut."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(out) + 1)
        op = rng.randrange(4)
        if op == 0 and i < len(out):
            out[i] = rng.randrange(256)
        elif op == 1:
            out[i:i] = rng.randbytes(rng.randint(1, 8))
        elif op == 2:
            del out[i:i + rng.randint(1, 16)]
        else:
            del out[i:]
    return bytes(out)


def _json_bytes(value: Any, ascii_only: bool) -> bytes:
    try:
        return json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    except (RecursionError, ValueError):  # nested beyond json's own limit: send it as text
        return b'{"a":' * 3000


def _yaml_bytes(value: Any, _: bool) -> bytes:
    try:
        return yaml.safe_dump(value, allow_unicode=True).encode("utf-8", "surrogatepass")
    except (yaml.YAMLError, RecursionError):
        return b"a: [" * 300


YAML_SNIPPETS = [b"!secret nope", b"!env NOPE", b"!secret mqtt_password", b"&a [*a]",
                 b"!!python/object/apply:os.system ['true']", b"\t", b"- ", b": :", b"'",
                 b"\xff", b"1" * 5000, b"2024-13-45", b"[" * 200, b"*nope", b"&x 1\ny: *x",
                 b"\n  - a: {b: [c, {d: e}]}\n"]


@cache
def _docs(target: str) -> tuple[list[bytes], list[Any]]:
    raw = seeds(target)
    docs = []
    for data in raw:
        try:
            doc = yaml.safe_load(data) if target == "config" else json.loads(data)
        except (ValueError, yaml.YAMLError):
            continue
        if isinstance(doc, dict):
            docs.append(doc)
    return raw, docs


def _build(target: str, mutation_seed: int) -> bytes:
    raw, docs = _docs(target)
    rng = random.Random(mutation_seed)
    mode = mutation_seed % 8
    if mode < 4:  # a seed document, one to three changes, written out again
        value = rng.choice(docs)
        for _ in range(1 + mode % 3):
            value = mutate(rng, value, small=target == "config")
        dump = _yaml_bytes if target == "config" else _json_bytes
        return dump(value, bool(mode & 1))
    if mode < 6:  # a seed file with a few bytes edited
        return edit_bytes(rng, rng.choice(raw))
    if mode == 6 and target == "config":  # a snippet pasted into a seed file
        text = rng.choice(raw)
        at = rng.randrange(len(text) + 1)
        return text[:at] + rng.choice(YAML_SNIPPETS) + text[at:]
    return rng.randbytes(rng.randrange(65))  # raw bytes


def inputs(target: str) -> st.SearchStrategy[bytes]:
    """Inputs of ``target``: near-valid mutations of its corpus, and raw bytes, all made from
    one drawn 64-bit seed (one hypothesis draw per example: cheap)."""
    return st.integers(0, 2**64 - 1).map(functools.partial(_build, target))
