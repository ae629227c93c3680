# Test programs. tests/unit/test_*.c are linked against the generator's
# objects; tests/*_test.sh and tests/*_test.py are scripts. Other fragments
# (tests/*/rules.mk) add their programs to TEST_PROGRAMS.

UNIT_SRCS := $(wildcard tests/unit/test_*.c)
UNIT_BINS := $(UNIT_SRCS:tests/unit/%.c=$(BUILD)/tests/%)
TEST_PROGRAMS := $(UNIT_BINS) $(sort $(wildcard tests/*_test.sh tests/*_test.py))

$(BUILD)/tests/%: tests/unit/%.c $(GEN_OBJS) tests/check.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Itests -o $@ $< $(GEN_OBJS) $(LDLIBS) -lm

-include $(wildcard tests/*/rules.mk)

# The slowest programs start first (stop 40, seconds each alone on 2 cores: 290,
# 215, 140, 100, 95, 65, 60), so that the ones run side by side (tests/run.sh)
# end together instead of one long program running alone at the end.
SLOW_TESTS := tests/cuda_emit_test.sh tests/cpu_training_test.py tests/schedules_test.py tests/gpu_kit_test.sh \
	tests/cuda/cudnn_attention_test.sh tests/lora_test.py tests/mini_sequences_test.py

test: bin/lynxgen check-clang $(TEST_PROGRAMS)
	@tests/run.sh $(SLOW_TESTS) $(filter-out $(SLOW_TESTS),$(TEST_PROGRAMS))
