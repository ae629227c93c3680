# The runtime of the emitted programs (templates/cpu/lx_runtime.h and the
# lx_*.h headers it includes, templates/common's shared with the CUDA
# programs) and `lynxgen tokenize`.
#   runtime_test          single-process checks: loader, checkpoints, options,
#                         metrics (error paths run as child processes)
#   runtime_mpi_test.sh   the checks that need mpirun (2-rank checkpoint round
#                         trip, tags, wrong world size, MPI errors) and
#                         `lynxgen tokenize`
# Compiled by mpicc, checked by clang with every warning an error.

MPICC ?= mpicc
CXX ?= g++
RUNTIME_HEADERS := $(wildcard templates/cpu/lx_*.h templates/common/lx_*.h)
RUNTIME_TEST_CFLAGS := -std=c11 -O2 -g $(WARNINGS) -Itemplates/cpu -Itemplates/common -Itests
# templates/common is host C++ in the CUDA programs (nvcc's host compiler):
# each header there is standard C++17 too (-pedantic-errors: no C-only
# compound literals or designated initializers), with every warning an error;
# all but lx_stage.h and those that include it, which need a stage file (the
# CUDA emit test builds one).
STAGE_HEADERS := $(addprefix templates/common/,lx_stage.h lx_command_line.h lx_weights.h lx_resume.h lx_loop.h)
COMMON_CXX_HEADERS := $(filter-out $(STAGE_HEADERS),$(wildcard templates/common/lx_*.h))
MPI_SYSTEM_INCLUDES := $(patsubst -I%,-isystem %,$(shell $(MPICC) --showme:compile 2>/dev/null))

$(BUILD)/tests/runtime_test: tests/runtime/runtime_test.c $(RUNTIME_HEADERS) tests/check.h
	@mkdir -p $(@D)
	clang -fsyntax-only $(RUNTIME_TEST_CFLAGS) $(shell $(MPICC) --showme:compile 2>/dev/null) $<
	for h in $(COMMON_CXX_HEADERS); do \
	  $(CXX) -std=c++17 -fsyntax-only -Wall -Wextra -Werror -pedantic-errors $(MPI_SYSTEM_INCLUDES) -x c++ $$h || exit 1; \
	done
	$(MPICC) $(RUNTIME_TEST_CFLAGS) -o $@ $< -lcjson -lm

# The script runs the program above and bin/lynxgen: both must exist first.
tests/runtime/runtime_mpi_test.sh: $(BUILD)/tests/runtime_test bin/lynxgen

TEST_PROGRAMS += $(BUILD)/tests/runtime_test tests/runtime/runtime_mpi_test.sh
