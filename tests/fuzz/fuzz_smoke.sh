#!/usr/bin/env bash
# A short fuzzing run of the front end, inside `make test` (tests/fuzz/rules.mk
# builds the fuzzer and passes it in FUZZ_BIN). First every known input —
# the crash regressions, the diagnostic cases and the examples — runs once;
# then the fuzzer mutates them for FUZZ_SMOKE_SECONDS (default 25). Any
# crash, leak, sanitizer report or unlocated error fails the test; the input
# that caused it is left in tests/fuzz/corpus-run/ (see tests/fuzz/README.md).
set -u
cd "$(dirname "$0")/../.."
fuzzer=${FUZZ_BIN:-.build/fuzz/fuzz_frontend}
seconds=${FUZZ_SMOKE_SECONDS:-25}
failures=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

check() {
  local what=$1 log=$2
  shift 2
  if "$@" >"$log" 2>&1; then
    echo "ok - $what"
  else
    echo "not ok - $what"
    grep -E 'ERROR|SUMMARY|fuzz_frontend:|Test unit written|artifact' "$log" | head -20 | sed 's/^/     /'
    tail -20 "$log" | sed 's/^/     /'
    failures=$((failures + 1))
  fi
}

if [ ! -x "$fuzzer" ]; then
  echo "not ok - fuzzer built ($fuzzer is missing; run make $fuzzer)"
  exit 1
fi
echo "ok - fuzzer built ($fuzzer)"

mkdir -p tests/fuzz/corpus-run
known=(tests/fuzz/regressions/* tests/diag/*.model examples/*.model)
check "every known input (${#known[@]} files: regressions, diagnostics, examples) runs clean" "$tmp/known.log" \
  "$fuzzer" -artifact_prefix=tests/fuzz/corpus-run/ "${known[@]}"

# The run's own corpus is thrown away; the seeds stay as they are.
mkdir "$tmp/corpus"
check "fuzzing the front end for ${seconds} s: no crash, leak or unlocated error" "$tmp/fuzz.log" \
  "$fuzzer" -max_total_time="$seconds" -timeout=20 -dict=tests/fuzz/model.dict -print_final_stats=1 \
  -artifact_prefix=tests/fuzz/corpus-run/ "$tmp/corpus" tests/fuzz/regressions tests/diag examples
grep -m1 -E '^stat::number_of_executed_units' "$tmp/fuzz.log" | sed 's/^/# /'
[ "$failures" -eq 0 ]
