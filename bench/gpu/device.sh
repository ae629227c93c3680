#!/bin/bash
# bench/gpu/device.sh — make test-gpu and the GPU benchmarks, on a lent GPU
# machine, from the kit bench/gpu/kit.sh built (build/gpu-carry/kit.tar.xz).
#
# Runs in the repository root of that machine. Each step has a time limit
# and the whole run a budget (LX_BUDGET_S, default 540 s): a step that hangs
# costs its limit, not the lease. Every step's output goes to
# $OUT/results.tgz (rewritten after each step, so that a run cut short still
# returns what it did) and a summary line to stdout; bench/gpu/collect.py
# turns results.tgz into bench/results/gpu.json. LX_STEPS="a b" runs only
# the steps so named (a second call, when a lease has time for one).
set -u
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/lx-gpu-out}
results=/tmp/lx-results
kit=$PWD/build/gpu-kit
deadline=$((SECONDS + ${LX_BUDGET_S:-540}))
mkdir -p "$out" "$results"
tar -C build -xJf build/gpu-carry/kit.tar.xz

# The kit's Open MPI runs relocated; CUDA's libraries are the machine's own.
lib_dir() { find /usr/local/cuda* /opt /usr/lib -name "$1" 2>/dev/null | head -1 | xargs -r dirname; }
ompi=$kit/ompi/usr
libs=$kit/lib:$ompi/lib/x86_64-linux-gnu:$ompi/lib/x86_64-linux-gnu/openmpi/lib
for lib in libnccl.so.2 libcublasLt.so.13 libcublas.so.13 libcudnn.so.9 libnvrtc.so.13; do libs=$libs:$(lib_dir $lib); done
with_kit() {
  env LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" PATH="$kit/bin:$ompi/bin:$PATH" OPAL_PREFIX="$ompi" \
    PMIX_MCA_mca_base_component_path="$ompi/lib/x86_64-linux-gnu/pmix2/lib/pmix" \
    OMPI_MCA_mca_base_component_show_load_errors=0 OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader \
    OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_btl_base_warn_component_unused=0 "$@"
}

# step NAME LIMIT_S COMMAND...: its output in $results/NAME.log, one summary line here
step() {
  local name=$1 limit=$2 left=$((deadline - SECONDS)) start=$SECONDS status
  shift 2
  case " ${LX_STEPS:-$name} " in *" $name "*) ;; *) return ;; esac
  if [ "$left" -lt 15 ]; then
    echo "$name: skipped, the budget is spent" | tee -a "$results/summary.txt"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  timeout -k 5 "$limit" bash -c '"$@"' "$name" "$@" > "$results/$name.log" 2>&1 # bash: the steps are functions
  status=$?
  # a step cut short leaves its ranks behind (mpirun's children): they would
  # share the GPU with the next step's timings
  pkill -9 -f "$kit/" 2>/dev/null && sleep 1
  echo "$name: exit $status in $((SECONDS - start)) s (limit $limit s)" | tee -a "$results/summary.txt"
  grep -E '^(not ok|ok) |tok_s|"impl"|step +[0-9]+/' "$results/$name.log" | tail -n 40
  tar -C /tmp -czf "$out/results.tgz" lx-results
}

inventory() {
  nvidia-smi
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn",
    torch.backends.cudnn.version(), torch.cuda.get_device_name(0))'
  echo "libraries: $libs"
  ldconfig -p | grep -E 'nccl|cudnn|cublasLt|libmpi|cjson|openblas'
  command -v mpirun nvcc ncu compute-sanitizer
  with_kit ompi_info --version 2>&1 | head -2
  nproc; free -g
}

# peak GPU memory while COMMAND runs (nvidia-smi every 100 ms, MiB, the whole device)
with_memory() {
  local log=$1
  shift
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$log" &
  local sampler=$!
  "$@"
  local status=$?
  kill "$sampler"
  return $status
}

gpt2_data="$kit/data/gpt2_train_*.bin"
gpt2_val="$kit/data/gpt2_val_*.bin"
train() { # PROGRAM METRICS STEPS ARGS...: a benchmark program's run on the GPT-2 shards
  local program=$1 metrics=$2 steps=$3
  shift 3
  with_kit "$program/run.sh" --steps "$steps" --data "$gpt2_data" --val-data "$gpt2_val" --eval-interval 0 \
    --metrics "$metrics" "$@"
}
kit_test() { with_kit env LX_KIT_PHASE=device LX_KIT_DIR="$kit" python3 "$@"; }
export kit results ompi libs gpt2_data gpt2_val
export -f with_kit inventory with_memory train kit_test

step inventory 60 inventory
step kernel_twins 90 with_kit "$kit/bin/kernel_twins"
step kernel_twins_cudnn 90 with_kit "$kit/bin/kernel_twins_cudnn"
step attention_cudnn 60 with_kit "$kit/bin/attention_cudnn"
step attention_lynx 60 with_kit "$kit/bin/attention_lynx"
step attention_torch 60 python3 bench/gpu/attention_torch.py
step gpt2_lynxgen 90 train "$kit/bench/gpt2-124m" "$results/gpt2_lynxgen.jsonl" 12
step gpt2_profile 45 train "$kit/bench/gpt2-124m" "$results/gpt2_profile.jsonl" 4 --profile "$results/gpt2.profile"
step gpt2_llmc 90 with_kit sh bench/gpu/llmc_gpt2.sh "$kit/bin/train_gpt2cu" "$gpt2_data" "$gpt2_val" 4 15
step gpt2_llmc_cudnn 90 with_kit sh bench/gpu/llmc_gpt2.sh "$kit/bin/train_gpt2cu_cudnn" "$gpt2_data" "$gpt2_val" 4 15
step gpt13b 90 with_memory "$results/gpt13b_memory.csv" train "$kit/bench/gpt13b" "$results/gpt13b.jsonl" 5
step gpt13b_profile 60 train "$kit/bench/gpt13b" "$results/gpt13b_profile.jsonl" 4 \
  --profile "$results/gpt13b.profile"
# the multi-rank layouts after the benchmarks: several ranks on one GPU through
# --comm host are the slowest steps, and the least sure to finish in a lease
step cuda_training_test 280 kit_test tests/cuda/cuda_training_test.py
step cuda_resume_test 90 kit_test tests/cuda/cuda_resume_test.py
step gpt2_pytorch 180 python3 bench/gpu/pytorch_gpt2_cuda.py --data "$gpt2_data" --steps 12 --micro-batch 4
# Nsight Compute on 120 kernels of the GPT-2 program's steps (speed of light: how near each kernel
# runs to the memory and compute peaks), for the next kernel work
step gpt2_ncu 120 with_kit ncu --target-processes all --launch-skip 2500 --launch-count 120 \
  --section SpeedOfLight --csv --page details "$kit/bench/gpt2-124m/run.sh" --steps 2 --data "$gpt2_data" \
  --val-data "$gpt2_val" --eval-interval 0
cat "$results/summary.txt"
