#!/usr/bin/env bash
# Every input the fuzzers and the diagnostics keep (tests/fuzz/regressions,
# tests/diag and tests/diag/valid) runs through the whole of lynxgen, -o
# included, in at most 10 s and 2 GB of address space, and ends as lynxgen
# promises: exit 0 (written), 1 (a located error) or 2 (usage); never a
# crash, a hang, an out-of-memory error or an internal error (exit 3).
# One "ok - " or "not ok - " line per input.
set -u
cd "$(dirname "$0")/.."
LYNXGEN=${LYNXGEN:-$PWD/bin/lynxgen}
. tests/tap.sh # $tmp, pass, fail

for model in tests/fuzz/regressions/* tests/diag/*.model tests/diag/valid/*.model; do
  rm -rf "$tmp/out"
  (ulimit -v 2000000 && exec timeout 10 "$LYNXGEN" "$model" --target cpu -o "$tmp/out") >/dev/null 2>"$tmp/err"
  status=$?
  case $status in
    0 | 1 | 2)
      if grep -q "out of memory" "$tmp/err"; then
        fail "$model: within 2 GB" "$(head -3 "$tmp/err")"
      else
        pass "$model: exit $status within 10 s and 2 GB"
      fi
      ;;
    124) fail "$model: within 10 s" "a timeout" ;;
    *) fail "$model: exit 0, 1 or 2" "exit $status" "$(head -3 "$tmp/err")" ;;
  esac
done
[ "$failures" -eq 0 ]
