#!/usr/bin/env bash
# The long reliability run (docs/RELIABILITY.md): the soak at 1x, 1.5x and 2x capacity for
# 10 minutes each with faults, broker outages of 3 s, 30 s and 5 min, and the rest of
# tests/reliability in their long versions (EDGEVLM_LONG=1), then the long fuzz runs if present.
# Takes about an hour on a 2-core board; run it on an otherwise idle machine.
#   EDGEVLM_VENV               where the virtual environment lives (default: .venv)
#   EDGEVLM_RELIABILITY_OUT    where the numbers go (default: build/reliability)
set -uo pipefail
cd "$(dirname "$0")/.."
VENV="${EDGEVLM_VENV:-.venv}"
export EDGEVLM_LONG=1
export EDGEVLM_RELIABILITY_OUT="${EDGEVLM_RELIABILITY_OUT:-build/reliability}"
mkdir -p "$EDGEVLM_RELIABILITY_OUT"
status=0

echo "== pytest tests/reliability (long)"
"$VENV/bin/python" -m pytest tests/reliability -v -rA --durations=0 -p no:cacheprovider \
    2>&1 | tee "$EDGEVLM_RELIABILITY_OUT/pytest-long.log" || status=1

if [ -f tests/fuzz/long_run.sh ]; then
    echo "== tests/fuzz/long_run.sh"
    bash tests/fuzz/long_run.sh || status=1
fi

echo
echo "== numbers"
echo "pytest log and JSON reports (soak-long.json, outage-*s-long.json, ...):"
ls -l "$EDGEVLM_RELIABILITY_OUT"
[ -f tests/fuzz/long_run.sh ] && echo "fuzz: see the output of tests/fuzz/long_run.sh above"
exit "$status"
