# Sourced by scripts/test.sh and scripts/demo.sh: creates the virtual environment and installs
# edgevlm (with the extras named in $1: "test" adds the test tools and the transformers
# reference). Installs python3-venv with apt when the interpreter lacks it.
PROFILE="${1:-run}"
PYTHON="${PYTHON:-python3}"
VENV="${EDGEVLM_VENV:-$PWD/.venv}"

"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
  echo "edgevlm needs Python 3.11 or newer; $("$PYTHON" --version 2>&1) found" >&2; exit 2; }

if [ ! -x "$VENV/bin/python" ]; then
  if ! "$PYTHON" -m venv "$VENV" 2>/dev/null; then
    echo "== installing python3-venv (the interpreter has no venv module)"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq python3-venv python3-dev gcc >/dev/null
    rm -rf "$VENV"; "$PYTHON" -m venv "$VENV"
  fi
  "$VENV/bin/python" -m pip install -q --upgrade pip
fi

echo "== installing edgevlm ($PROFILE)"
if [ "$PROFILE" = "test" ]; then
  # torch is pinned to the CPU build this project is tested with; transformers is the
  # float32 reference the tests compare against.
  "$VENV/bin/python" -m pip install -q "torch==2.13.0"
  "$VENV/bin/python" -m pip install -q -e ".[test,reference]"
else
  "$VENV/bin/python" -m pip install -q -e .
fi
"$VENV/bin/python" -c "import edgevlm" || { echo "edgevlm failed to install" >&2; exit 1; }
