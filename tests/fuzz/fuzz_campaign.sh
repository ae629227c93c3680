#!/usr/bin/env bash
# A fuzzing campaign of one fuzzer (make fuzz; tests/fuzz/README.md):
#   tests/fuzz/fuzz_campaign.sh FUZZER SECONDS [RUNS]
# Fuzzes for SECONDS (or until RUNS inputs ran, when RUNS is given), seeded
# with examples/, tests/diag/ and tests/fuzz/regressions/; what it learns
# stays in tests/fuzz/corpus-run/NAME/, so the next campaign resumes from it.
# A failing input is written to tests/fuzz/corpus-run/findings/ (crash-*,
# leak-*, timeout-*, oom-*) and the campaign goes on with the rest of its
# time. Prints the number of inputs executed and the findings; exits 1 when
# there are any.
set -u
cd "$(dirname "$0")/../.."
fuzzer=$1 seconds=$2 runs=${3:-}
name=$(basename "$fuzzer")
corpus=tests/fuzz/corpus-run/$name findings=tests/fuzz/corpus-run/findings
mkdir -p "$corpus" "$findings"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
executed=0 found=() start=$SECONDS
while :; do
  left=$((seconds - (SECONDS - start)))
  budget=(-max_total_time="$left")
  [ -n "$runs" ] && budget=(-runs=$((runs - executed)))
  before=$(ls "$findings" | wc -l)
  "$fuzzer" "${budget[@]}" -timeout=20 -max_len=16384 -dict=tests/fuzz/model.dict -print_final_stats=1 \
    -artifact_prefix="$findings/" "$corpus" examples tests/diag tests/fuzz/regressions >"$log" 2>&1
  status=$?
  n=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  executed=$((executed + ${n:-0}))
  artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
  if [ "$status" -ne 0 ]; then
    grep -m3 -E 'ERROR|SUMMARY|fuzz[a-z_]*:' "$log" | sed 's/^/  /'
    [ -n "$artifact" ] && found+=("$artifact")
  fi
  # Go on after a finding while time (or runs) are left, not after a failure to start.
  [ "$status" -ne 0 ] && [ "$(ls "$findings" | wc -l)" -gt "$before" ] || break
  if [ -n "$runs" ]; then [ "$executed" -lt "$runs" ] || break; else [ "$((seconds - (SECONDS - start)))" -gt 0 ] || break; fi
done
echo "$name: $executed inputs executed in $((SECONDS - start)) s, corpus $(ls "$corpus" | wc -l) files in $corpus"
echo "$name: ${#found[@]} findings${found:+: ${found[*]}}"
[ "${#found[@]}" -eq 0 ]
