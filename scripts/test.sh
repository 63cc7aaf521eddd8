#!/usr/bin/env bash
# Set up everything the tests need on a fresh Debian/Ubuntu machine with Python 3.11+,
# then run the whole suite: ruff, mypy and pytest. Re-running reuses the environment.
#   EDGEVLM_VENV   where the virtual environment lives (default: .venv in the checkout)
#   PYTEST_ARGS    extra pytest arguments
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-env.sh test

echo "== ruff"
"$VENV/bin/ruff" check daemon tests tools bench
echo "== mypy"
"$VENV/bin/mypy"
echo "== pytest"
# shellcheck disable=SC2086
"$VENV/bin/python" -m pytest ${PYTEST_ARGS:-}
