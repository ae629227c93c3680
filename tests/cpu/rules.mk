# The CPU kernels of the emitted training programs (templates/cpu/*.h).
#   cpu_kernels_test        every backward but attention's against finite differences, in double
#   cpu_attention_test      the attention kernels and rope, the same way
#   cpu_kernels_float_test  the float build the emitted programs use
# Both are compiled by gcc (or $(CC)) and checked by clang with every warning
# an error; they need OpenBLAS and OpenMP.

CPU_KERNEL_HEADERS := $(wildcard templates/cpu/*.h templates/common/*.h)
CPU_TEST_DEPS := $(CPU_KERNEL_HEADERS) $(wildcard tests/cpu/*.h) tests/check.h
CPU_TEST_CFLAGS := -std=c11 -O2 -g $(WARNINGS) -fopenmp -Itemplates/cpu -Itemplates/common -Itests -Itests/cpu
CPU_TEST_LIBS := -lopenblas -lm

CPU_DOUBLE_TESTS := $(BUILD)/tests/cpu_kernels_test $(BUILD)/tests/cpu_attention_test

$(CPU_DOUBLE_TESTS): $(BUILD)/tests/%: tests/cpu/%.c $(CPU_TEST_DEPS)
	@mkdir -p $(@D)
	clang -fsyntax-only $(CPU_TEST_CFLAGS) -DLX_DOUBLE $<
	$(CC) $(CPU_TEST_CFLAGS) -DLX_DOUBLE -o $@ $< $(CPU_TEST_LIBS)

$(BUILD)/tests/cpu_kernels_float_test: tests/cpu/cpu_kernels_float_test.c $(CPU_TEST_DEPS)
	@mkdir -p $(@D)
	clang -fsyntax-only $(CPU_TEST_CFLAGS) $<
	$(CC) $(CPU_TEST_CFLAGS) -o $@ $< $(CPU_TEST_LIBS)

TEST_PROGRAMS += $(CPU_DOUBLE_TESTS) $(BUILD)/tests/cpu_kernels_float_test
