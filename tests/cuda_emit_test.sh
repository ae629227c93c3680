#!/usr/bin/env bash
# The CUDA target's emitted programs compile and link with nvcc (sm_80 and
# sm_90, warnings as errors on host and device) against cuBLASLt, NCCL and
# Open MPI. No GPU is needed; `make test-gpu` runs what a GPU can check.
set -u
cd "$(dirname "$0")/.."
if ! command -v nvcc > /dev/null && [ ! -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]; then
  echo "ok - skipped: no CUDA toolkit"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
build() { # name, model, args...
  local name=$1 model=$2
  shift 2
  if ! bin/lynxgen "$model" -o "$work/$name" "$@" > "$work/$name.log" 2>&1; then
    echo "not ok - lynxgen $name"
    tail -5 "$work/$name.log"
    status=1
  else
    # lx_kernels.cu is the same file for every model and plan: compiled once, shared
    [ -f "$work/lx_kernels.o" ] && cp "$work/lx_kernels.o" "$work/$name/"
    if make -C "$work/$name" -j2 > "$work/$name.build" 2>&1; then
      echo "ok - $name: every stage .cu compiles and links with nvcc for sm_80 and sm_90, warnings as errors"
      [ -f "$work/lx_kernels.o" ] || cp "$work/$name/lx_kernels.o" "$work/"
      return
    fi
    echo "not ok - $name: nvcc build"
    grep -E "error|warning" "$work/$name.build" | head -10
    status=1
  fi
}
build tiny-1f1b-full examples/tiny.model --policy full
build tiny-gpipe-selective examples/tiny.model --schedule gpipe --policy selective
# tensor x pipeline x data parallelism (lynxgen verifies each schedule statically as it writes it)
build tiny-tp2-pp2-dp2 examples/tiny.model --tp 2 --pp 2 --dp 2 --policy full
build tiny-tp2-pp2-dp2-zero examples/tiny.model --tp 2 --pp 2 --dp 2 --zero --policy selective
build tiny-tp2-pp2-dp2-lynx-heu examples/tiny.model --tp 2 --pp 2 --dp 2 --zero --policy lynx-heu
# sequence parallelism: reduce-scatters and all-gathers over tp, norms, dropout and residuals on sequence shards
build tiny-tp2-pp2-dp2-sp examples/tiny.model --tp 2 --pp 2 --dp 2 --zero --sequence-parallel --policy lynx-heu
# (a global batch of 32: 4 micro-batches, so that the unrolled step compiles in seconds)
build gpt13b-tp2-pp2-dp2 examples/gpt13b.model --tp 2 --pp 2 --dp 2 --global-batch 32
build gpt13b-tp2-pp2-dp2-zero examples/gpt13b.model --tp 2 --pp 2 --dp 2 --global-batch 32 --zero --policy lynx-heu
exit $status
