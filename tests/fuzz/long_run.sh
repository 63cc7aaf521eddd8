#!/usr/bin/env bash
# The long fuzz runs of issue 7: every libFuzzer target (C, ASan + UBSan) and every atheris
# target (Python), one after the other at nice 19, each to FUZZ_RUNS executions, then a
# summary table. Exits non-zero when a target crashed, hung (-timeout) or did not run.
#   FUZZ_RUNS         executions per target (default 10000000)
#   FUZZ_MAX_SECONDS  also stop a target after this many seconds (default 0: no limit)
#   FUZZ_TARGETS      which (default: gguf base64 api request vision_tokens config frigate)
#   FUZZ_WORK         where grown corpora, logs and reproducers go (default: a new temp dir;
#                     reuse one to continue from the corpus a previous run grew)
# The committed seed corpora (tests/fuzz/corpus/<c target>/, tests/reliability/corpus/<py
# target>/) are only read. Python targets need atheris: pip install -e '.[fuzz]'.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs="${FUZZ_RUNS:-10000000}"
max_seconds="${FUZZ_MAX_SECONDS:-0}"
targets="${FUZZ_TARGETS:-gguf base64 api request vision_tokens config frigate}"
work="${FUZZ_WORK:-$(mktemp -d -t edgevlm-fuzz-XXXXXX)}"
python="${PYTHON:-.venv/bin/python}"
mkdir -p "$work"

source tests/fuzz/need_clang.sh
make -s -C native fuzz >&2
case " $targets " in
    *" request "*|*" vision_tokens "*|*" config "*|*" frigate "*)
        "$python" -c "import atheris" 2>/dev/null || {
            echo "fuzz: FAILED: atheris is missing; install it: $python -m pip install -e '.[fuzz]'" >&2
            exit 1
        } ;;
esac

# target -> "command args" (the corpus directories come after the scratch one)
c_target() {  # name max_len [dict]
    local dict="${3:+-dict=tests/fuzz/$3}" seeds="tests/fuzz/corpus/$1"
    [ -d "$seeds" ] || seeds=""
    echo "./native/build/fuzz_$1 -max_len=$2 $dict $work/$1/corpus $seeds"
}
command_of() {
    case "$1" in
        gguf) c_target gguf 8192 gguf.dict ;;
        base64) c_target base64 4096 ;;
        api) c_target api 20000 ;;
        request|vision_tokens|config|frigate)
            echo "$python tests/fuzz/python/fuzz_$1.py -max_len=70000 $work/$1/corpus \
tests/reliability/corpus/$1" ;;
        *) echo "fuzz: unknown target $1" >&2; return 1 ;;
    esac
}

rows=()
failed=0
for t in $targets; do
    cmd="$(command_of "$t")"
    mkdir -p "$work/$t/corpus" "$work/$t/artifacts"
    [ "$t" = base64 ] && [ -z "$(ls -A "$work/$t/corpus")" ] && \
        "$python" -c "import base64, os, sys; open(sys.argv[1], 'wb').write(\
base64.b64encode(os.urandom(700)))" "$work/$t/corpus/seed"
    echo "fuzz: $t: $cmd -runs=$runs" >&2
    start=$(date +%s)
    status=0
    # shellcheck disable=SC2086
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 nice -n 19 $cmd -runs="$runs" \
        -max_total_time="$max_seconds" -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$work/$t/artifacts/" >"$work/$t/log" 2>&1 || status=$?
    seconds=$(( $(date +%s) - start ))
    execs=$(grep -oP '^stat::number_of_executed_units:\s*\K\d+' "$work/$t/log" || echo 0)
    rate=$(grep -oP '^stat::average_exec_per_sec:\s*\K\d+' "$work/$t/log" || echo 0)
    crashes=$(find "$work/$t/artifacts" -name 'crash-*' -o -name 'leak-*' -o -name 'oom-*' \
        | wc -l)
    hangs=$(find "$work/$t/artifacts" -name 'timeout-*' | wc -l)
    grown=$(find "$work/$t/corpus" -type f | wc -l)
    result=ok
    if [ "$status" != 0 ] || [ "$crashes" != 0 ] || [ "$hangs" != 0 ] || [ "$execs" = 0 ]; then
        result="FAILED (exit $status; log $work/$t/log)"
        failed=1
        tail -n 40 "$work/$t/log" >&2
    fi
    rows+=("| $t | $execs | $seconds | $rate | $crashes | $hangs | $grown | $result |")
done

echo
echo "Fuzz long run, $(date -u +%Y-%m-%d), FUZZ_RUNS=$runs, work dir $work"
echo
echo "| target | executions | seconds | exec/s | crashes | hangs | corpus grown to | result |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
printf '%s\n' "${rows[@]}"
exit "$failed"
