# The CUDA kernels of the emitted GPU programs (templates/cuda/*.cuh).
#   attention_gemms_test  (make test, no GPU needed) the materialized
#                         attention's strided-batched products as cuBLASLt
#                         is handed them, run on the CPU, against the CPU twins
#   cuda_compile_test.sh  (make test, no GPU needed) every header compiled for
#                         sm_80 and sm_90 with warnings as errors, the twins
#                         program linked against cuBLASLt / NCCL / Open MPI,
#                         and the kernels' registers / shared memory / spills
#                         (any spill fails)
#   make test-gpu         builds and runs kernel_twins: each CUDA kernel
#                         against its CPU twin (templates/cpu) with bf16
#                         tolerances, and kernel_twins_cudnn, the same with
#                         cuDNN running flash attention (p = 0: its dropout
#                         is its own); then cuda_training_test.py: the CUDA
#                         and CPU programs of examples/tiny.model trained on
#                         the same shard give the same losses within a bf16
#                         bound (pp = 1, and pp = 2 on two GPUs; the tp x pp
#                         x dp layouts as ranks sharing one GPU through
#                         --comm host); each prints "skipped: no GPU" without one (LX_CPU_ONLY=1 runs
#                         the training test's CPU half anywhere); then
#                         cuda_resume_test.py: a CUDA run killed with kill -9
#                         and resumed gives the uninterrupted run's losses
#                         within a bound the two uninterrupted runs measure
#                         (LX_RESUME_TARGET=cpu runs it on the CPU program);
#                         LX_KIT_PHASE splits both tests between this machine
#                         and a lent GPU (gpu_kit.py, bench/gpu/kit.sh)

NVCC ?= $(shell command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)
MPI_INCLUDE ?= /usr/lib/x86_64-linux-gnu/openmpi/include
MPI_LIBDIR ?= /usr/lib/x86_64-linux-gnu/openmpi/lib
CUDA_ARCH_FLAGS := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
CUDA_TEST_NVFLAGS := -std=c++17 -O2 $(CUDA_ARCH_FLAGS) -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror \
  -isystem $(MPI_INCLUDE) -Itemplates/cuda -Itests/cuda
CUDA_TEST_LIBS := -lcublasLt -lnccl -L$(MPI_LIBDIR) -lmpi -lopenblas -lgomp -lm

CUDA_HEADERS := $(wildcard templates/cuda/*.cuh)

$(BUILD)/tests/cuda/cpu_twins.o: tests/cuda/cpu_twins.c tests/cuda/cpu_twins.h $(wildcard templates/cpu/*.h templates/common/*.h)
	@mkdir -p $(@D)
	$(CC) -std=c11 -O2 $(WARNINGS) -fopenmp -Itemplates/cpu -Itemplates/common -c -o $@ $<

$(BUILD)/tests/cuda/kernel_twins: tests/cuda/kernel_twins.cu tests/cuda/twin_harness.cuh $(BUILD)/tests/cuda/cpu_twins.o \
    $(CUDA_HEADERS) tests/cuda/cpu_twins.h
	@mkdir -p $(@D)
	$(NVCC) $(CUDA_TEST_NVFLAGS) -o $@ $< $(BUILD)/tests/cuda/cpu_twins.o $(CUDA_TEST_LIBS)

# the same twins with cuDNN running the flash launchers (lx_cuda_cudnn_attention.cu)
CUDNN_FRONTEND ?= $(shell python3 -c 'import importlib.util as u, os; s = u.find_spec("cudnn"); \
  print(os.path.join(os.path.dirname(os.path.dirname(s.origin)), "include") if s else "")' 2>/dev/null)
$(BUILD)/tests/cuda/lx_cuda_cudnn_attention.o: templates/cuda/lx_cuda_cudnn_attention.cu templates/cuda/lx_cuda_api.h
	@mkdir -p $(@D)
	$(NVCC) $(CUDA_TEST_NVFLAGS) -isystem $(CUDNN_FRONTEND) -x c++ -c -o $@ $<

$(BUILD)/tests/cuda/kernel_twins_cudnn: tests/cuda/kernel_twins.cu tests/cuda/twin_harness.cuh $(BUILD)/tests/cuda/cpu_twins.o \
    $(CUDA_HEADERS) tests/cuda/cpu_twins.h $(BUILD)/tests/cuda/lx_cuda_cudnn_attention.o
	$(NVCC) $(CUDA_TEST_NVFLAGS) -DLX_CUDNN_ATTENTION -o $@ $< $(BUILD)/tests/cuda/cpu_twins.o \
	  $(BUILD)/tests/cuda/lx_cuda_cudnn_attention.o $(CUDA_TEST_LIBS) -lcudnn -lnvrtc

$(BUILD)/tests/attention_gemms_test: tests/cuda/attention_gemms_test.c $(BUILD)/tests/cuda/cpu_twins.o \
    templates/cuda/lx_attention_gemms.h templates/cuda/lx_gemm_layout.h templates/common/lx_rng.h \
    tests/cuda/cpu_twins.h tests/check.h
	@mkdir -p $(@D)
	$(CC) -std=c11 -O2 $(WARNINGS) -Itemplates/cuda -Itemplates/common -Itests/cuda -Itests -o $@ $< \
	  $(BUILD)/tests/cuda/cpu_twins.o \
	  -fopenmp -lopenblas -lm

test-gpu: $(BUILD)/tests/cuda/kernel_twins $(BUILD)/tests/cuda/kernel_twins_cudnn bin/lynxgen
	$(BUILD)/tests/cuda/kernel_twins
	$(BUILD)/tests/cuda/kernel_twins_cudnn
	python3 tests/cuda/cuda_training_test.py
	python3 tests/cuda/cuda_resume_test.py

TEST_PROGRAMS += $(BUILD)/tests/attention_gemms_test tests/cuda/cuda_compile_test.sh tests/cuda/cuda_profile_test.sh tests/cuda/cudnn_attention_test.sh
