#!/usr/bin/env bash
# Runs every test program given on the command line, counts their "ok" and
# "not ok" lines, and ends with the summary line "N passed, N failed".
# A program that exits non-zero without a "not ok" line counts as a failure.
#
# TEST_JOBS programs run at once (default: one per core). Most test programs
# use one core most of the time (generating, compiling and running small
# programs one after another), so two side by side halve the suite's time on
# two cores. Each program has its own temporary folders and log; a result
# line is printed as each ends, in the order they end.
set -u
jobs=${TEST_JOBS:-$(nproc)}
log_dir=${TEST_LOG_DIR:-.build/test-logs}
mkdir -p "$log_dir"
rm -f "$log_dir"/*.result

# One program: its log, its counts ("ok not-ok") in NAME.result, its line.
run_test() {
  local test=$1 name log start status ok bad secs line
  name=$(basename "$test")
  log="$log_dir/$name.log"
  start=$(date +%s)
  case "$test" in
    *.py) python3 "$test" >"$log" 2>&1 ;;
    *.sh) bash "$test" >"$log" 2>&1 ;;
    *) "$test" >"$log" 2>&1 ;;
  esac
  status=$?
  ok=$(grep -c '^ok - ' "$log")
  bad=$(grep -c '^not ok - ' "$log")
  if [ "$status" -ne 0 ] && [ "$bad" -eq 0 ]; then bad=1; fi
  secs=$(($(date +%s) - start))
  if [ "$bad" -gt 0 ]; then
    line=$(printf 'FAIL %-32s %4d ok %3d not ok  (%ds, exit %d)\n' "$name" "$ok" "$bad" "$secs" "$status"
      grep -E '^not ok|^ +got|error|Error' "$log" | head -20 | sed 's/^/     /')
  else
    line=$(printf 'pass %-32s %4d ok  (%ds)' "$name" "$ok" "$secs")
  fi
  echo "$ok $bad" >"$log_dir/$name.result"
  printf '%s\n' "$line" # one write, so that lines of programs ending together do not mix
}

running=0
for test in "$@"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n
    running=$((running - 1))
  fi
  run_test "$test" &
  running=$((running + 1))
done
wait

passed=0
failed=0
failed_names=()
for test in "$@"; do
  name=$(basename "$test")
  ok=0 bad=1 # a program whose result is missing failed
  [ -f "$log_dir/$name.result" ] && read -r ok bad <"$log_dir/$name.result"
  passed=$((passed + ok))
  failed=$((failed + bad))
  [ "$bad" -gt 0 ] && failed_names+=("$name")
done
[ ${#failed_names[@]} -gt 0 ] && echo "failed: ${failed_names[*]} (logs in $log_dir)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
