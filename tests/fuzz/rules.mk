# The fuzzers, built with clang's libFuzzer and AddressSanitizer +
# UndefinedBehaviorSanitizer (tests/fuzz/README.md):
#   fuzz_frontend  the front end and the analysis (tests/fuzz/fuzz_frontend.c)
#   fuzz_plan      the same, then the plan pipeline and the printers (tests/fuzz/fuzz_plan.c)
# Both mutate model files with the structure-aware mutator (model_mutator.c).
# The generator sources are compiled again with the same instrumentation
# into $(BUILD)/fuzz/; libclang itself is not instrumented.
#   make test   runs tests/fuzz/fuzz_smoke.sh: the known inputs, then a short run of each
#   make fuzz   fuzzes each for FUZZ_SECONDS (default 600), or FUZZ_RUNS inputs when set
#               (tests/fuzz/fuzz_campaign.sh), into tests/fuzz/corpus-run/<fuzzer>/, and
#               prints the executions and findings

FUZZ_CC ?= clang
FUZZ_DIR := $(BUILD)/fuzz
FUZZ_SANITIZE := -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
FUZZ_WARNINGS := -O1 -g -fno-omit-frame-pointer -std=c11 $(WARNINGS) -Iir -Igen -Itemplates/cuda -Itests/fuzz \
  -I$(LLVM_DIR)/include
FUZZ_CFLAGS := $(FUZZ_WARNINGS) $(FUZZ_SANITIZE)
FUZZ_OBJS := $(GEN_SRCS:%.c=$(FUZZ_DIR)/%.o) $(FUZZ_DIR)/prelude.o
# The mutator runs between inputs: sanitized, but without coverage counters.
FUZZ_MUTATOR_SRCS := $(addprefix tests/fuzz/,model_scan.c mutate_fields.c mutate_ops.c mutate_options.c \
  model_mutator.c model_crossover.c)
FUZZ_MUTATOR_OBJS := $(FUZZ_MUTATOR_SRCS:%.c=$(FUZZ_DIR)/%.o)
FUZZ_COMMON_OBJS := $(FUZZ_OBJS) $(FUZZ_MUTATOR_OBJS) $(FUZZ_DIR)/tests/fuzz/fuzz_model.o
FUZZ_BIN := $(FUZZ_DIR)/fuzz_frontend
FUZZ_PLAN_BIN := $(FUZZ_DIR)/fuzz_plan
FUZZ_SECONDS ?= 600
FUZZ_RUNS ?=
FUZZ_HEADERS := $(wildcard ir/*.h gen/*/*.h tests/fuzz/*.h)

$(FUZZ_DIR)/%.o: %.c $(FUZZ_HEADERS)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c -o $@ $<

$(FUZZ_MUTATOR_OBJS): $(FUZZ_DIR)/%.o: %.c $(FUZZ_HEADERS)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_WARNINGS) -fsanitize=address,undefined -fno-sanitize-recover=undefined -c -o $@ $<

$(FUZZ_DIR)/prelude.o: $(BUILD)/prelude.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c -o $@ $<

$(FUZZ_BIN): $(FUZZ_DIR)/tests/fuzz/fuzz_frontend.o $(FUZZ_COMMON_OBJS)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $^ $(LDLIBS) -lm

$(FUZZ_PLAN_BIN): $(addprefix $(FUZZ_DIR)/tests/fuzz/,fuzz_plan.o fuzz_plan_options.o fuzz_emit.o) $(FUZZ_COMMON_OBJS)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $^ $(LDLIBS) -lm

# The smoke test runs the fuzzers named by FUZZ_BIN and FUZZ_PLAN_BIN.
export FUZZ_BIN FUZZ_PLAN_BIN
TEST_PROGRAMS += tests/fuzz/fuzz_smoke.sh
test: $(FUZZ_BIN) $(FUZZ_PLAN_BIN)

# the two campaigns run side by side, one core each
fuzz: $(FUZZ_BIN) $(FUZZ_PLAN_BIN)
	@tests/fuzz/fuzz_campaign.sh $(FUZZ_BIN) $(FUZZ_SECONDS) $(FUZZ_RUNS) & front=$$!; \
	tests/fuzz/fuzz_campaign.sh $(FUZZ_PLAN_BIN) $(FUZZ_SECONDS) $(FUZZ_RUNS); plan=$$?; \
	wait $$front && [ $$plan -eq 0 ]
