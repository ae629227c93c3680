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
  elif make -C "$work/$name" -j2 > "$work/$name.build" 2>&1; then
    echo "ok - $name: every stage .cu compiles and links with nvcc for sm_80 and sm_90, warnings as errors"
  else
    echo "not ok - $name: nvcc build"
    grep -E "error|warning" "$work/$name.build" | head -10
    status=1
  fi
}
build tiny-1f1b-full examples/tiny.model --policy full
build tiny-gpipe-selective examples/tiny.model --schedule gpipe --policy selective
exit $status
