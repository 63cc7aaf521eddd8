#!/usr/bin/env bash
# A short libFuzzer run of the GGUF reader for CI (about 20 s of fuzzing), from the seed corpus.
# Exits non-zero on a crash, a sanitizer report or a leak; never skips: without clang it
# installs it with apt-get, and fails loudly when that is impossible.
#   FUZZ_SECONDS   fuzzing time (default 20)
# The harness is built like `make -C native fuzz` (same flags), but from the reader's own
# sources only, so work in progress elsewhere in the core cannot break this check.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds="${FUZZ_SECONDS:-20}"

if ! command -v clang >/dev/null 2>&1; then
    echo "fuzz: clang not found, installing it with apt-get" >&2
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "fuzz: FAILED: clang is missing and cannot be installed (need root and apt-get)" >&2
        exit 1
    fi
    apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q clang >&2
fi

mkdir -p native/build
clang -std=c11 -O1 -g -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
    -Inative/include -Inative/src -o native/build/fuzz_gguf tests/fuzz/fuzz_gguf.c \
    native/src/gguf.c native/src/gguf_get.c native/src/api_meta.c -lm -pthread

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# New inputs go to the scratch directory; the committed seed corpus is only read.
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    ./native/build/fuzz_gguf -max_total_time="$seconds" -max_len=8192 \
    -dict=tests/fuzz/gguf.dict -artifact_prefix="$work/" -print_final_stats=1 \
    "$work" tests/fuzz/corpus/gguf 2>"$work/log" || {
    status=$?
    tail -n 60 "$work/log" >&2
    mkdir -p native/build/fuzz_artifacts && cp "$work"/crash-* "$work"/leak-* \
        "$work"/timeout-* "$work"/oom-* native/build/fuzz_artifacts/ 2>/dev/null || true
    echo "fuzz: FAILED (exit $status); reproducers in native/build/fuzz_artifacts/" >&2
    exit 1
}
grep -E "^stat::(number_of_executed_units|average_exec_per_sec)" "$work/log"
echo "fuzz: 1 passed, 0 failed"
