# lynxgen — build, test and regenerate the committed outputs.
#   make            bin/lynxgen
#   make test       the whole test suite (what CI runs)
#   make fuzz       a longer fuzzing run of the front end
#   make format     clang-format every C source in place

ifeq ($(origin CC),default)
CC := gcc
endif
LLVM_DIR ?= /usr/lib/llvm-16
BUILD ?= .build

CFLAGS ?= -O2 -g
WARNINGS := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes
# templates/cuda: lx_attention_gemms.h, the CUDA attention's blocks the cost model prices
override CFLAGS += -std=c11 $(WARNINGS) -Iir -Igen -Itemplates/cuda -I$(LLVM_DIR)/include
LDLIBS := -L$(LLVM_DIR)/lib -lclang-16 -Wl,-rpath,$(LLVM_DIR)/lib -lcrypto -lm -lglpk -lcjson

GEN_SRCS := ir/alloc.c ir/diag.c ir/escape.c ir/ir.c ir/ir_json.c ir/json.c ir/op_signature.c ir/schedule.c \
  gen/frontend/configs.c gen/frontend/constant.c gen/frontend/cursor.c gen/frontend/directives.c gen/frontend/frontend.c gen/frontend/locate.c gen/frontend/model_file.c \
  gen/frontend/source_file.c gen/analysis/analyze.c gen/analysis/config_values.c gen/analysis/mini_sequences.c gen/analysis/cost.c gen/analysis/hardware.c gen/analysis/lint.c \
  gen/planning/glpk_errors.c gen/planning/input_gradients.c gen/planning/layout.c gen/planning/memplan.c gen/planning/parallel.c gen/planning/partition.c \
  gen/planning/plan.c gen/planning/policy.c gen/planning/recompute.c gen/planning/schedule.c \
  gen/planning/search.c gen/planning/simulate.c gen/planning/stage_problem.c gen/planning/windows.c gen/planning/window_room.c gen/verify/access.c \
  gen/verify/verify.c gen/verify/verify_comm.c gen/verify/verify_report.c gen/emit/emit.c \
  gen/emit/emit_cpu.c gen/emit/emit_cuda.c gen/emit/emit_file.c gen/emit/emit_formats.c gen/emit/emit_fusion.c \
  gen/emit/emit_graphs.c gen/emit/emit_names.c gen/emit/emit_op.c gen/emit/emit_operands.c gen/emit/emit_params.c \
  gen/emit/emit_reroll.c gen/emit/emit_walk.c gen/report/manifest.c gen/report/memory_svg.c \
  gen/report/output_dir.c gen/report/report.c gen/report/schedule_svg.c gen/report/trace.c \
  gen/report/trace_json.c gen/tokenize.c
GEN_OBJS := $(GEN_SRCS:%.c=$(BUILD)/%.o) $(BUILD)/prelude.o $(BUILD)/templates.o

.DELETE_ON_ERROR:
.PHONY: all test test-gpu fuzz format clean check-clang out bench-lynx bench-schedules bench-published bench-cuda \
  bench-step bench-gpu bench-search
all: bin/lynxgen

bin/lynxgen: $(BUILD)/gen/main.o $(BUILD)/gen/usage.o $(GEN_OBJS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/%.o: %.c $(wildcard ir/*.h gen/*.h gen/*/*.h)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c -o $@ $<

# the cost model prices the CUDA attention's blocks from the header that defines them
$(BUILD)/gen/analysis/cost.o: templates/cuda/lx_attention_gemms.h templates/cuda/lx_gemm_layout.h

# The prelude travels inside lynxgen, so a model file needs nothing installed.
$(BUILD)/prelude.c: ir/lynx.h scripts/embed.sh
	@mkdir -p $(@D)
	scripts/embed.sh lx_prelude < $< > $@

$(BUILD)/prelude.o: $(BUILD)/prelude.c
	$(CC) $(CFLAGS) -c -o $@ $<

# The templates travel inside lynxgen too: emitted directories get copies
# (common/: the host runtime both targets share).
COMMON_TEMPLATES := $(sort $(wildcard templates/common/*.h))
CPU_TEMPLATES := $(sort $(wildcard templates/cpu/*.h))
CUDA_TEMPLATES := $(sort $(wildcard templates/cuda/*.cuh templates/cuda/*.h templates/cuda/*.cu))
$(BUILD)/templates.c: $(COMMON_TEMPLATES) $(CPU_TEMPLATES) $(CUDA_TEMPLATES) scripts/embed_templates.sh scripts/embed.sh
	@mkdir -p $(@D)
	sh scripts/embed_templates.sh lx_common_templates $(COMMON_TEMPLATES) > $@
	sh scripts/embed_templates.sh lx_cpu_templates $(CPU_TEMPLATES) | grep -v '^#include "emit/emit.h"' >> $@
	sh scripts/embed_templates.sh lx_cuda_templates $(CUDA_TEMPLATES) | grep -v '^#include "emit/emit.h"' >> $@

$(BUILD)/templates.o: $(BUILD)/templates.c gen/emit/emit.h
	$(CC) $(CFLAGS) -c -o $@ $<

# Both compilers must accept the sources with every warning an error.
check-clang:
	clang -fsyntax-only -std=c11 $(WARNINGS) -Iir -Igen -Itemplates/cuda -I$(LLVM_DIR)/include $(GEN_SRCS) gen/main.c gen/usage.c

# out/: the committed emitted programs of the examples, so that every change
# to generated code shows in review; tests/out_test.sh fails when it is stale.
out: bin/lynxgen
	bin/lynxgen examples/tiny.model --target cpu -o out/tiny-cpu > /dev/null
	bin/lynxgen examples/tiny.model --target cpu --pp 4 --schedule zb-h1 -o out/tiny-zb-h1-cpu > /dev/null
	rm out/tiny-zb-h1-cpu/lx_*.h # out/tiny-cpu's headers, byte for byte; manifest.txt still holds their SHA-256
	bin/lynxgen examples/tiny.model --target cpu --pp 4 --schedule 2bw -o out/tiny-2bw-cpu > /dev/null
	rm out/tiny-2bw-cpu/lx_*.h
	bin/lynxgen examples/tiny.model --target cpu --schedule interleaved -o out/tiny-interleaved-cpu > /dev/null
	rm out/tiny-interleaved-cpu/lx_*.h
	bin/lynxgen examples/tiny.model --target cpu --tp 2 --mini-sequences 4 -o out/tiny-mini-sequences-cpu > /dev/null
	rm out/tiny-mini-sequences-cpu/lx_*.h
	bin/lynxgen examples/tiny.model --target cpu --tp 2 --policy lynx-heu --gpu-memory 0.0025 -o out/tiny-offload-cpu > /dev/null
	rm out/tiny-offload-cpu/lx_*.h
	bin/lynxgen examples/tiny-lora.model --target cpu -o out/tiny-lora-cpu > /dev/null
	rm out/tiny-lora-cpu/lx_*.h
	bin/lynxgen examples/gpt13b.model -o out/gpt13b-cuda > /dev/null
	rm out/gpt13b-cuda/trace.json # 7 MB of timeline; manifest.txt still holds its SHA-256

# The recompute policies on the GPT configurations (bench/lynx_policies.c).
$(BUILD)/bench/lynx_policies: bench/lynx_policies.c bench/gpt_configs.h $(GEN_OBJS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(GEN_OBJS) $(LDLIBS)

bench-lynx: $(BUILD)/bench/lynx_policies
	$(BUILD)/bench/lynx_policies

# The pipeline schedules under the recompute policies on the GPT configurations (bench/schedules.c).
$(BUILD)/bench/schedules: bench/schedules.c bench/gpt_configs.h $(GEN_OBJS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(GEN_OBJS) $(LDLIBS)

bench-schedules: $(BUILD)/bench/schedules
	$(BUILD)/bench/schedules

# The simulator against the Zero Bubble paper's 1F1B and interleaved 1F1B figures (bench/published_schedules.c).
$(BUILD)/bench/published_schedules: bench/published_schedules.c $(GEN_OBJS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(GEN_OBJS) $(LDLIBS)

bench-published: $(BUILD)/bench/published_schedules
	$(BUILD)/bench/published_schedules

# Registers, shared memory and spills of the CUDA kernels (fails on a spill).
bench-cuda:
	bench/cuda_resource_usage.sh

# The step rolled into loops against --unrolled-step: lines and compile time of a large stage.
bench-step:
	bench/step_compile_time.sh

# The plan search's time with every parallel field open (bench/plan_search.sh BASELINE compares two builds).
bench-search:
	bench/plan_search.sh

# On a GPU node: make test-gpu's checks and the GPU benchmarks against llm.c and PyTorch, into
# bench/results/gpu.json (bench/README.md; a lent GPU runs the middle step alone, bench/gpu/).
bench-gpu: bin/lynxgen
	bash bench/gpu/kit.sh
	OUT=$(BUILD)/gpu-results bash bench/gpu/device.sh
	python3 bench/gpu/collect.py $(BUILD)/gpu-results/results.tgz

include tests/tests.mk

format:
	clang-format -i $(GEN_SRCS) gen/main.c gen/usage.c gen/*.h gen/*/*.h ir/*.h tests/*.c tests/fuzz/*.c

clean:
	rm -rf $(BUILD) bin
