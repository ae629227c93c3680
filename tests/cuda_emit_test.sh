#!/usr/bin/env bash
# The CUDA target's emitted program of every example compiles and links with
# nvcc. One example per architecture and pipeline depth (tiny, GPT-2 124M,
# GPT-3 1.3B at pp 4, llama, Llama 3 8B at pp 2) runs the sweep:
# 1f1b with every recompute policy, gpipe with lynx-heu (a schedule is an
# order of the same instructions: its code differs from 1f1b's in order
# only, which the policies do not change), and zb-h1 (W passes), 2bw (fill
# and ahead forwards, two weight versions) and interleaved 1F1B (chunks,
# sends around the ring; examples of more than one stage) with lynx-heu
# (next to Lynx's windows). The other examples are the same model code at
# other sizes (GPT-3 2.7B, 7B and 13B; 20B and 23B, whose 8 stages are a
# first, middle and last stage as at pp 4; Llama 3 8B at 32k) and build their
# 1f1b lynx-heu plan; the sweep over them more than doubled the test's time.
# Each program compiles for sm_80 and sm_90 with warnings as errors (host and device), against
# cuBLASLt, NCCL and Open MPI, with the emitted Makefile's own rules.
# No GPU is needed; `make test-gpu` runs what a GPU can check.
#
# tp = dp = 1, pp as the example says. An example whose step has more than
# max(8, pp + 1) micro-batches is generated with that many instead (a
# smaller --global-batch): more only repeat the same statements, and pp + 1
# keeps warm-up, steady state and cool-down of both schedules. The step is
# printed with loops (gen/emit/emit_reroll.c), so one case compiles a whole plan
# at its real size: GPT-23B, tp 4 x pp 8, 512 micro-batches, 1F1B, lynx-heu
# (760 k lines a stage unrolled, 1.2 k rolled).
#
# Kept fast (two cores): lx_kernels.o is compiled once per distinct kernel
# source (one in practice: the test checks that every program's kernel
# sources and rules hash the same), a stage whose source, headers and
# Makefile rules hash the same as one already built is not built again, and
# lx_cuda_api.h (CUDA, NCCL and MPI headers: half of a stage's compile time)
# is precompiled once with the host compiler command nvcc runs for a stage
# (nvcc -dryrun); gcc uses the .gch next to the header only where it is
# valid for the compile, and reads the header itself otherwise.
set -u
cd "$(dirname "$0")/.."
# lynxgen --cuda-graph: the launch scripts ask every stage for the graph.
# run.sh names each stage's program; run-slurm.sh one command for every task.
graph_dir=${TMPDIR:-/tmp}/lx-graph.$$
if bin/lynxgen examples/tiny.model --tp 1 --dp 1 --cuda-graph -o "$graph_dir" > /dev/null 2>&1 &&
  [ "$(grep -c 'stage[0-9]"* --cuda-graph "\$@"' "$graph_dir/run.sh")" = 2 ] &&
  [ "$(grep -c 'stage$((SLURM_PROCID / 1))" --cuda-graph "\$@"' "$graph_dir/run-slurm.sh")" = 1 ]; then
  echo "ok - lynxgen --cuda-graph: run.sh and run-slurm.sh pass --cuda-graph to both stages"
else
  echo "not ok - lynxgen --cuda-graph: run.sh / run-slurm.sh do not pass --cuda-graph to every stage"
  graph_failed=1
fi
rm -rf "$graph_dir"
NVCC=${NVCC:-$(command -v nvcc || echo "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc")}
if [ ! -x "$NVCC" ]; then
  echo "ok - skipped: no CUDA toolkit"
  exit "${graph_failed:-0}"
fi
export NVCC
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export work
JOBS=${JOBS:-2}
# flash_attention() builds with lynx's kernels here (ATTENTION=lynx); cuDNN's attention, whose
# frontend headers take minutes, builds once in tests/cuda/cuda_compile_test.sh
export ATTENTION=lynx
failures=${graph_failed:-0}
ok() { echo "ok - $*"; }
not_ok() { echo "not ok - $*"; failures=$((failures + 1)); }
field() { sed -n "s/^ *\.$1 = \([0-9][0-9]*\),.*/\1/p" "$2" | head -1; }
start=$(date +%s)

# ---- the cases: example x schedule x policy --------------------------------
sweep="tiny gpt2-124m gpt13b llama llama3-8b"
for name in $sweep; do
  [ -f "examples/$name.model" ] || not_ok "the sweep's example examples/$name.model is gone"
done
: > "$work/cases"
for model in examples/*.model; do
  name=$(basename "$model" .model)
  pp=$(field pp "$model") mb=$(field micro_batch "$model") gb=$(field global_batch "$model")
  if [ -z "$pp" ] || [ -z "$mb" ] || [ -z "$gb" ]; then
    not_ok "$model: cannot read .pp, .micro_batch and .global_batch"
    continue
  fi
  cap=$((pp + 1 > 8 ? pp + 1 : 8))
  [ $((gb / mb)) -gt $cap ] && gb=$((cap * mb))
  case " $sweep " in
    *" $name "*) ;;
    *)
      echo "$name-1f1b-lynx-heu $model 1f1b lynx-heu $gb" >> "$work/cases"
      continue
      ;;
  esac
  for policy in none full selective checkmate lynx-heu lynx-opt; do
    echo "$name-1f1b-$policy $model 1f1b $policy $gb" >> "$work/cases"
  done
  echo "$name-gpipe-lynx-heu $model gpipe lynx-heu $gb" >> "$work/cases"
  echo "$name-zb-h1-lynx-heu $model zb-h1 lynx-heu $gb" >> "$work/cases"
  echo "$name-2bw-lynx-heu $model 2bw lynx-heu $gb" >> "$work/cases"
  # interleaved 1F1B (2 chunks per stage): two groups of pp micro-batches
  [ "$pp" -gt 1 ] && echo "$name-interleaved-lynx-heu $model interleaved lynx-heu $((2 * pp * mb))" >> "$work/cases"
done

# tensor x pipeline x data parallelism, ZeRO-1 and sequence parallelism (lynxgen verifies each
# schedule statically as it writes it); GPT 1.3B with 4 micro-batches; the LM head and its loss
# in mini-sequences (MsT); lynx-heu under GPipe on 2 MiB GPUs with a what-if profile, which
# offloads (cudaMemcpyAsync on the offload and prefetch streams, the pinned host arena): one stage
# whole tensors, the other the gelu's token-wise (its first rows offloaded, the others recomputed
# by calls on the rows from first_row on); lynx-heu at tp 2 x pp 2 x dp 2 under a what-if that cuts
# the attention's recomputation into pieces of its kv heads (lx_attention_forward_heads)
cat >> "$work/cases" << 'EOF2'
tiny-tp2-pp2-dp2-full examples/tiny.model 1f1b full 8 --tp 2 --pp 2 --dp 2
tiny-tp2-pp2-dp2-zero-selective examples/tiny.model 1f1b selective 8 --tp 2 --pp 2 --dp 2 --zero
tiny-tp2-pp2-dp2-zero-sp-lynx-heu examples/tiny.model 1f1b lynx-heu 8 --tp 2 --pp 2 --dp 2 --zero --sequence-parallel
tiny-tp2-pp2-dp2-zero-sp-zb-h1 examples/tiny.model zb-h1 none 8 --tp 2 --pp 2 --dp 2 --zero --sequence-parallel
tiny-tp2-pp2-dp2-zero-sp-2bw examples/tiny.model 2bw lynx-heu 8 --tp 2 --pp 2 --dp 2 --zero --sequence-parallel
tiny-tp2-pp2-dp2-zero-sp-interleaved examples/tiny.model interleaved lynx-heu 8 --tp 2 --pp 2 --dp 2 --zero --sequence-parallel
gpt13b-tp2-pp2-dp2-none examples/gpt13b.model 1f1b none 32 --tp 2 --pp 2 --dp 2
gpt13b-tp2-pp2-dp2-zero-lynx-heu examples/gpt13b.model 1f1b lynx-heu 32 --tp 2 --pp 2 --dp 2 --zero
gpt-23b-as-planned examples/gpt-23b.model 1f1b lynx-heu 512 --tp 4 --dp 1
tiny-tp2-pp2-sp-mini-sequences-4 examples/tiny.model 1f1b lynx-heu 8 --tp 2 --pp 2 --sequence-parallel --mini-sequences 4
tiny-tp2-pp2-token-wise examples/tiny.model gpipe lynx-heu 8 --tp 2 --pp 2 --gpu-memory 0.002 --profile tests/profiles/tiny-token-split.profile
tiny-tp2-pp2-dp2-head-pieces examples/tiny.model 1f1b lynx-heu 8 --tp 2 --pp 2 --dp 2 --gpu-memory 0.002 --profile tests/profiles/tiny-head-pieces.profile
EOF2

# the examples at pp = 1 and policy none are what-ifs that do not fit a GPU: --allow-oom-plan
generate() { # case model schedule policy global_batch [plan overrides...]
  bin/lynxgen "$2" --tp 1 --dp 1 --schedule "$3" --policy "$4" --global-batch "$5" "${@:6}" --allow-oom-plan -o "$work/$1" \
    > "$work/$1.gen" 2>&1 || echo "$1" >> "$work/gen-failed"
}
export -f generate
xargs -P "$JOBS" -L 1 bash -c 'generate "$@"' _ < "$work/cases"

# ---- hashes: what the kernels and each stage are built from -----------------
rules() { grep -v '^PROGRAMS =' "$1/Makefile"; } # the stage list is the only per-program line
# what builds lx_kernels.o: the compiler settings and its rule (a flash model's Makefile differs
# elsewhere, in its ATTENTION choice, and builds the same lx_kernels.o under ATTENTION=lynx)
kernel_rules() { sed -n '/^\(CUDA_HOME\|NVCC\|ARCH\|MPI_INCLUDE\|OPT\|NVFLAGS\) /p; /^lx_kernels\.o:/,+1p' "$1/Makefile"; }
: > "$work/stages"
while read -r case model schedule policy gb overrides; do
  if grep -qx "$case" "$work/gen-failed" 2> /dev/null; then
    not_ok "lynxgen $model --schedule $schedule --policy $policy --global-batch $gb $overrides"
    tail -3 "$work/$case.gen" | sed 's/^/     /'
    continue
  fi
  dir=$work/$case
  kernels=$( (cat "$dir"/lx_kernels.cu "$dir"/lx_cuda_*.cuh "$dir"/lx_cuda_api.h; kernel_rules "$dir") | sha256sum | cut -c1-16)
  for src in "$dir"/stage*.cu; do
    stage=$(basename "$src" .cu)
    key=$( (echo "$kernels"; cat "$src" "$dir"/lx_*.h; rules "$dir") | sha256sum | cut -c1-16)
    echo "$case $stage $kernels $key" >> "$work/stages"
  done
done < "$work/cases"

# ---- lx_kernels.o, once per distinct kernel hash ----------------------------
mkdir -p "$work/kernels"
for kernels in $(awk '{print $3}' "$work/stages" | sort -u); do
  dir=$work/$(awk -v k="$kernels" '$3 == k {print $1; exit}' "$work/stages")
  host=$(cd "$dir" && eval "$(make -n stage0.o | grep nvcc) -dryrun" 2>&1 | sed -n 's/^#\$ //p' | grep -E '^(gcc|g\+\+|c\+\+) ' |
    tail -1 | sed 's/ "stage0.cu" -o "stage0.o" *$//')
  (cd "$dir" && eval "$host -x c++-header lx_cuda_api.h -o lx_cuda_api.h.gch") >> "$work/kernels/$kernels.log" 2>&1 &&
    mv "$dir/lx_cuda_api.h.gch" "$work/kernels/$kernels.gch"
  if make -C "$dir" lx_kernels.o >> "$work/kernels/$kernels.log" 2>&1; then
    cp "$dir/lx_kernels.o" "$work/kernels/$kernels.o"
  else
    not_ok "lx_kernels.cu does not compile ($dir)"
    grep -E 'error|warning' "$work/kernels/$kernels.log" | head -10 | sed 's/^/     /'
  fi
done
kernel_builds=$(awk '{print $3}' "$work/stages" | sort -u | wc -l)
ok "$kernel_builds distinct lx_kernels.o (the kernel sources and rules hash the same in $(wc -l < "$work/cases") programs);" \
  "$(ls "$work"/kernels/*.gch 2> /dev/null | wc -l) precompiled lx_cuda_api.h"

# ---- every distinct stage: compile and link it with the emitted Makefile ----
sort -u -k4,4 "$work/stages" > "$work/distinct"
touch "$work"/kernels/*.o 2> /dev/null # newer than the sources, so make takes them as built
while read -r case stage kernels key; do
  [ -f "$work/kernels/$kernels.o" ] && ln -f "$work/kernels/$kernels.o" "$work/$case/lx_kernels.o"
  [ -f "$work/kernels/$kernels.gch" ] && ln -f "$work/kernels/$kernels.gch" "$work/$case/lx_cuda_api.h.gch"
done < "$work/distinct"
build_stage() { # case stage kernels key
  local dir=$work/$1
  [ -f "$work/kernels/$3.o" ] || { echo 1 > "$work/$4.rc"; return; }
  make -C "$dir" "$2" > "$work/$4.log" 2>&1
  echo $? > "$work/$4.rc"
}
export -f build_stage
xargs -P "$JOBS" -L 1 bash -c 'build_stage "$@"' _ < "$work/distinct"
distinct=$(wc -l < "$work/distinct")

# ---- one line per program ---------------------------------------------------
while read -r case model schedule policy gb overrides; do
  grep -q "^$case " "$work/stages" || continue
  bad=$(awk -v c="$case" '$1 == c {print $4}' "$work/stages" | while read -r key; do
    [ "$(cat "$work/$key.rc" 2> /dev/null)" = 0 ] || echo "$key"
  done)
  stages=$(grep -c "^$case " "$work/stages")
  if [ -z "$bad" ]; then
    ok "$case (global batch $gb): $stages stage(s) compile and link, sm_80 + sm_90, warnings as errors"
  else
    not_ok "$case (global batch $gb): a stage does not build"
    for key in $bad; do grep -E 'error|warning|undefined' "$work/$key.log" | head -5 | sed 's/^/     /'; done
  fi
done < "$work/cases"

# the head-pieces what-if's programs (built above) run the attention's recompute in pieces of its kv heads
pieces=$(cat "$work"/tiny-tp2-pp2-dp2-head-pieces/stage*.cu 2> /dev/null | grep -c 'lx_attention_forward_heads(')
if [ "$pieces" -gt 0 ]; then
  ok "tiny-tp2-pp2-dp2-head-pieces: $pieces calls of lx_attention_forward_heads (kv-head pieces of the recompute)"
else
  not_ok "tiny-tp2-pp2-dp2-head-pieces: no call of lx_attention_forward_heads"
fi

# ---- the training loop's command line (lx_command_line.h), no GPU needed --
# --help and a bad flag are answered before the program touches CUDA.
program=$(find "$work" -path '*/tiny-*/stage0' -type f | head -1)
if [ -n "$program" ]; then
  help=$("$program" --help 2>&1)
  help_status=$?
  missing=$(for want in '--steps N' '--data GLOB' '[data/tiny/train_*.bin]' '--val-data GLOB' '[data/tiny/val_*.bin]' \
    '--eval-interval N' '[20]' '--init CKPT' '--save CKPT' '--seed N' '[1337]' '--lr X' '[0.001]' '--metrics FILE' \
    '--print-every N' '--cuda-graph' '--profile FILE' '--comm NAME'; do
    grep -qF -- "$want" <<< "$help" || echo "$want"
  done)
  if [ "$help_status" = 0 ] && [ -z "$missing" ]; then
    ok "the CUDA program's --help lists the CPU program's options with tiny.model's defaults, and its own"
  else
    not_ok "the CUDA program's --help (exit $help_status) lacks: $(echo $missing)"
  fi
  "$program" --gradcheck > "$work/bad-flag.out" 2>&1
  bad_status=$?
  if [ "$bad_status" = 2 ] && grep -q "unknown option '--gradcheck'" "$work/bad-flag.out"; then
    ok "the CUDA program refuses a flag it does not have (--gradcheck) with exit 2"
  else
    not_ok "the CUDA program given --gradcheck: exit $bad_status, $(head -c 300 "$work/bad-flag.out")"
  fi
  # the communication backend (lx_cuda_comm.h) is chosen before the program touches CUDA
  "$program" --comm pigeon > "$work/bad-comm.out" 2>&1
  comm_status=$?
  "$program" --comm host --cuda-graph > "$work/graph-comm.out" 2>&1
  graph_status=$?
  if [ "$comm_status" = 2 ] && grep -q -- "--comm pigeon: the backends are nccl (the default) and host" "$work/bad-comm.out" &&
    [ "$graph_status" = 2 ] && grep -q -- "--comm host waits on the host between kernels" "$work/graph-comm.out"; then
    ok "the CUDA program names its communication backends for a wrong --comm, and refuses --comm host with --cuda-graph"
  else
    not_ok "--comm pigeon: exit $comm_status, $(head -c 300 "$work/bad-comm.out"); --comm host --cuda-graph:" \
      "exit $graph_status, $(head -c 300 "$work/graph-comm.out")"
  fi
else
  not_ok "no tiny.model stage0 was built: the command line is not checked"
fi
echo "# $(wc -l < "$work/stages") stages, $distinct distinct sources built, in $(($(date +%s) - start)) s"
exit $((failures > 0))
