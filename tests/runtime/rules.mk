# The runtime of the emitted CPU programs (templates/cpu/lx_runtime.h and the
# lx_*.h headers it includes) and `lynxgen tokenize`.
#   runtime_test          single-process checks: loader, checkpoints, options,
#                         metrics (error paths run as child processes)
#   runtime_mpi_test.sh   the checks that need mpirun (2-rank checkpoint round
#                         trip, tags, wrong world size, MPI errors) and
#                         `lynxgen tokenize`
# Compiled by mpicc, checked by clang with every warning an error.

MPICC ?= mpicc
RUNTIME_HEADERS := $(wildcard templates/cpu/lx_*.h)
RUNTIME_TEST_CFLAGS := -std=c11 -O2 -g $(WARNINGS) -Itemplates/cpu -Itests

$(BUILD)/tests/runtime_test: tests/runtime/runtime_test.c $(RUNTIME_HEADERS) tests/check.h
	@mkdir -p $(@D)
	clang -fsyntax-only $(RUNTIME_TEST_CFLAGS) $(shell $(MPICC) --showme:compile 2>/dev/null) $<
	$(MPICC) $(RUNTIME_TEST_CFLAGS) -o $@ $< -lm

# The script runs the program above and bin/lynxgen: both must exist first.
tests/runtime/runtime_mpi_test.sh: $(BUILD)/tests/runtime_test bin/lynxgen

TEST_PROGRAMS += $(BUILD)/tests/runtime_test tests/runtime/runtime_mpi_test.sh
