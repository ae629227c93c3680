#!/usr/bin/env bash
# The emitted step rolled into loops (the default) against --unrolled-step:
# lines and host-compile time of one stage of a large plan, both measured in
# this run on this machine. `make bench-step` or
#   bench/step_compile_time.sh [MODEL] [STAGE]   (default: examples/gpt-23b.model, stage 1)
# GPT-23B as planned is tp 4 x pp 8 with 512 micro-batches under 1F1B: the
# unrolled stage is three quarters of a million lines and its compile takes
# minutes and gigabytes.
set -eu
cd "$(dirname "$0")/.."
model=${1:-examples/gpt-23b.model}
stage=${2:-1}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
make -s bin/lynxgen
for form in rolled unrolled; do
  flag=""
  [ "$form" = unrolled ] && flag=--unrolled-step
  start=$(date +%s.%N)
  bin/lynxgen "$model" -o "$work/$form" $flag > /dev/null
  generate=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {print b - a}')
  lines=$(wc -l < "$work/$form/stage$stage.cu")
  /usr/bin/time -f "%e %M" -o "$work/$form.time" make -s -C "$work/$form" "stage$stage.o" > /dev/null
  read -r seconds kilobytes < "$work/$form.time"
  printf '%-9s %9d lines  generate %6.1f s  compile stage%s.o %7.1f s  %6.0f MiB peak\n' "$form" "$lines" \
    "$generate" "$stage" "$seconds" "$((kilobytes / 1024))"
  echo "$seconds" > "$work/$form.seconds"
done
awk -v u="$(cat "$work/unrolled.seconds")" -v r="$(cat "$work/rolled.seconds")" \
  'BEGIN {printf "compile time, unrolled / rolled: %.1fx\n", u / r}'
