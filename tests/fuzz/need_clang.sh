# Sourced by the fuzz scripts: makes sure clang (with libFuzzer) is there, installing it with
# apt-get when missing; fails loudly when that is impossible. Never skips.
if ! command -v clang >/dev/null 2>&1; then
    echo "fuzz: clang not found, installing it with apt-get" >&2
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "fuzz: FAILED: clang is missing and cannot be installed (need root and apt-get)" >&2
        exit 1
    fi
    apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q clang >&2
fi
