"""The shared atheris driver of the Python fuzz harnesses (one per target, beside this file).

    .venv/bin/python tests/fuzz/python/fuzz_request.py -runs=10000000 [libFuzzer flags]

runs libFuzzer (atheris) on ``check_<target>`` from targets.py, starting from the committed
corpus tests/reliability/corpus/<target>/ (read only: new inputs go to the first directory
given, by default a new temporary one). A finding is an uncaught exception: atheris prints
it and writes the input as ``crash-<sha1>``. Needs the ``fuzz`` extra (``pip install -e .[fuzz]``).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def main(target: str) -> None:
    sys.path.insert(0, str(ROOT))
    import atheris

    with atheris.instrument_imports(include=["edgevlm"]):
        import edgevlm.config
        import edgevlm.config_sources
        import edgevlm.pipeline.admission
        import edgevlm.sources.cameras
        import edgevlm.wire.protocol
        import edgevlm.wire.strict_base64
        import edgevlm.wire.vision_tokens  # noqa: F401  (instrumented for coverage)
    from tests.fuzz.python.targets import CHECKS, CORPUS

    argv = [*sys.argv]
    if not any(not a.startswith("-") for a in argv[1:]):  # no corpus directory given
        scratch = tempfile.mkdtemp(prefix=f"edgevlm-fuzz-{target}-")  # libFuzzer writes here
        argv += [scratch, str(CORPUS / target)]
    atheris.Setup(argv, CHECKS[target])
    atheris.Fuzz()
