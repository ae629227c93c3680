#!/usr/bin/env bash
# The plan search's time where the model file leaves every parallel field
# open (tp, pp, dp, the micro-batch, the schedule; no --policy, so the
# recompute policy too): GPT-3 175B on 128 and 1024 A100s, and GPT-20B and
# Llama 3 8B on their example clusters. For each: the candidates, how many
# were planned and how many skipped, wall seconds, peak memory, and the plan
# chosen. `make bench-search` or
#   bench/plan_search.sh [BASELINE_LYNXGEN]
# With a baseline (another build of lynxgen), each model runs under both in
# this run, one after the other, and the line ends with the time ratio and
# whether both chose the same plan (search times masked).
set -eu
cd "$(dirname "$0")/.."
baseline=${1:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
make -s bin/lynxgen

# A copy of model $1 as $2 with its parallel block reduced to the global batch $3 (and nodes $4).
open_plan() {
  sed -e '/^static const struct lx_parallel parallel = {/,/^};/c\static const struct lx_parallel parallel = {\n    .global_batch = '"$3"',\n};' \
    -e "s/^    \.nodes = [0-9]*,/    .nodes = $4,/" "$1" > "$work/$2.model"
}
open_plan bench/models/gpt3-175b-open.model gpt3-175b-128gpus 1536 16
open_plan bench/models/gpt3-175b-open.model gpt3-175b-1024gpus 1536 128
open_plan examples/gpt-20b.model gpt-20b-32gpus 512 4
open_plan examples/llama3-8b.model llama3-8b-8gpus 64 1

# Runs binary $1 on model $2: "seconds peak_MiB" into $3.time, --plan --explain into $3.out
# (--explain adds the longest-sequence table's fits-only tries at the chosen layout).
search() {
  /usr/bin/time -q -f "%e %M" -o "$3.time" "$1" "$2" --plan --explain > "$3.out" 2>&1 || true
}

# The plan as --plan reports it (after --explain's tables), its search times masked.
plan_report() {
  sed -n '/^lynxgen plan for/,$p' "$1" | sed -E 's/search [0-9.]+ ms/search X ms/g'
}

for model in "$work"/*.model; do
  name=$(basename "$model" .model)
  search bin/lynxgen "$model" "$work/$name.new"
  read -r seconds kilobytes < "$work/$name.new.time"
  gpus=$(grep -o 'candidates for [0-9]* GPUs' "$work/$name.new.out" | grep -o '[0-9]*' | head -1)
  counts=$(sed -nE 's/^ *([0-9]+) planned and simulated; ([0-9]+) could not be faster .* ([0-9]+) could not fit .*/'`
    `'\1 planned, \2 slower, \3 too large/p' "$work/$name.new.out")
  chosen=$(grep -m1 '^plan  *tp ' "$work/$name.new.out" | sed -E 's/^plan +//; s/ per iteration//')
  [ -n "$chosen" ] || chosen="none: $(grep -m1 'error' "$work/$name.new.out" | cut -c1-100)"
  printf '%-19s %4s GPUs  %-38s %6.1f s %5d MiB  %s\n' "$name" "$gpus" "$counts" "$seconds" \
    "$((kilobytes / 1024))" "$chosen"
  if [ -n "$baseline" ]; then
    search "$baseline" "$model" "$work/$name.old"
    read -r old_seconds _ < "$work/$name.old.time"
    same="different plan"
    cmp -s <(plan_report "$work/$name.new.out") <(plan_report "$work/$name.old.out") && same="same plan"
    grep -q '^lynxgen plan for' "$work/$name.old.out" ||
      same="the baseline chose none ($(grep -m1 -o 'error: .\{0,80\}' "$work/$name.old.out"))"
    awk -v n="$seconds" -v o="$old_seconds" -v s="$same" -v name="$name" \
      'BEGIN {printf "%-19s baseline %6.1f s, this build / baseline %.3fx, %s\n", name, o, n / o, s}'
  fi
done
