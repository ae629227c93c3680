#!/usr/bin/env bash
# Runs every test program given on the command line, counts their "ok" and
# "not ok" lines, and ends with the summary line "N passed, N failed".
# A program that exits non-zero without a "not ok" line counts as a failure.
set -u
passed=0
failed=0
failed_names=()
log_dir=${TEST_LOG_DIR:-.build/test-logs}
mkdir -p "$log_dir"
for test in "$@"; do
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
  passed=$((passed + ok))
  failed=$((failed + bad))
  secs=$(( $(date +%s) - start ))
  if [ "$bad" -gt 0 ]; then
    failed_names+=("$name")
    printf 'FAIL %-32s %4d ok %3d not ok  (%ds, exit %d)\n' "$name" "$ok" "$bad" "$secs" "$status"
    grep -E '^not ok|^ +got|error|Error' "$log" | head -20 | sed 's/^/     /'
  else
    printf 'pass %-32s %4d ok  (%ds)\n' "$name" "$ok" "$secs"
  fi
done
[ ${#failed_names[@]} -gt 0 ] && echo "failed: ${failed_names[*]} (logs in $log_dir)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
