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
override CFLAGS += -std=c11 $(WARNINGS) -Iir -Igen -I$(LLVM_DIR)/include
LDLIBS := -L$(LLVM_DIR)/lib -lclang-16 -Wl,-rpath,$(LLVM_DIR)/lib -lcrypto -lm -lglpk -lcjson

GEN_SRCS := gen/diag.c ir/op_signature.c gen/frontend.c gen/model_file.c gen/source_file.c gen/locate.c gen/constant.c gen/analyze.c gen/cost.c gen/hardware.c ir/ir.c ir/alloc.c ir/escape.c ir/ir_json.c ir/json.c ir/schedule.c gen/partition.c gen/recompute.c gen/schedule.c gen/plan.c gen/parallel.c gen/memplan.c gen/simulate.c gen/trace.c gen/trace_json.c gen/schedule_svg.c gen/memory_svg.c gen/report.c gen/layout.c gen/tokenize.c gen/emit.c gen/emit_cpu.c gen/manifest.c gen/output_dir.c gen/verify.c gen/verify_report.c gen/verify_comm.c gen/access.c gen/windows.c gen/policy.c gen/emit_walk.c gen/emit_operands.c gen/emit_op.c gen/emit_graphs.c gen/emit_fusion.c gen/emit_reroll.c gen/emit_names.c gen/emit_file.c gen/emit_cuda.c gen/search.c
GEN_OBJS := $(GEN_SRCS:%.c=$(BUILD)/%.o) $(BUILD)/prelude.o $(BUILD)/templates.o

.PHONY: all test test-gpu fuzz format clean check-clang out bench-lynx bench-cuda bench-step
all: bin/lynxgen

bin/lynxgen: $(BUILD)/gen/main.o $(GEN_OBJS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/%.o: %.c $(wildcard ir/*.h gen/*.h)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c -o $@ $<

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
	sh scripts/embed_templates.sh lx_cpu_templates $(CPU_TEMPLATES) | grep -v '^#include "emit.h"' >> $@
	sh scripts/embed_templates.sh lx_cuda_templates $(CUDA_TEMPLATES) | grep -v '^#include "emit.h"' >> $@

$(BUILD)/templates.o: $(BUILD)/templates.c gen/emit.h
	$(CC) $(CFLAGS) -c -o $@ $<

# Both compilers must accept the sources with every warning an error.
check-clang:
	clang -fsyntax-only -std=c11 $(WARNINGS) -Iir -Igen -I$(LLVM_DIR)/include $(GEN_SRCS) gen/main.c

# out/: the committed emitted programs of the examples, so that every change
# to generated code shows in review; tests/out_test.sh fails when it is stale.
out: bin/lynxgen
	bin/lynxgen examples/tiny.model --target cpu -o out/tiny-cpu > /dev/null
	bin/lynxgen examples/gpt13b.model -o out/gpt13b-cuda > /dev/null
	rm out/gpt13b-cuda/trace.json # 7 MB of timeline; manifest.txt still holds its SHA-256

# The recompute policies on the GPT configurations (bench/lynx_policies.c).
$(BUILD)/bench/lynx_policies: bench/lynx_policies.c $(GEN_OBJS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(GEN_OBJS) $(LDLIBS)

bench-lynx: $(BUILD)/bench/lynx_policies
	$(BUILD)/bench/lynx_policies

# Registers, shared memory and spills of the CUDA kernels (fails on a spill).
bench-cuda:
	bench/cuda_resource_usage.sh

# The step rolled into loops against --unrolled-step: lines and compile time of a large stage.
bench-step:
	bench/step_compile_time.sh

include tests/tests.mk

format:
	clang-format -i $(GEN_SRCS) gen/main.c gen/*.h ir/*.h tests/*.c tests/fuzz/*.c

clean:
	rm -rf $(BUILD) bin
