"""atheris harness of the request target (check_request in tests/fuzz/python/targets.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.fuzz.python.driver import main

if __name__ == "__main__":
    main("request")
