#!/usr/bin/env bash
# The two halves of a lent GPU's run (tests/cuda/gpu_kit.py, bench/gpu/kit.sh)
# hand over what they should, checked on the CPU halves alone (LX_CPU_ONLY=1):
#   - LX_KIT_PHASE=prepare generates, builds and trains the CPU programs of
#     cuda_training_test.py into LX_KIT_DIR, every check passing;
#   - LX_KIT_PHASE=device, with the stage programs deleted as kit.sh deletes
#     them, passes the same checks from the metrics alone (it runs nothing:
#     a program it ran would be missing) and makes no new files;
#   - the device half refuses a folder that was never prepared, and the
#     prepare half one that already was.
set -u
cd "$(dirname "$0")/.."
. tests/tap.sh # $tmp, pass, fail

kit=$tmp/kit
test_kit() { env LX_CPU_ONLY=1 LX_KIT_PHASE="$1" LX_KIT_DIR="$kit" python3 tests/cuda/cuda_training_test.py; }

if test_kit prepare >"$tmp/prepare.log" 2>&1 && ! grep -q '^not ok' "$tmp/prepare.log"; then
  pass "prepare: $(grep -c '^ok' "$tmp/prepare.log") checks pass, the CPU programs built and trained"
else
  fail "prepare" "$(tail -n 5 "$tmp/prepare.log")"
fi
programs=$(find "$kit" -name 'stage[0-9]*' -type f ! -name '*.*' | wc -l)
find "$kit" -name 'stage[0-9]*' -type f ! -name '*.*' -delete
find "$kit" -type f | sort >"$tmp/before"
if test_kit device >"$tmp/device.log" 2>&1 && ! grep -q '^not ok' "$tmp/device.log"; then
  pass "device: $(grep -c '^ok' "$tmp/device.log") checks pass from the metrics of $programs deleted stage programs"
else
  fail "device, without the stage programs" "$(grep '^not ok' "$tmp/device.log" | head -n 3)"
fi
find "$kit" -type f | sort >"$tmp/after"
cmp -s "$tmp/before" "$tmp/after" && pass "device: no file made in the kit" ||
  fail "device: no file made in the kit" "$(comm -13 "$tmp/before" "$tmp/after" | head -n 3)"

if test_kit prepare >"$tmp/again.log" 2>&1; then
  fail "prepare refuses a kit folder that exists" "exit 0"
else
  pass "prepare refuses a kit folder that exists"
fi
kit=$tmp/empty
mkdir -p "$kit"
if test_kit device >"$tmp/empty.log" 2>&1; then
  fail "device refuses a kit that was never prepared" "exit 0"
elif grep -q 'not prepared' "$tmp/empty.log"; then
  pass "device refuses a kit that was never prepared: $(tail -n 1 "$tmp/empty.log")"
else
  fail "device names the missing preparation" "$(tail -n 1 "$tmp/empty.log")"
fi
exit $((failures > 0))
