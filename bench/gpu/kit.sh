#!/bin/sh
# bench/gpu/kit.sh — everything a lent GPU machine runs, built here.
#
# A GPU lent for minutes has nvcc, PyTorch and a driver, but not lynxgen's
# libclang, GLPK, OpenBLAS or Open MPI. So this machine generates and builds
# every program (Hopper code only: -gencode sm_90), runs the CPU halves of
# make test-gpu's tests (tests/cuda/gpu_kit.py), and packs the programs, the
# data and the shared libraries the device lacks into one archive,
# build/gpu-carry/kit.tar.xz (64 MiB is what travels). bench/gpu/device.sh
# unpacks and runs it there; bench/gpu/collect.py reads what comes back.
#
#   bench/gpu/kit.sh           about 15 minutes on 2 cores (cuDNN's attention compiles for minutes)
#
# Needs what make test needs (scripts/deps.sh), the CUDA toolkit and, for the
# llm.c baseline, its source in build/llmc-src (git-ignored; measured at
# karpathy/llm.c f1e2ace6: git clone https://github.com/karpathy/llm.c build/llmc-src).
set -eu
cd "$(dirname "$0")/../.."
kit=build/gpu-kit
carry=build/gpu-carry
hopper="-gencode arch=compute_90,code=sm_90"
nvcc=/usr/local/cuda/bin/nvcc
rm -rf "$kit" "$carry"
mkdir -p "$kit/bin" "$kit/lib" "$kit/ompi" "$kit/bench" "$kit/data" "$carry"

make -j2 bin/lynxgen >/dev/null

# make test-gpu's tests, CPU halves run, CUDA programs built
export ARCH="$hopper" # the emitted Makefiles' ARCH
LX_KIT_PHASE=prepare LX_KIT_DIR="$kit" python3 tests/cuda/cuda_training_test.py
LX_KIT_PHASE=prepare LX_KIT_DIR="$kit" python3 tests/cuda/cuda_resume_test.py
make .build/tests/cuda/kernel_twins .build/tests/cuda/kernel_twins_cudnn CUDA_ARCH_FLAGS="$hopper" >/dev/null
cp .build/tests/cuda/kernel_twins .build/tests/cuda/kernel_twins_cudnn "$kit/bin/"
find "$kit" -path '*/cpu*' -name 'stage[0-9]*' -type f -delete # the device reads the CPU runs' metrics

# benchmark programs: GPT-2 124M and GPT-3 1.3B as in examples/, with flash attention, planned for
# the H100 SXM they run on (the examples' cluster is A100s; the H200 has the same bf16 peak)
for model in gpt2-124m gpt13b; do
  sed 's/= attention(/= flash_attention(/; s/GPU_A100_80GB/GPU_H100_80GB/' "examples/$model.model" \
    > "$kit/bench/$model-flash.model"
  grep -q 'flash_attention(' "$kit/bench/$model-flash.model"
  grep -q 'GPU_H100_80GB' "$kit/bench/$model-flash.model"
done
# GPT-2 as llm.c and the PyTorch baseline train it: no dropout (the example has GPT-2's 0.1; the
# 1.3B keeps GPT-3's, Megatron-LM's default)
sed -i 's/^\( *\.dropout = \)0\.1,/\10,/' "$kit/bench/gpt2-124m-flash.model"
grep -q '^ *\.dropout = 0,' "$kit/bench/gpt2-124m-flash.model"
bin/lynxgen "$kit/bench/gpt2-124m-flash.model" --target cuda -o "$kit/bench/gpt2-124m" >/dev/null
bin/lynxgen "$kit/bench/gpt13b-flash.model" --target cuda --tp 1 --dp 1 --pp 1 --global-batch 32 \
  -o "$kit/bench/gpt13b" >/dev/null
make -C "$kit/bench/gpt2-124m" >/dev/null
make -C "$kit/bench/gpt13b" >/dev/null
python3 bench/make_shard.py "$kit/data/gpt2_train_000000.bin" 1200000 50257 1
python3 bench/make_shard.py "$kit/data/gpt2_val_000000.bin" 100000 50257 2

attention_bench() { # NAME FLAGS...: bench/gpu/attention_lynx.cu, lynx's kernels or (with the cuDNN object) cuDNN's
  name=$1
  shift
  $nvcc -std=c++17 -O2 $hopper -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror -Itemplates/cuda \
    -isystem /usr/lib/x86_64-linux-gnu/openmpi/include -o "$kit/bin/$name" bench/gpu/attention_lynx.cu "$@" \
    -L/usr/lib/x86_64-linux-gnu/openmpi/lib -lmpi
}
attention_bench attention_lynx
attention_bench attention_cudnn -DLX_CUDNN_ATTENTION .build/tests/cuda/lx_cuda_cudnn_attention.o -lcudnn -lnvrtc
# llm.c's train_gpt2cu, with its own attention kernels and with cuDNN's (its fastest build). CUDA 13: no
# NVML here, and the old cudaMemAdvise (bench/gpu/llmc_cuda13.h); its Makefile looks for the cuDNN
# frontend in ./cudnn-frontend/include.
llmc() { # NAME USE_CUDNN LIBS
  make -C build/llmc-src clean >/dev/null 2>&1
  make -C build/llmc-src train_gpt2cu GPU_COMPUTE_CAPABILITY=90 USE_CUDNN="$2" NO_MULTI_GPU=1 NO_USE_MPI=1 \
    NVCC_LDFLAGS="-lcublas -lcublasLt $3" PFLAGS="-DENABLE_BF16 -include $PWD/bench/gpu/llmc_cuda13.h" >/dev/null
  cp build/llmc-src/train_gpt2cu "$kit/bin/$1"
}
if [ -d build/llmc-src ]; then
  frontend=$(python3 -c 'import importlib.util as u, os; s = u.find_spec("cudnn")
print(os.path.join(os.path.dirname(os.path.dirname(s.origin)), "include"))')
  mkdir -p build/llmc-src/cudnn-frontend
  ln -sfn "$frontend" build/llmc-src/cudnn-frontend/include
  llmc train_gpt2cu 0 ""
  llmc train_gpt2cu_cudnn 1 "-lcudnn -lnvrtc"
else
  echo "kit.sh: no build/llmc-src: the llm.c baseline is left out"
fi

# Shared libraries the device lacks: Open MPI (run relocated, OPAL_PREFIX), cJSON, OpenBLAS (the twins' CPU side)
# and whatever else the binaries need beyond the C/C++ runtime and CUDA's own libraries.
for p in libopenmpi3 openmpi-bin openmpi-common libpmix2 libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7; do
  dpkg -L "$p"
done | while read -r f; do
  case "$f" in /usr/share/doc/* | /usr/share/man/* | */java/* | *fortran* | *oshmem* | *f08* | *mpifh*) continue ;; esac
  if [ -f "$f" ] || [ -L "$f" ]; then echo "$f"; fi
done | tar -cf - --no-recursion -T - 2>/dev/null | tar -xf - -C "$kit/ompi"
ln -s ../ompi/usr/bin/orterun "$kit/bin/mpirun"
find "$kit" -path "$kit/ompi" -prune -o -type f -perm -u+x -print | while read -r binary; do
  ldd "$binary" 2>/dev/null | awk '$3 ~ /^\// { print $3 }'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | ld-linux* | libstdc++* | libgcc_s* | libz.so* | \
      libudev* | libcuda.so* | libcudart* | libcublas* | libnccl* | libcudnn* | libnvrtc* | libmpi* | libopen-* | \
      libhwloc* | \
      libevent*) ;; # the C/C++ runtime, CUDA's, and the Open MPI of $kit/ompi
    *) cp -L "$lib" "$kit/lib/" ;;
  esac
done
ls "$kit/lib"

find "$kit" -name '*.o' -type f -delete # linked already
tar -C build -cf - gpu-kit | xz -T2 -6 > "$carry/kit.tar.xz"
du -sh "$kit" "$carry/kit.tar.xz"
