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

test: bin/lynxgen check-clang $(TEST_PROGRAMS)
	@tests/run.sh $(TEST_PROGRAMS)
