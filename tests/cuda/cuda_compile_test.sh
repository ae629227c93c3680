#!/usr/bin/env bash
# The CUDA kernels of templates/cuda, checked without a GPU:
#   - every header compiles on its own into an object for sm_80 and sm_90
#     with every warning an error (host: -Wall -Wextra -Werror; device:
#     -Werror all-warnings);
#   - tests/cuda/kernel_twins.cu (the `make test-gpu` program) compiles and
#     links against cuBLASLt, NCCL, Open MPI and the CPU twins, and runs
#     (here it prints "skipped: no GPU"; on a GPU it compares every kernel);
#   - the resource usage of every kernel (registers, static shared memory,
#     stack, spills) is printed as a table, and any spill fails the test.
# Prints "ok - ..." / "not ok - ..." lines; skips (ok) only without nvcc.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-.build}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
out=$BUILD/tests/cuda
failures=0
ok() { echo "ok - $*"; }
not_ok() { echo "not ok - $*"; failures=$((failures + 1)); }

if [ ! -x "$NVCC" ]; then
  ok "skipped: nvcc not found (set NVCC or install the CUDA toolkit)"
  exit 0
fi
mkdir -p "$out"
export NVCC out
COMMON_FLAGS="-std=c++17 -O2 -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror
  -isystem /usr/lib/x86_64-linux-gnu/openmpi/include"
export NVFLAGS="$COMMON_FLAGS -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 --resource-usage"
# The twins program here is a link test (and runs on a GPU if there is one):
# PTX for compute_80 alone skips a second ptxas pass over every kernel (the
# header objects above already prove both architectures) and JIT-compiles on
# any GPU from sm_80 up. `make test-gpu` builds it with real sm_80/sm_90 code.
export TWINS_FLAGS="$COMMON_FLAGS -gencode arch=compute_80,code=compute_80"

# One job per header, plus the twins program; two at a time (two cores).
# The attention header, the slowest, goes first.
headers=$(ls templates/cuda/lx_cuda_attention.cuh; ls templates/cuda/*.cuh | grep -v lx_cuda_attention.cuh)
build_one() {
  local job=$1 name
  if [ "$job" = twins ]; then
    gcc -std=c11 -O2 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -fopenmp -Itemplates/cpu -Itemplates/common \
      -c tests/cuda/cpu_twins.c -o "$out/cpu_twins_link.o" >"$out/twins.log" 2>&1 &&
      $NVCC $TWINS_FLAGS -Itemplates/cuda -Itests/cuda -o "$out/kernel_twins_link" tests/cuda/kernel_twins.cu \
        "$out/cpu_twins_link.o" -lcublasLt -lnccl -L/usr/lib/x86_64-linux-gnu/openmpi/lib -lmpi -lopenblas -lgomp -lm \
        >>"$out/twins.log" 2>&1
    echo $? >"$out/twins.rc"
    return
  fi
  name=$(basename "$job" .cuh)
  $NVCC $NVFLAGS -x cu -c "$job" -o "$out/$name.o" >"$out/$name.log" 2>&1
  echo $? >"$out/$name.rc"
}
export -f build_one
start=$(date +%s)
printf '%s\n' $headers twins | xargs -P 2 -I{} bash -c 'build_one {}'
echo "# compiled in $(( $(date +%s) - start )) s"

for h in $headers; do
  name=$(basename "$h" .cuh)
  if [ "$(cat "$out/$name.rc" 2>/dev/null)" = 0 ]; then
    ok "$h compiles for sm_80 and sm_90 with -Werror (host and device)"
  else
    not_ok "$h does not compile cleanly"
    grep -E 'error|warning' "$out/$name.log" | head -10 | sed 's/^/     /'
  fi
done

if [ "$(cat "$out/twins.rc" 2>/dev/null)" = 0 ]; then
  ok "kernel_twins links against cuBLASLt, NCCL, Open MPI and the CPU twins"
  result=$("$out/kernel_twins_link" 2>&1); status=$?
  if [ $status -eq 0 ]; then ok "kernel_twins runs: $(tail -1 <<<"$result")"
  else not_ok "kernel_twins failed (exit $status)"; grep '^not ok' <<<"$result" | head -20 | sed 's/^/     /'; fi
else
  not_ok "kernel_twins does not build"
  grep -E 'error|warning|undefined' "$out/twins.log" | head -10 | sed 's/^/     /'
fi

# The resource table (bench/cuda_resource_usage.sh): one row per kernel and
# architecture, from the header objects (the twins program compiles the same
# kernels again); it fails on any spill.
table=$out/resource-usage.txt
logs=$(for h in $headers; do echo "$out/$(basename "$h" .cuh).log"; done)
# shellcheck disable=SC2086 # one argument per log
report=$(TABLE=$table bench/cuda_resource_usage.sh $logs 2>&1)
status=$?
sed 's/^/# /' <<<"$report"
if [ $status -eq 0 ]; then ok "$(wc -l <"$table") kernel builds (sm_80 + sm_90) with no register spills (table in $table)"
else not_ok "resource usage: $(grep -v '^ *[a-z_]* *sm_' <<<"$report" | tail -3 | tr '\n' ' ')"; fi
exit $((failures > 0))
