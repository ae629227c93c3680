#!/usr/bin/env bash
# cuDNN's fused attention in an emitted program (templates/cuda/
# lx_cuda_cudnn_attention.cu), checked without a GPU:
#   - a model with flash_attention() (tests/equivalence/llama.model, GQA)
#     builds with its Makefile's default ATTENTION=cudnn, the frontend's
#     headers found where pip put them, for sm_90 with warnings as errors,
#     and links against libcudnn;
#   - exactly one definition of each flash launcher is linked: the cuDNN
#     object defines lx_flash_attention_forward/backward and the kernels
#     built for it (lx_kernels_cudnn.o) leave them out, while ATTENTION=lynx's
#     lx_kernels.o defines them (over lynx's own kernels);
#   - without the headers, make stops before compiling and says what to
#     install; an unknown ATTENTION is refused.
# Slow (the frontend's headers compile for a minute or more); skipped
# (ok) without nvcc. `make test-gpu` (kernel_twins) runs it on a GPU.
set -u
cd "$(dirname "$0")/../.."
. tests/tap.sh # $tmp, pass, fail
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if [ ! -x "$NVCC" ]; then
  pass "skipped: nvcc not found"
  exit 0
fi
hopper="ARCH=-gencode arch=compute_90,code=sm_90"
out=$tmp/llama
bin/lynxgen tests/equivalence/llama.model --target cuda -o "$out" >/dev/null || fail "lynxgen writes the llama program"

# the frontend's one translation unit takes a core for a minute: the rest, and ATTENTION=lynx's
# lx_kernels.o (checked below), build beside it
make -C "$out" "$hopper" ATTENTION=lynx lx_kernels.o >"$tmp/lynx.log" 2>&1 &
lynx_build=$!
if make -j2 -C "$out" "$hopper" >"$tmp/cudnn.log" 2>&1; then
  pass "ATTENTION=cudnn (the default): the llama program compiles and links, sm_90, -Werror"
else
  fail "ATTENTION=cudnn: the llama program builds" "$(grep -E 'error|warning|make:' "$tmp/cudnn.log" | head -n 5)"
fi
ldd "$out/stage0" 2>/dev/null | grep -q 'libcudnn\.so' && pass "stage0 links libcudnn" ||
  fail "stage0 links libcudnn" "$(ldd "$out/stage0" 2>&1 | head -n 3)"

defines() { nm -C --defined-only "$out/$1" 2>/dev/null | grep -c " T lx_flash_attention_\(forward\|backward\)("; }
[ "$(defines lx_cuda_cudnn_attention.o)" = 2 ] && [ "$(defines lx_kernels_cudnn.o)" = 0 ] &&
  pass "the cuDNN object defines both flash launchers, lx_kernels_cudnn.o neither" ||
  fail "one definition each with cuDNN" "cuDNN $(defines lx_cuda_cudnn_attention.o), kernels $(defines lx_kernels_cudnn.o)"
if wait "$lynx_build" && [ "$(defines lx_kernels.o)" = 2 ]; then
  pass "ATTENTION=lynx: lx_kernels.o defines both flash launchers (lynx's own kernels)"
else
  fail "ATTENTION=lynx: lx_kernels.o defines both flash launchers" "$(defines lx_kernels.o)"
fi

rm -f "$out/lx_cuda_cudnn_attention.o"
if make -C "$out" "$hopper" CUDNN_FRONTEND="$tmp/nowhere" >"$tmp/missing.log" 2>&1; then
  fail "without the frontend's headers make stops" "exit 0"
elif grep -q 'pip install nvidia-cudnn-frontend' "$tmp/missing.log" && ! grep -q 'cudnn_frontend.h: No such' "$tmp/missing.log"; then
  pass "without the frontend's headers make stops before compiling and names the package"
else
  fail "without the frontend's headers make names the package" "$(grep -v '^make\[' "$tmp/missing.log" | head -n 3)"
fi
if make -C "$out" ATTENTION=flashy >"$tmp/unknown.log" 2>&1; then
  fail "make ATTENTION=flashy is refused" "exit 0"
else
  grep -q 'ATTENTION=flashy: cudnn or lynx' "$tmp/unknown.log" && pass "make ATTENTION=flashy is refused: cudnn or lynx" ||
    fail "make ATTENTION=flashy names the choices" "$(head -n 2 "$tmp/unknown.log")"
fi
exit $((failures > 0))
