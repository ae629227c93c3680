#!/usr/bin/env bash
# The generator's modules call each other without a cycle (issue 14):
# scripts/module_cycles.sh builds the call graph of gen/ and ir/ from the
# symbols each object file defines and uses, and finds none. The script is
# first shown to find a cycle planted in two objects of its own, and one
# between two phase folders.
set -u
cd "$(dirname "$0")/.."
. tests/tap.sh # $tmp, pass, fail

# expect_cycle NAME ALTERNATIVES: the script, run on the objects planted in
# $tmp, fails and prints the cycle as one of ALTERNATIVES.
expect_cycle() {
  local found status
  found=$(BUILD=$tmp scripts/module_cycles.sh)
  status=$?
  if [ $status = 1 ] && grep -qE "^cycle: ($2)\$" <<<"$found"; then
    pass "$1"
  else
    fail "$1" "exit $status" "$found"
  fi
}

mkdir -p "$tmp/gen" "$tmp/ir"
printf 'int pong(int);\nint ping(int n) { return n ? pong(n - 1) : 0; }\n' >"$tmp/ping.c"
printf 'int ping(int);\nint pong(int n) { return n ? ping(n - 1) : 1; }\n' >"$tmp/pong.c"
printf 'int leaf(void) { return 0; }\n' >"$tmp/leaf.c"
cc -c -o "$tmp/gen/ping.o" "$tmp/ping.c" && cc -c -o "$tmp/gen/pong.o" "$tmp/pong.c" &&
  cc -c -o "$tmp/ir/leaf.o" "$tmp/leaf.c"
expect_cycle "module_cycles.sh finds a planted cycle (ping <-> pong)" "ping pong|pong ping"

# Phases: emit/a calls planning/b, and planning/c calls emit/d; no two
# modules call each other, but the two phases do.
rm "$tmp"/gen/*.o
mkdir -p "$tmp/gen/emit" "$tmp/gen/planning"
printf 'int b(void);\nint a(void) { return b(); }\n' >"$tmp/a.c"
printf 'int b(void) { return 1; }\n' >"$tmp/b.c"
printf 'int d(void);\nint c(void) { return d(); }\n' >"$tmp/c.c"
printf 'int d(void) { return 2; }\n' >"$tmp/d.c"
cc -c -o "$tmp/gen/emit/a.o" "$tmp/a.c" && cc -c -o "$tmp/gen/planning/b.o" "$tmp/b.c" &&
  cc -c -o "$tmp/gen/planning/c.o" "$tmp/c.c" && cc -c -o "$tmp/gen/emit/d.o" "$tmp/d.c"
expect_cycle "module_cycles.sh finds a planted cycle between phases (emit <-> planning)" "emit planning|planning emit"

found=$(scripts/module_cycles.sh)
status=$?
if [ $status = 0 ]; then
  pass "gen/ and ir/ have no call cycle: $found"
else
  fail "gen/ and ir/ have no call cycle" "$found"
fi
[ "$failures" -eq 0 ]
