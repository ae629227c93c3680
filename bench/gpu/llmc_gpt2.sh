#!/bin/sh
# bench/gpu/llmc_gpt2.sh — llm.c's training speed on GPT-2 124M, the baseline
# for lynxgen's CUDA target: karpathy/llm.c's train_gpt2cu (bf16, its own
# kernels, no cuDNN), random init (-e d12), sequence 1024, 32768 tokens per
# step (gradient accumulation 32768 / (B * 1024)), lr 6e-4, weight decay 0.1.
#
#   sh bench/gpu/llmc_gpt2.sh TRAIN_GPT2CU 'TRAIN_GLOB' 'VAL_GLOB' B STEPS
#
# The globs go to llm.c unexpanded (quote them); the shards are llm.c's
# (256-int32 header, magic 20240520, version 1, uint16 tokens < 50257).
# No checkpoint (-n 0, no -o), no sampling (-s 0), so no gpt2_tokenizer.bin
# is read for decoding (llm.c only warns that it is missing), no HellaSwag
# (-h 0), and validation only where llm.c always does it, before step 1 and
# after the last, on one batch (-m 1), outside the timed steps. LLMC_ARGS adds
# options (e.g. LLMC_ARGS='-r 0' for no recompute). The log goes to a fresh
# temporary directory (LLMC_LOG_DIR to choose one), printed at the end, then
#   llmc_step_ms <median ms of the steps after the first 3>
#   llmc_tok_s <median tokens/s of the same steps>
# (each step's tokens/s is 32768 over its time in llm.c's step line; llm.c's
# own tok/s column is a moving average, not used).
set -eu

die() { printf 'llmc_gpt2: %s\n' "$*" >&2; exit 1; }
[ $# -eq 5 ] || die "usage: $0 TRAIN_GPT2CU 'TRAIN_GLOB' 'VAL_GLOB' MICRO_BATCH STEPS"
bin=$1 train=$2 val=$3 B=$4 steps=$5
T=1024
total=32768
SKIP=3

case "$B" in '' | *[!0-9]*) die "micro-batch '$B' is not a number" ;; esac
case "$steps" in '' | *[!0-9]*) die "steps '$steps' is not a number" ;; esac
if [ "$B" -eq 0 ] || [ $((total % (B * T))) -ne 0 ]; then
  die "micro-batch $B: B*$T must divide $total (B in 1 2 4 8 16 32)"
fi
[ "$steps" -gt "$SKIP" ] || die "steps $steps: need more than the $SKIP warm-up steps"
[ -x "$bin" ] || die "$bin: not an executable"
for glob in "$train" "$val"; do
  found=
  for f in $glob; do [ -f "$f" ] && found=1 && break; done
  [ -n "$found" ] || die "no file matches $glob"
done

# libcublasLt.so.13 from the CUDA toolkit, else from the nvidia pip wheels next to PyTorch
if ldd "$bin" 2>/dev/null | grep -q 'not found'; then
  libdir=$(python3 -c 'import glob, os, site
for d in site.getsitepackages():
    for f in glob.glob(os.path.join(d, "nvidia", "**", "libcublasLt.so.13"), recursive=True):
        print(os.path.dirname(f)); raise SystemExit' 2>/dev/null || true)
  if [ -n "$libdir" ]; then
    LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export LD_LIBRARY_PATH
  fi
  ! ldd "$bin" 2>/dev/null | grep 'not found' || die "$bin: shared libraries missing (above)"
fi

logdir=${LLMC_LOG_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/llmc_gpt2.XXXXXX")}
mkdir -p "$logdir"
log=$logdir/train_gpt2cu.log
set -- -e d12 -i "$train" -j "$val" -b "$B" -t "$T" -d "$total" -x "$steps" \
  -l 0.0006 -c 0.1 -u 0 -v 1000000 -m 1 -s 0 -h 0 -n 0 -y 0
printf 'llmc_gpt2: %s %s %s\n' "$bin" "$*" "${LLMC_ARGS:-}" >"$log"
linebuf=
if command -v stdbuf >/dev/null; then linebuf="stdbuf -oL"; fi # keep the lines before a crash
rc=0
# shellcheck disable=SC2086 # $linebuf and $LLMC_ARGS are lists of words
$linebuf "$bin" "$@" ${LLMC_ARGS:-} >>"$log" 2>&1 || rc=$?
cat "$log"
[ "$rc" -eq 0 ] || die "train_gpt2cu exited with status $rc (log: $log)"

# llm.c: "step %4d/%d | loss ... | lr %.2e | %.2f ms | %.1f%% bf16 MFU | %.0f tok/s"
awk -v skip="$SKIP" -v tokens="$total" '
  $1 == "step" && $2 ~ /^[0-9]+\/[0-9]+$/ {
    split($2, s, "/")
    for (i = 3; i < NF; i++) if ($(i + 1) == "ms" && s[1] + 0 > skip) printf "%.3f %.3f\n", $i, tokens / ($i / 1000)
  }' "$log" >"$logdir/steps"
n=$(wc -l <"$logdir/steps")
[ "$n" -gt 0 ] || die "no step line after step $SKIP in $log"
median() {
  sort -n | awk '{ v[NR] = $1 } END { printf "%.3f\n", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
printf 'llmc_log %s (%d timed steps)\n' "$log" "$n"
printf 'llmc_step_ms %.2f\n' "$(cut -d' ' -f1 "$logdir/steps" | median)"
printf 'llmc_tok_s %.0f\n' "$(cut -d' ' -f2 "$logdir/steps" | median)"
