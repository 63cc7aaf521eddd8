# Sourced by scripts/test.sh and scripts/demo.sh: installs what the machine lacks (a C
# compiler and Python headers for the native core; for tests also make, clang and the Mosquitto
# broker the MQTT tests start), creates the virtual environment and installs edgevlm (with the
# extras named in $1: "test" adds the test tools, the converter and the transformers reference;
# "run" is a plain `pip install .`, the run-time dependencies only, as on a board).
# Each step is announced on stderr ("== ..."), with pip's progress, so stdout stays the
# command's own (`bash scripts/demo.sh --json` prints JSON only).
# Mosquitto is tried in the "run" profile too (without asking for a password); `edgevlm demo`
# works without it through its embedded broker. It is never left running as a system service:
# tests and the demo start their own broker on a free port.
PROFILE="${1:-run}"
PYTHON="${PYTHON:-python3}"
VENV="${EDGEVLM_VENV:-$PWD/.venv}"

note() { echo "== $*" >&2; }

apt_install() {  # apt_install PACKAGE... (root or sudo; apt-get update once)
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  if [ -z "${EDGEVLM_APT_UPDATED:-}" ]; then
    note "apt-get update"
    $sudo apt-get update -qq && EDGEVLM_APT_UPDATED=1
  fi
  note "apt-get install $* (a minute or two)"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

note "checking this machine for a C compiler, Python headers and mosquitto"
need=()
command -v cc >/dev/null 2>&1 || need+=(gcc libc6-dev)
"$PYTHON" -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
  || need+=(python3-dev)
if [ "$PROFILE" = "test" ]; then
  command -v make >/dev/null 2>&1 || need+=(make)
  command -v clang >/dev/null 2>&1 || need+=(clang)
  command -v openssl >/dev/null 2>&1 || need+=(openssl)  # test certificates (locked-down broker)
  if [ "$(uname -m)" = "x86_64" ]; then  # the NEON kernels are tested under qemu-user
    command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || need+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
    command -v qemu-aarch64 >/dev/null 2>&1 || need+=(qemu-user)
  fi
fi
[ ${#need[@]} -eq 0 ] || apt_install "${need[@]}"

have_mosquitto() { command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ]; }

quiet_mosquitto_service() {  # the package starts a system broker on :1883; we want none
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo -n"
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    $sudo systemctl disable --now mosquitto >/dev/null 2>&1 || true
  elif [ -x /etc/init.d/mosquitto ]; then
    $sudo /etc/init.d/mosquitto stop >/dev/null 2>&1 || true
    command -v update-rc.d >/dev/null 2>&1 && { $sudo update-rc.d mosquitto disable >/dev/null 2>&1 || true; }
  fi
}

if ! have_mosquitto; then
  if [ "$PROFILE" = "test" ]; then
    apt_install mosquitto
    quiet_mosquitto_service
  elif [ "$(id -u)" -eq 0 ] || sudo -n true 2>/dev/null; then
    if apt_install mosquitto; then
      quiet_mosquitto_service
    else
      note "mosquitto could not be installed; edgevlm demo will use its embedded broker"
    fi
  else
    note "no mosquitto (and no root): edgevlm demo will use its embedded broker"
  fi
fi

"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
  echo "edgevlm needs Python 3.11 or newer; $("$PYTHON" --version 2>&1) found" >&2; exit 2; }

if [ ! -x "$VENV/bin/python" ]; then
  note "creating the virtual environment $VENV"
  if ! "$PYTHON" -m venv "$VENV" 2>/dev/null; then
    note "the interpreter has no venv module"
    apt_install python3-venv
    rm -rf "$VENV"; "$PYTHON" -m venv "$VENV"
  fi
  note "upgrading pip"
  "$VENV/bin/python" -m pip install -q --upgrade pip >&2
fi

if [ "$PROFILE" = "test" ]; then
  note "installing edgevlm with the test tools, the converter and the reference (torch, transformers)"
  # torch is pinned to the CPU build this project is tested with; transformers is the
  # float32 reference the tests compare against.
  "$VENV/bin/python" -m pip install -q "torch==2.13.0" >&2
  "$VENV/bin/python" -m pip install -q -e ".[test,convert,reference]" >&2
elif "$VENV/bin/python" -m pip show edgevlm 2>/dev/null | grep -qxF "Editable project location: $PWD"; then
  note "$VENV has the editable development install of this checkout (scripts/test.sh); using it"
else
  note "installing edgevlm and its run-time dependencies: pip install . (builds the native core, about a minute)"
  "$VENV/bin/python" -m pip install --progress-bar on . >&2
fi
note "checking that the native core loads"
"$VENV/bin/python" -c "import edgevlm.engine" || { echo "edgevlm (or its native core) failed to install" >&2; exit 1; }
