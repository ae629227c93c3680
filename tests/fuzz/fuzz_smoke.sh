#!/usr/bin/env bash
# A short fuzzing run of both fuzzers, inside `make test` (tests/fuzz/rules.mk
# builds them and passes them in FUZZ_BIN and FUZZ_PLAN_BIN). First every
# known input — the crash regressions, the diagnostic cases and the
# examples — runs once through each, within the campaigns' 20 s an input;
# then each fuzzer mutates them, the front end for FUZZ_SMOKE_SECONDS
# (default 20), the plan pipeline for FUZZ_SMOKE_PLAN_SECONDS (default 25):
# under a minute in all. Any crash, timeout,
# leak, sanitizer report, unlocated error or verifier finding fails the
# test; the input that caused it is left in tests/fuzz/corpus-run/findings/
# (see tests/fuzz/README.md).
set -u
cd "$(dirname "$0")/../.."
frontend=${FUZZ_BIN:-.build/fuzz/fuzz_frontend}
planner=${FUZZ_PLAN_BIN:-.build/fuzz/fuzz_plan}
failures=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
findings=tests/fuzz/corpus-run/findings
mkdir -p "$findings"

check() {
  local what=$1 log=$2
  shift 2
  if "$@" >"$log" 2>&1; then
    echo "ok - $what"
  else
    echo "not ok - $what"
    grep -E 'ERROR|SUMMARY|fuzz[a-z_]*:|Test unit written|artifact' "$log" | head -20 | sed 's/^/     /'
    tail -20 "$log" | sed 's/^/     /'
    failures=$((failures + 1))
  fi
}

known=(tests/fuzz/regressions/* tests/diag/*.model tests/diag/valid/*.model examples/*.model)
fuzz() {
  local fuzzer=$1 seconds=$2 what=$3
  local name
  name=$(basename "$fuzzer")
  if [ ! -x "$fuzzer" ]; then
    echo "not ok - $name built ($fuzzer is missing; run make $fuzzer)"
    failures=$((failures + 1))
    return
  fi
  echo "ok - $name built ($fuzzer)"
  check "$name: every known input (${#known[@]} files: regressions, diagnostics, examples) runs clean" \
    "$tmp/$name-known.log" "$fuzzer" -timeout=20 -artifact_prefix="$findings/" "${known[@]}"
  # The run's own corpus is thrown away; the seeds stay as they are.
  mkdir "$tmp/$name"
  check "$name: fuzzing $what for ${seconds} s finds nothing" "$tmp/$name.log" \
    "$fuzzer" -max_total_time="$seconds" -timeout=20 -max_len=16384 -dict=tests/fuzz/model.dict \
    -print_final_stats=1 -artifact_prefix="$findings/" "$tmp/$name" tests/fuzz/regressions tests/diag examples
  grep -m1 -E '^stat::number_of_executed_units' "$tmp/$name.log" | sed "s/^/# $name /"
}

fuzz "$frontend" "${FUZZ_SMOKE_SECONDS:-20}" "the front end (no crash, leak or unlocated error)"
fuzz "$planner" "${FUZZ_SMOKE_PLAN_SECONDS:-25}" "the plan pipeline (no crash, leak, unlocated error or verifier finding)"
[ "$failures" -eq 0 ]
