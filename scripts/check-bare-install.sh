#!/usr/bin/env bash
# A stage of the test command: the README's first command on a bare install.
# A fresh virtual environment gets `bash scripts/demo.sh` (which runs `pip install .` with no
# extras), then every command a new user runs first is run in it and checked:
#   edgevlm --help and every subcommand's --help, edgevlm demo --json (six answers, each ok, a
#   summary, exit 0, nothing on stderr), tokens, schema, check-config,
#   and convert (no gguf: one line saying what to install, exit 2).
#   EDGEVLM_BARE_VENV  where the throw-away environment goes (default: build/bare-venv)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
BARE="${EDGEVLM_BARE_VENV:-$ROOT/build/bare-venv}"
start=$SECONDS
fail() { echo "bare install: $*" >&2; exit 1; }

rm -rf "$BARE"
mkdir -p "$(dirname "$BARE")"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

echo "== bare install: bash scripts/demo.sh --json in a fresh venv ($BARE)"
EDGEVLM_VENV="$BARE" bash scripts/demo.sh --json >"$out/demo.json" 2>"$out/demo.err" \
  || { cat "$out/demo.err" >&2; fail "scripts/demo.sh exited $?"; }
PY="$BARE/bin/python"
EDGEVLM="$BARE/bin/edgevlm"

"$PY" - "$out/demo.json" <<'PY'
import importlib.util, json, sys
optional = [m for m in ("gguf", "torch", "transformers", "jinja2", "hypothesis", "pytest")
            if importlib.util.find_spec(m) is not None]
if optional:
    sys.exit(f"the bare venv has optional packages installed: {optional}")
lines = [json.loads(line) for line in open(sys.argv[1], encoding="utf-8") if line.strip()]
answers = [r for r in lines if "sample" in r]
if len(answers) != 6 or any(r["status"] != "ok" for r in answers):
    sys.exit(f"edgevlm demo --json: expected six ok answers, got {answers}")
if not lines or "summary" not in lines[-1]:
    sys.exit(f"edgevlm demo --json: the last line is not the summary: {lines[-1:]}")
print(f"bare install: demo ok ({len(answers)} answers; {lines[-1]})")
PY

# Run once more without the setup (whose notes and pip's go to stderr): a good run of the demo
# itself writes nothing to stderr.
"$EDGEVLM" demo --json >"$out/demo2.json" 2>"$out/demo2.err" || fail "edgevlm demo exited $?"
[ ! -s "$out/demo2.err" ] || fail "edgevlm demo wrote to stderr: $(cat "$out/demo2.err")"

cd "$out"  # away from the checkout: only the installed package can be imported
"$EDGEVLM" --help >/dev/null
"$EDGEVLM" --version
for cmd in $("$PY" -c '
from edgevlm.cli import build_parser
subs = [a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction"]
print(" ".join(subs[0].choices))'); do
  "$EDGEVLM" "$cmd" --help >/dev/null || fail "edgevlm $cmd --help exited $?"
done
"$EDGEVLM" tokens --size 1280x720 | "$PY" -c '
import json, sys
got = json.load(sys.stdin)
assert got["tokens"] == 880 and got["grid"] == [1, 44, 80], got' || fail "edgevlm tokens"
"$EDGEVLM" schema | "$PY" -c 'import json, sys; json.load(sys.stdin)' || fail "edgevlm schema"
"$EDGEVLM" check-config "$ROOT/etc/edgevlm.yaml" || fail "edgevlm check-config"
set +e
"$EDGEVLM" convert >"$out/convert.out" 2>"$out/convert.err"
code=$?
set -e
[ "$code" -eq 2 ] || fail "edgevlm convert without gguf exited $code, not 2"
grep -qF "pip install 'edgevlm[convert]'" "$out/convert.err" \
  || fail "edgevlm convert without gguf did not say what to install: $(cat "$out/convert.err")"
[ "$(wc -l <"$out/convert.err")" -eq 1 ] || fail "edgevlm convert: more than one line: $(cat "$out/convert.err")"
echo "bare install: every command checked in $((SECONDS - start)) s"
