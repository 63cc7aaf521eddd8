"""The CLI on a bare install: the optional packages are imported only by the command that needs
them (issue 19). The fast half of the check; ``scripts/check-bare-install.sh`` (a stage of the
test command) proves the same on a real ``pip install .`` in a fresh virtual environment.

Each check runs in a fresh interpreter in which the optional packages cannot be imported, as
after ``pip install .`` with no extras: a module imported at the top of any module the CLI
loads fails it here in seconds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Everything outside the run-time dependencies of pyproject.toml that the project uses anywhere:
# the converter (gguf), the reference and tools (torch, transformers, jinja2, matplotlib), the
# tests (hypothesis, pytest), the long fuzz runs (atheris).
OPTIONAL = ("gguf", "torch", "transformers", "jinja2", "hypothesis", "matplotlib", "pytest",
            "atheris", "safetensors", "openai", "ollama")

_BLOCKER = f"""
import importlib.abc, sys
BLOCKED = {OPTIONAL!r}
class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Missing())
"""


def run_bare(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter where the optional packages are missing."""
    return subprocess.run([sys.executable, "-c", _BLOCKER + code], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)


def test_the_blocker_really_blocks() -> None:
    """The harness itself: an optional package cannot be imported under it."""
    done = run_bare("import gguf")
    assert done.returncode != 0 and "No module named 'gguf'" in done.stderr


def test_every_subcommand_builds_its_help_without_the_optional_packages() -> None:
    done = run_bare("""
import contextlib, io, json
from edgevlm.cli import build_parser
parser = build_parser()
subs = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
helps = {}
for name in subs.choices:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            parser.parse_args([name, "--help"])
        except SystemExit as exc:
            assert exc.code == 0, (name, exc.code)
    helps[name] = out.getvalue()
print(json.dumps(helps))
""")
    assert done.returncode == 0, done.stderr
    helps = json.loads(done.stdout)
    assert {"serve", "ask", "encode", "demo", "run", "schema", "tokens", "convert",
            "check-config"} <= set(helps)
    assert all(text.startswith("usage: edgevlm ") for text in helps.values())


def test_commands_that_need_no_extra_run_without_them() -> None:
    done = run_bare("""
import sys
from edgevlm.cli import main
assert main(["tokens", "--size", "1280x720"]) == 0
assert main(["check-config", "etc/edgevlm.yaml"]) == 0
assert main(["schema", "-o", "/dev/null"]) == 0
import edgevlm.engine, edgevlm.service, edgevlm.demo  # serve, run, encode and demo load these
""")
    assert done.returncode == 0, done.stderr
    assert '"tokens": 880' in done.stdout


@pytest.mark.parametrize("argv", [["convert"], ["convert", "hf-dir", "-o", "out"]])
def test_convert_without_gguf_says_what_to_install_and_exits_2(argv: list[str]) -> None:
    done = run_bare(f"import sys; from edgevlm.cli import main; sys.exit(main({argv!r}))")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines == ["edgevlm convert: needs the gguf package, which a plain install leaves "
                     "out; install it with: pip install 'edgevlm[convert]'"]
    assert "Traceback" not in done.stderr


def test_convert_with_gguf_still_requires_its_arguments(capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    """HF_DIR and -o are checked after the gguf import: with it installed they are required."""
    from edgevlm.cli import main

    assert main(["convert"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: edgevlm convert ")
    assert "the following arguments are required: HF_DIR, -o/--output" in err
    assert main(["convert", "some-dir"]) == 2
    assert "required: -o/--output" in capsys.readouterr().err
