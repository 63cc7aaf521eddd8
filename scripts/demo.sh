#!/usr/bin/env bash
# Set up edgevlm in a virtual environment and run `edgevlm demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-env.sh run
exec "$VENV/bin/edgevlm" demo "$@"
