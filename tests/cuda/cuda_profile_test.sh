#!/usr/bin/env bash
# The profile files the CUDA programs write (--profile FILE, lx_cuda_main.h)
# are what `lynxgen --profile` reads (docs/cost-model.md). No GPU needed:
#   - a file an emitted program wrote on an H100 (tests/cuda/profiles) parses,
#     and every op of the plan it was measured for takes its time from it;
#   - the profile table of an emitted stage (prof_ops) written as the program
#     writes it, with made-up times, parses and moves the plan's time by
#     exactly those times, for a model with flash attention too (llama).
set -u
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
ok() { echo "ok - $*"; }
not_ok() { echo "not ok - $*"; failures=$((failures + 1)); }
iteration() { sed -n 's/^iteration *\([0-9.]*\) ms.*/\1/p'; }

measured=tests/cuda/profiles/h100-gpt13b-pp1.profile
args=(examples/gpt13b.model --tp 1 --dp 1 --pp 1 --global-batch 32 --plan)
if bin/lynxgen "${args[@]}" --profile "$measured" > "$work/plan" 2> "$work/err"; then
  # the program's own step time: 26.2 s; the plan from its per-op times must land within 1 %
  t=$(iteration < "$work/plan")
  if awk -v t="$t" 'BEGIN { exit !(t > 25940 && t < 26460) }'; then
    ok "$measured parses; the plan from it predicts $t ms per step (measured 26166 to 26206 ms)"
  else
    not_ok "$measured: the plan predicts '$t' ms per step, measured 26166 to 26206"
  fi
else
  not_ok "lynxgen does not read $measured"
  sed 's/^/     /' "$work/err"
fi

# prof_ops of stage 0, as profile_write prints a line: "op KEY FWD BWDATTRS  # WHAT"
for model in tiny llama; do
  bin/lynxgen "examples/$model.model" --tp 1 --dp 1 --pp 1 --global-batch 8 --allow-oom-plan -o "$work/$model" \
    > /dev/null 2>&1 ||
    { not_ok "lynxgen $model"; continue; }
  sed -n 's/^ *{"\([^"]*\)", "\([^"]*\)", "\([^"]*\)"},$/op \1 1.0 2.0\2  # \3/p' "$work/$model/stage0.cu" > "$work/$model.profile"
  lines=$(wc -l < "$work/$model.profile")
  base=$(bin/lynxgen "examples/$model.model" --tp 1 --dp 1 --pp 1 --global-batch 8 --allow-oom-plan --plan | iteration)
  with=$(bin/lynxgen "examples/$model.model" --tp 1 --dp 1 --pp 1 --global-batch 8 --allow-oom-plan --plan --profile "$work/$model.profile" 2> "$work/err" | iteration)
  if [ "$lines" -gt 0 ] && [ -n "$with" ] && [ "$with" != "$base" ] && grep -q " 1.0 2.0 seq=" "$work/$model.profile"; then
    ok "$model: the $lines op lines of the emitted profile table parse and set the plan's times ($base -> $with ms)"
  else
    not_ok "$model: emitted profile table ($lines lines) gives '$with' ms against '$base' ms"
    sed 's/^/     /' "$work/err" | head -5
  fi
done
exit $((failures > 0))
