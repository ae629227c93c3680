# The front-end fuzzer (tests/fuzz/fuzz_frontend.c), built with clang's
# libFuzzer and AddressSanitizer + UndefinedBehaviorSanitizer. The generator
# sources are compiled again with the same instrumentation into
# $(BUILD)/fuzz/; libclang itself is not instrumented.
#   make test   runs tests/fuzz/fuzz_smoke.sh: the regressions, then ~30 s
#   make fuzz   fuzzes for FUZZ_SECONDS (default 600) into tests/fuzz/corpus-run/

FUZZ_CC ?= clang
FUZZ_DIR := $(BUILD)/fuzz
FUZZ_SANITIZE := -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
FUZZ_CFLAGS := -O1 -g -fno-omit-frame-pointer $(FUZZ_SANITIZE) -std=c11 $(WARNINGS) -Iir -Igen -I$(LLVM_DIR)/include
FUZZ_OBJS := $(GEN_SRCS:%.c=$(FUZZ_DIR)/%.o) $(FUZZ_DIR)/prelude.o
FUZZ_BIN := $(FUZZ_DIR)/fuzz_frontend
FUZZ_SECONDS ?= 600

$(FUZZ_DIR)/%.o: %.c $(wildcard ir/*.h gen/*.h)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c -o $@ $<

$(FUZZ_DIR)/prelude.o: $(BUILD)/prelude.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c -o $@ $<

$(FUZZ_BIN): tests/fuzz/fuzz_frontend.c $(FUZZ_OBJS)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $^ $(LDLIBS) -lm

# The smoke test runs the fuzzer named by FUZZ_BIN in its environment.
export FUZZ_BIN
TEST_PROGRAMS += tests/fuzz/fuzz_smoke.sh
test: $(FUZZ_BIN)

fuzz: $(FUZZ_BIN)
	@mkdir -p tests/fuzz/corpus-run
	$(FUZZ_BIN) -max_total_time=$(FUZZ_SECONDS) -timeout=30 -dict=tests/fuzz/model.dict \
	  -artifact_prefix=tests/fuzz/corpus-run/ tests/fuzz/corpus-run examples tests/diag tests/fuzz/regressions
