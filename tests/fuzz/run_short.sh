#!/usr/bin/env bash
# Short libFuzzer runs for CI (FUZZ_SECONDS each, default 20) from the seed corpora: the GGUF
# reader (fuzz_gguf) and the C entry points Python calls (fuzz_api). The seed corpus runs
# first, so every committed reproducer is re-checked. Exits non-zero on a crash, a sanitizer
# report, a leak or a hang; never skips: without clang it installs it with apt-get, and fails
# loudly when that is impossible.
# fuzz_gguf is built like `make -C native fuzz` (same flags and sources: the reader, the
# loader's tensor check, the type table, the quantisers and the scalar kernels, not the SIMD
# sets or the models), so work in progress elsewhere in the core cannot break that check;
# fuzz_api needs the whole core and is built by make.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds="${FUZZ_SECONDS:-20}"
source tests/fuzz/need_clang.sh

mkdir -p native/build
clang -std=c11 -O1 -g -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
    -Inative/include -Inative/src -o native/build/fuzz_gguf tests/fuzz/fuzz_gguf.c \
    native/src/gguf.c native/src/gguf_get.c native/src/api_meta.c native/src/loader.c \
    native/src/types.c native/src/quants_fit.c native/src/quants_legacy.c native/src/quants_k.c \
    native/src/quants_iq4.c native/src/kernels.c native/src/kernels_scalar.c \
    native/src/kernels_scalar_k.c native/src/threadpool.c -lm -pthread
make -s -C native build/fuzz_api

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
passed=0
for target in gguf api; do
    dict=""
    [ "$target" = gguf ] && dict="-dict=tests/fuzz/gguf.dict"
    max_len=8192
    [ "$target" = api ] && max_len=20000
    mkdir -p "$work/$target"
    # New inputs go to the scratch directory; the committed seed corpus is only read.
    # shellcheck disable=SC2086
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        ./native/build/fuzz_$target -max_total_time="$seconds" -max_len=$max_len -timeout=10 \
        $dict -artifact_prefix="$work/" -print_final_stats=1 \
        "$work/$target" "tests/fuzz/corpus/$target" 2>"$work/$target.log" || {
        status=$?
        tail -n 60 "$work/$target.log" >&2
        mkdir -p native/build/fuzz_artifacts && cp "$work"/crash-* "$work"/leak-* \
            "$work"/timeout-* "$work"/oom-* native/build/fuzz_artifacts/ 2>/dev/null || true
        echo "fuzz: $target FAILED (exit $status); reproducers in native/build/fuzz_artifacts/" >&2
        exit 1
    }
    echo "fuzz_$target:"
    grep -E "^stat::(number_of_executed_units|average_exec_per_sec)" "$work/$target.log"
    passed=$((passed + 1))
done
echo "fuzz: $passed passed, 0 failed"
