"""The console examples of README.md and docs/cli.md are what the commands print today
(issue 19: the README showed a one-line ``tokens`` output the command never printed, and the
demo's sample answers were out of date).

Every fenced block tagged ``console`` is run: a line ``$ edgevlm ARGS`` is a command, the lines
after it (to the next ``$`` line or the block's end) its expected output — stdout and stderr
together, in order, as a terminal shows them. In an expected line ``...`` matches any text (times
and ports change); a line that is only ``...`` matches any number of lines. ``board.lan`` is
the test's broker with a daemon serving the bundled demo model, and a bare image file name is
that name among the demo's samples.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from edgevlm.models import demo_model_dir
from tests.mqtt.conftest import Broker

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = (ROOT / "README.md", ROOT / "docs" / "cli.md")
SAMPLES = demo_model_dir().parent / "samples"


@dataclass(frozen=True)
class Example:
    where: str  # file:line
    argv: list[str]
    expected: list[str]


def console_examples(path: Path) -> Iterator[Example]:
    lines = path.read_text(encoding="utf-8").splitlines()
    inside = False
    current: Example | None = None
    for number, line in enumerate(lines, 1):
        if line.startswith("```"):
            if current is not None:
                yield current
                current = None
            inside = line.strip() == "```console"
            continue
        if not inside:
            continue
        if line.startswith("$ "):
            if current is not None:
                yield current
            argv = shlex.split(line[2:])
            assert argv[0] == "edgevlm", f"{path.name}:{number}: only edgevlm commands run"
            current = Example(f"{path.name}:{number}", argv[1:], [])
        elif current is not None:
            current.expected.append(line)


EXAMPLES = [e for doc in DOCUMENTS for e in console_examples(doc)]


def matches(expected: list[str], actual: list[str]) -> bool:
    """``...`` in a line matches any text; a line of only ``...`` any number of lines."""
    pattern = "".join(
        r"(?:[^\n]*\n)*?" if line.strip() == "..." else
        ".*".join(re.escape(part) for part in line.split("...")) + r"\n"
        for line in expected)
    return re.fullmatch(pattern, "".join(f"{line}\n" for line in actual)) is not None


def test_the_documents_have_console_examples() -> None:
    where = {e.where.split(":")[0] for e in EXAMPLES}
    assert where == {"README.md", "cli.md"}, where
    assert {e.argv[0] for e in EXAMPLES} >= {"tokens", "demo", "ask"}


def test_the_matcher_fails_on_a_wrong_line() -> None:
    assert matches(["a ... c", "...", "z"], ["a b c", "x", "y", "z"])
    assert not matches(["a ... c", "z"], ["a b d", "z"])
    assert not matches(["{\"tokens\": 880}"], ["{", "  \"tokens\": 880", "}"])


@pytest.fixture
def board(broker: Broker, make_service: Callable[..., Any]) -> str:
    """A daemon with the demo model on the test broker; its address for ``board.lan``."""
    make_service({"homeassistant.discovery": False})
    return f"127.0.0.1:{broker.port}"


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.where for e in EXAMPLES])
def test_console_example_prints_what_the_document_shows(example: Example, board: str) -> None:
    argv = [board if a == "board.lan" else a for a in example.argv]
    argv = [str(SAMPLES / a) if (SAMPLES / a).is_file() and "/" not in a else a for a in argv]
    if argv[0] == "demo":
        argv.insert(1, "--broker-kind=auto")  # a private broker, never the test's own daemon
    done = subprocess.run([sys.executable, "-m", "edgevlm", *argv], capture_output=True,
                          text=True, timeout=180, cwd=ROOT)  # as from the checkout
    actual = (done.stdout + done.stderr).splitlines()
    if argv[0] == "ask":  # the answer on stdout, the metrics line on stderr, in that order
        actual = done.stdout.splitlines() + done.stderr.splitlines()
    assert matches(example.expected, actual), (
        f"{example.where}: `edgevlm {' '.join(example.argv)}` (exit {done.returncode}) printed"
        "\n" + "\n".join(actual) + "\n\nbut the document shows\n" + "\n".join(example.expected))
