#!/usr/bin/env bash
# Set up everything the tests need on a fresh Debian/Ubuntu machine with Python 3.11+,
# then run the whole suite: ruff, mypy, the bare-install stage (the README's first command,
# `bash scripts/demo.sh`, in a fresh venv with no extras; scripts/check-bare-install.sh) and
# pytest. Re-running reuses the environment.
#   EDGEVLM_VENV   where the virtual environment lives (default: .venv in the checkout)
#   PYTEST_ARGS    extra pytest arguments
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-env.sh test

echo "== ruff"
"$VENV/bin/ruff" check daemon tests tools bench
echo "== mypy"
"$VENV/bin/mypy"
echo "== bare install"
bash scripts/check-bare-install.sh
echo "== pytest"
# shellcheck disable=SC2086
"$VENV/bin/python" -m pytest ${PYTEST_ARGS:-}
