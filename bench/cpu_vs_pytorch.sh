#!/bin/sh
# bench/cpu_vs_pytorch.sh — training tokens/s of lynxgen's CPU target beside
# PyTorch on the same machine, in the same run, for GPT-2 124M at B=4, T=64,
# pp=1, 2 threads; and what OpenBLAS reaches on the step's own matmul shapes.
#
#   sh bench/cpu_vs_pytorch.sh            (from anywhere; see bench/README.md)
#
# Environment (defaults): STEPS=8 optimizer steps per framework, SKIP=2 first
# steps left out of the average, THREADS=2 (OMP_NUM_THREADS and
# OPENBLAS_NUM_THREADS for both programs, torch.set_num_threads for PyTorch),
# VOCAB=50304 (GPT-2's 50257 padded to 64 as nanoGPT does; VOCAB=50257 is the
# unpadded table), REPS=5 timed calls per sgemm shape, PASSIVE=1 to add a
# second lynxgen run with OMP_WAIT_POLICY=PASSIVE, LYNXGEN=path of lynxgen
# (default bin/lynxgen of this checkout), KEEP=1 to keep the work directory.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
STEPS=${STEPS:-8}
SKIP=${SKIP:-2}
THREADS=${THREADS:-2}
VOCAB=${VOCAB:-50304}
REPS=${REPS:-5}
PASSIVE=${PASSIVE:-0}
LYNXGEN=${LYNXGEN:-$repo/bin/lynxgen}
B=4
T=64
PY=/usr/bin/python3 # Debian's torch imports only here, not under a pyenv python3

say() { printf '%s\n' "$*" >&2; }
die() { say "cpu_vs_pytorch: $*"; exit 1; }
[ "$STEPS" -gt "$SKIP" ] || die "STEPS ($STEPS) must exceed SKIP ($SKIP)"

# ---- dependencies ----------------------------------------------------------------
if ! "$PY" -c 'import torch' 2>/dev/null; then
  say "installing python3-torch (Debian's; about 650 MB) ..."
  sudo=
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get install -y python3-torch >&2 || { $sudo apt-get update >&2 && $sudo apt-get install -y python3-torch >&2; }
  "$PY" -c 'import torch' || die "torch still does not import under $PY"
fi
[ -x "$LYNXGEN" ] || make -C "$repo" >&2 || die "cannot build lynxgen"

work=$(mktemp -d "${TMPDIR:-/tmp}/lynx-bench.XXXXXX")
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT INT TERM

# ---- 1. the lynxgen CPU program ---------------------------------------------------
# examples/gpt2-124m.model's shape (12 layers, hidden 768, 12 heads, tied
# embeddings) at sequence 64, fp32, no dropout, one stage, one micro-batch of 4.
cat > "$work/gpt2-bench.model" <<EOF
/* GPT-2 124M for bench/cpu_vs_pytorch.sh: B=4, T=64, fp32, dropout 0, pp 1. */
#include <lynx.h>

#define VOCAB $VOCAB
#define SEQ $T
#define LAYERS 12
#define HIDDEN 768
#define HEADS 12

static const struct lx_model model = {
    .vocab = VOCAB, .seq_len = SEQ, .layers = LAYERS, .hidden = HIDDEN, .heads = HEADS,
    .dropout = 0, .tied_embeddings = 1,
};

static const struct lx_cluster cluster = {
    .gpu = GPU_A100_80GB, .nodes = 1, .gpus_per_node = 1,
    .intra_node_link = LINK_NVLINK3, .inter_node_link = LINK_IB_HDR,
};

static const struct lx_parallel parallel = {
    .tp = 1, .pp = 1, .dp = 1, .micro_batch = $B, .global_batch = $B, .schedule = SCHEDULE_1F1B,
};

static const struct lx_training training = {
    .steps = $STEPS, .lr = 6e-4, .min_lr = 6e-5, .warmup_steps = 2, .lr_schedule = LR_COSINE,
    .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .grad_clip = 1.0, .seed = 1234,
    .dtype = DTYPE_FP32, .train_data = "data/train_*.bin", .val_data = "data/val_*.bin",
    .val_interval = 0, .checkpoint_interval = 0,
};

tensor prologue(tensor tokens) {
  tensor x = embedding(tokens, VOCAB, HIDDEN);
  x = add(x, position_embedding(tokens, HIDDEN));
  return dropout(x);
}

tensor block(tensor x) {
  tensor h = layernorm(x);
  tensor qkv = linear(h, 3 * HIDDEN);
  tensor a = attention(qkv, HEADS, HEADS);
  a = dropout(linear(a, HIDDEN));
  x = add(x, a);
  h = layernorm(x);
  h = gelu(linear(h, 4 * HIDDEN));
  h = dropout(linear(h, HIDDEN));
  return add(x, h);
}

tensor epilogue(tensor x, tensor targets) {
  tensor logits = lm_head(layernorm(x), VOCAB);
  return cross_entropy(logits, targets);
}
EOF
say "generating and building the lynxgen CPU program in $work/prog ..."
"$LYNXGEN" "$work/gpt2-bench.model" -o "$work/prog" --target cpu >&2
# WERROR= : warnings stay warnings (a one-stage program has had an unused
# variable); the flags are otherwise the generated Makefile's own.
make -C "$work/prog" WERROR= >"$work/build.log" 2>&1 || { cat "$work/build.log" >&2; die "build failed"; }

# Synthetic tokens (uniform < VOCAB) in llm.c's shard format, enough windows
# that no batch repeats within the run.
mkdir -p "$work/data"
"$PY" "$here/make_shard.py" "$work/data/train_00.bin" $(( (STEPS + 1) * B * T + 1 )) "$VOCAB" 1

gcc -O2 -std=c11 -o "$work/sgemm_peak" "$here/sgemm_peak.c" -lopenblas || die "cannot build sgemm_peak"

loads=""
load() { loads="$loads $(cut -d' ' -f1 /proc/loadavg)"; }

# Steady-state tokens/s of a metrics.jsonl: all tokens over all time of the
# steps after the first SKIP.
steady() {
  "$PY" - "$1" "$SKIP" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if r["step"] > int(sys.argv[2])]
ms = sum(r["ms"] for r in rows)
tokens = sum(r["tokens_per_s"] * r["ms"] / 1e3 for r in rows)
print("%.2f %.1f" % (tokens / (ms / 1e3), ms / len(rows)))
EOF
}

run_lynx() { # $1: metrics file; environment passed through
  OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS \
    "$work/prog/run.sh" --steps "$STEPS" --data "$work/data/train_*.bin" --metrics "$1" >&2 \
    || die "the lynxgen program failed"
}

load
say "== lynxgen CPU program: $STEPS steps, OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=$THREADS (load $(cut -d' ' -f1-3 /proc/loadavg))"
run_lynx "$work/metrics.jsonl"
set -- $(steady "$work/metrics.jsonl")
lynx_tps=$1 lynx_ms=$2
load

lynx_passive_tps= lynx_passive_ms=
if [ "$PASSIVE" = 1 ]; then
  say "== lynxgen CPU program again with OMP_WAIT_POLICY=PASSIVE (load $(cut -d' ' -f1-3 /proc/loadavg))"
  OMP_WAIT_POLICY=PASSIVE run_lynx "$work/metrics-passive.jsonl"
  set -- $(steady "$work/metrics-passive.jsonl")
  lynx_passive_tps=$1 lynx_passive_ms=$2
  load
fi

# ---- 2. PyTorch, nanoGPT-style, same batch and data ---------------------------------
say "== PyTorch: $STEPS steps, $THREADS threads (load $(cut -d' ' -f1-3 /proc/loadavg))"
OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS "$PY" "$here/pytorch_gpt2.py" \
  --data "$work/data/train_*.bin" --steps "$STEPS" --skip "$SKIP" --threads "$THREADS" \
  --batch $B --seq $T --vocab "$VOCAB" >"$work/torch.log" 2>&1 || { cat "$work/torch.log" >&2; die "PyTorch failed"; }
cat "$work/torch.log" >&2
torch_tps=$(sed -n 's/^tokens_per_s //p' "$work/torch.log")
torch_ms=$(sed -n 's/^step_ms //p' "$work/torch.log")
load

# ---- 3. OpenBLAS on the step's matmul shapes ----------------------------------------
say "== OpenBLAS sgemm, OPENBLAS_NUM_THREADS=$THREADS (load $(cut -d' ' -f1-3 /proc/loadavg))"
OPENBLAS_NUM_THREADS=$THREADS "$work/sgemm_peak" $B $T 768 "$VOCAB" 12 "$REPS" >"$work/sgemm.log"
grep -v '^step_matmul' "$work/sgemm.log" >&2
flops=$(sed -n 's/^step_matmul_flops //p' "$work/sgemm.log")
blas_gflops=$(sed -n 's/^step_matmul_gflops //p' "$work/sgemm.log")
blas_ms=$(sed -n 's/^step_matmul_seconds //p' "$work/sgemm.log")
load

# ---- 4. the table ----------------------------------------------------------------
"$PY" - "$lynx_tps" "$lynx_ms" "$torch_tps" "$torch_ms" "$flops" "$blas_gflops" "$blas_ms" \
  "$lynx_passive_tps" "$lynx_passive_ms" "$loads" "$STEPS" "$SKIP" "$THREADS" "$VOCAB" <<'EOF'
import sys
a = sys.argv[1:]
lynx_tps, lynx_ms, torch_tps, torch_ms, flops, blas_gflops, blas_s = map(float, a[0:7])
passive_tps, passive_ms, loads, steps, skip, threads, vocab = a[7], a[8], a[9], a[10], a[11], a[12], a[13]
gf = flops / 1e9
def row(name, value):
    print("  %-52s %s" % (name, value))
print()
print("GPT-2 124M (12 x 768, 12 heads, vocab %s), B=4 T=64, pp=1, %s threads, fp32; "
      "steps %s, mean of steps %d..%s" % (vocab, threads, steps, int(skip) + 1, steps))
row("lynxgen CPU tokens/s", "%.1f   (%.0f ms/step)" % (lynx_tps, lynx_ms))
if passive_tps:
    row("lynxgen CPU tokens/s, OMP_WAIT_POLICY=PASSIVE", "%.1f   (%.0f ms/step)" % (float(passive_tps), float(passive_ms)))
row("PyTorch tokens/s (nanoGPT-style, AdamW)", "%.1f   (%.0f ms/step)" % (torch_tps, torch_ms))
row("ratio lynxgen / PyTorch", "%.2fx   (goal: 5x)" % (lynx_tps / torch_tps))
row("OpenBLAS sgemm on this step's shapes (GFLOP/s)", "%.1f   (%.1f GFLOP in %.0f ms)" % (blas_gflops, gf, blas_s * 1e3))
row("lynxgen achieved GFLOP/s (step GEMM FLOPs / step)", "%.1f   (%.0f%% of the sgemm rate)" % (gf / (lynx_ms / 1e3), 100 * gf / (lynx_ms / 1e3) / blas_gflops))
row("PyTorch achieved GFLOP/s (same FLOPs / step)", "%.1f   (%.0f%% of the sgemm rate)" % (gf / (torch_ms / 1e3), 100 * gf / (torch_ms / 1e3) / blas_gflops))
row("time floor: the step's sgemm calls alone", "%.0f ms/step = %.1f tokens/s" % (blas_s * 1e3, 256 / blas_s))
row("1-min load average before/after each part", loads.strip())
EOF
