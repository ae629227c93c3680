#!/usr/bin/env bash
# The call graph of the generator's modules (gen/PHASE/*.c, ir/*.c: one module
# per file), from the symbols each object file defines and uses, and the same
# graph folded onto the phase folders (ir, frontend, analysis, planning,
# verify, emit, report). Prints every cycle tsort finds in either, one
# "cycle: a b ..." line each, and exits 1 if there is one. Run after `make`
# (it reads .build/).  Usage: scripts/module_cycles.sh
set -eu
cd "$(dirname "$0")/.."
build=${BUILD:-.build}
objects=$(find "$build/gen" "$build/ir" -name '*.o' | grep -vE '/(main|prelude|templates)\.o$' | sort)
defs=$(mktemp)
trap 'rm -f "$defs"' EXIT
# A module is named phase/file: the folder below gen/ (or ir) and the file.
module_of() {
  local rel=${1#"$build"/}
  rel=${rel#gen/}
  echo "${rel%.o}"
}
for o in $objects; do
  nm --defined-only "$o" | awk -v m="$(module_of "$o")" '$2 ~ /^[TDBR]$/ {print $3, m}'
done | sort -u >"$defs"
edges=$(for o in $objects; do
  nm -u "$o" | awk -v m="$(module_of "$o")" '{print $2, m}'
done | sort -u | join - "$defs" | awk '$2 != $3 {print $2, $3}' | sort -u)
# phase of a module: its folder (a file directly in gen/ is its own phase)
phase_edges=$(awk '{a = $1; b = $2; sub(/\/[^\/]*$/, "", a); sub(/\/[^\/]*$/, "", b); if (a != b) print a, b}' \
  <<<"$edges" | sort -u)
cycles_of() {
  tsort <<<"$1" 2>&1 >/dev/null |
    awk '/input contains a loop/ {if (c) print c; c = "cycle:"; next} {c = c " " $2} END {if (c) print c}'
}
cycles=$(cycles_of "$edges"; cycles_of "$phase_edges")
if [ -n "$cycles" ]; then
  echo "$cycles"
  exit 1
fi
echo "no cycle among $(wc -w <<<"$objects") modules ($(wc -l <<<"$edges") call edges)" \
  "nor among their phases ($(tsort <<<"$phase_edges" | tac | tr '\n' ' ' | sed 's/ $//'): each calls only those before it)"
