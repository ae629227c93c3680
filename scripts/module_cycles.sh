#!/usr/bin/env bash
# The call graph of the generator's modules (gen/*.c, ir/*.c: one module per
# file), from the symbols each object file defines and uses; prints every
# cycle tsort finds, one "cycle: a b ..." line each, and exits 1 if there is
# one. Run after `make` (it reads .build/).  Usage: scripts/module_cycles.sh
set -eu
cd "$(dirname "$0")/.."
build=${BUILD:-.build}
objects=$(ls "$build"/gen/*.o "$build"/ir/*.o | grep -vE '/(main|prelude|templates)\.o$')
defs=$(mktemp)
trap 'rm -f "$defs"' EXIT
for o in $objects; do
  nm --defined-only "$o" | awk -v m="$(basename "$o" .o)" '$2 ~ /^[TDBR]$/ {print $3, m}'
done | sort -u >"$defs"
edges=$(for o in $objects; do
  nm -u "$o" | awk -v m="$(basename "$o" .o)" '{print $2, m}'
done | sort -u | join - "$defs" | awk '$2 != $3 {print $2, $3}' | sort -u)
cycles=$(tsort <<<"$edges" 2>&1 >/dev/null | awk '/input contains a loop/ {if (c) print c; c = "cycle:"; next} {c = c " " $2} END {if (c) print c}')
if [ -n "$cycles" ]; then
  echo "$cycles"
  exit 1
fi
echo "no cycle among $(wc -w <<<"$objects") modules ($(wc -l <<<"$edges") call edges)"
