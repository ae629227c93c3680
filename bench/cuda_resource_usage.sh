#!/usr/bin/env bash
# Registers per thread, static shared memory, stack frame and spill bytes of
# every kernel of the emitted CUDA programs, as ptxas reports them
# (nvcc --resource-usage), for sm_80 and sm_90. Exits 1 if any kernel spills.
#
#   bench/cuda_resource_usage.sh            compiles templates/cuda/lx_kernels.cu
#                                           (what every emitted program links)
#   bench/cuda_resource_usage.sh LOG...     reads nvcc --resource-usage logs instead
#                                           (tests/cuda/cuda_compile_test.sh)
# TABLE=FILE also writes the table there. `make bench-cuda` runs the first form.
set -u
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then
  NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
  [ -x "$NVCC" ] || { echo "no nvcc (set NVCC)" >&2; exit 2; }
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  # the emitted Makefile's flags (gen/emit/emit.c), with --resource-usage
  "$NVCC" -std=c++17 -O2 -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror \
    -isystem /usr/lib/x86_64-linux-gnu/openmpi/include -Itemplates/cuda -Itemplates/cpu \
    -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 --resource-usage \
    -c templates/cuda/lx_kernels.cu -o "$work/lx_kernels.o" > "$work/nvcc.log" 2>&1 ||
    { cat "$work/nvcc.log" >&2; exit 2; }
  set -- "$work/nvcc.log"
fi
table=$(cat "$@" | awk '
  /Compiling entry function/ { match($0, /\x27[^\x27]*\x27 for \x27sm_[0-9]+\x27/); s = substr($0, RSTART, RLENGTH);
                                split(s, parts, "\x27"); name = parts[2]; arch = parts[4]; next }
  /bytes stack frame/ { stack = $1; spill_st = $5; spill_ld = $9; next }
  /Used [0-9]+ registers/ { regs = $0; sub(/.*Used /, "", regs); sub(/ registers.*/, "", regs);
                            smem = 0; if (match($0, /[0-9]+ bytes smem/)) { smem = substr($0, RSTART, RLENGTH); sub(/ bytes smem/, "", smem) }
                            if (name != "" && !seen[name arch]++) print name, arch, regs, smem, stack, spill_st, spill_ld; name = "" }' |
  while read -r mangled arch regs smem stack spill_st spill_ld; do
    printf '%-44s %-6s %4s %6s %6s %8s %8s\n' "$(c++filt "$mangled" | sed 's/(.*//')" "$arch" "$regs" "$smem" "$stack" \
      "$spill_st" "$spill_ld"
  done | sort -u)
printf '%-44s %-6s %4s %6s %6s %8s %8s\n' kernel arch regs smem stack spill_st spill_ld
echo "$table"
[ -n "${TABLE:-}" ] && echo "$table" > "$TABLE"
if [ -z "$table" ]; then
  echo "no resource usage found in the nvcc output" >&2
  exit 1
fi
spilling=$(awk '$6 != 0 || $7 != 0' <<< "$table")
if [ -n "$spilling" ]; then
  echo "kernels spill registers:" >&2
  echo "$spilling" >&2
  exit 1
fi
echo "# $(wc -l <<< "$table") kernel builds, no spills"
