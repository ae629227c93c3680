#!/usr/bin/env bash
# lynxgen's time and memory are bounded whatever it is given (issue 19):
# - a model file, an included file or a --profile that is a device
#   (/dev/zero), a FIFO or a directory is refused at once (exit 1), never read
#   forever; so is one over 1 MiB; so is every other way a directive could
#   read a file (#include of a macro, #import, #include_next, #embed, an
#   absolute <path>, __has_include, comments, splices, trigraphs and
#   digraphs in #include) or crash clang (#pragma clang __debug, _Pragma);
# - a plan of more micro-batches per step than lynxgen schedules (a
#   global_batch of 2^20) is refused with the limit named, not planned for
#   minutes in gigabytes; so is a block of more than 1023 statements or more
#   than 64 ops (the recompute planner's op sets are 64-bit masks); one of
#   64 ops (whose first backward accesses more than the verifier first made
#   room for) is planned, verified and written;
# - a micro-batch of more tokens than an int counts is refused, located; a
#   (B, T, C) past int's range (2^31 elements) makes stage files that compile;
# - the plan search stops at its time budget (--search-time) and its memory
#   budget (--max-memory), says so, names the best plan it had found and
#   exits 1;
# - under a small `ulimit -v`, running out of memory is one clean error
#   (exit 1), not a crash.
# Every run has a 30 s timeout (a hang is forever; the longest run here takes
# 3 s of CPU) and a 4 GB address-space limit, so that a hang or a runaway
# fails the test instead of the machine. One "ok - " or
# "not ok - " line per check.
set -u
cd "$(dirname "$0")/.."
LYNXGEN=${LYNXGEN:-$PWD/bin/lynxgen}
. tests/tap.sh # $tmp, pass, fail

# Runs lynxgen with the given arguments under the limits; sets $status and $err.
run_lynxgen() {
  (ulimit -v "${LIMIT_KB:-4000000}" && exec timeout 30 "$LYNXGEN" "$@") >"$tmp/stdout" 2>"$tmp/stderr"
  status=$?
  err=$(cat "$tmp/stderr")
}

# expect_error NAME PATTERN: exit 1 within the limits, and stderr matches PATTERN.
expect_error() {
  if [ "$status" -eq 1 ] && grep -qE "$2" <<<"$err"; then pass "$1"; else fail "$1" "exit $status" "$err"; fi
}

# ---- files that are not model files --------------------------------------------

run_lynxgen /dev/zero --plan
expect_error "/dev/zero as the model file: refused at once" "^/dev/zero: error: the model file is a device"
mkfifo "$tmp/fifo"
run_lynxgen "$tmp/fifo" --plan
expect_error "a FIFO as the model file: refused, not waited on" "fifo: error: the model file is a FIFO"
run_lynxgen "$tmp" --plan
expect_error "a directory as the model file: refused" "error: the model file is a directory"
head -c $((1024 * 1024 + 1)) /dev/zero | tr '\0' ' ' >"$tmp/huge.model"
run_lynxgen "$tmp/huge.model" --plan
expect_error "a model file over 1 MiB: refused with the limit" "is 1048577 bytes; .* at most 1048576"

# includes: the quoted name of an #include is checked before libclang reads it
sed 's|^#include <lynx.h>|&\n#include "/dev/zero"|' examples/tiny.model >"$tmp/zero.model"
run_lynxgen "$tmp/zero.model" --plan
expect_error "#include \"/dev/zero\": refused at the #include" "zero.model:[0-9]+:1: error: the included file '/dev/zero' is a device"
sed "s|^#include <lynx.h>|&\n#include \"fifo\"|" examples/tiny.model >"$tmp/fifo_include.model"
run_lynxgen "$tmp/fifo_include.model" --plan
expect_error "#include of a FIFO: refused at the #include" "fifo_include.model:[0-9]+:1: error: the included file 'fifo' is a FIFO"
echo '#include "self.h"' >"$tmp/self.h"
sed 's|^#include <lynx.h>|&\n#include "self.h"|' examples/tiny.model >"$tmp/self.model"
run_lynxgen "$tmp/self.model" --plan
expect_error "a header that includes itself: stops at the nesting limit" "error: includes nest more than 16 deep"

# every other way a directive could make clang read a file, or crash it, is refused at the
# directive before libclang runs: within 10 s (a FIFO read would hang), exit 1, located
at=$(($(grep -n '^#include <lynx.h>' examples/tiny.model | cut -d: -f1) + 1)) # the first inserted line
printf '#define REGULAR 1\n' >"$tmp/regular.h"
mkfifo "$tmp/a\\\" " "$tmp/$(printf '\033')[31mfifo"
# refused_at_once NAME TEXT PATTERN: TEXT (printf %b) inserted after tiny.model's #include <lynx.h>
# is refused at once with an error matching FILE:PATTERN
refused_at_once() {
  printf '%b\n' "$2" | sed '/^#include <lynx.h>/r /dev/stdin' examples/tiny.model >"$tmp/directive.model"
  (ulimit -v 4000000 && exec timeout 10 "$LYNXGEN" "$tmp/directive.model" --plan) >/dev/null 2>"$tmp/stderr"
  status=$?
  err=$(cat "$tmp/stderr")
  expect_error "$1: refused at once, located" "^$tmp/directive.model:$3"
}
refused_at_once '#include of a macro naming /dev/zero' '#define Z "/dev/zero"\n#include Z' \
  "$((at + 1)):1: error: #include takes a file name in quotes or <lynx.h>, not a macro"
refused_at_once '#import' '#import "/dev/zero"' "$at:1: error: #import is not allowed in a model file"
refused_at_once '#include_next' '#include_next "fifo"' "$at:1: error: #include_next is not allowed in a model file"
refused_at_once '#embed' '#embed "fifo"' "$at:1: error: #embed is not allowed in a model file"
refused_at_once '#include <an absolute path>' '#include </dev/zero>' "$at:1: error: #include <...> may name only <lynx.h>"
for form in '#/**/include "fifo"' '#include \\\n"fifo"' '#inc\\ \nlude "fifo"' '??=include "fifo"' \
  '%:include "fifo"' ' /* */ %: include\t"fifo" // x'; do
  refused_at_once "$(printf '%b' "$form" | tr '\n' ' '), of a FIFO" "$form" \
    "$at:[0-9]+: error: the included file 'fifo' is a FIFO"
done
refused_at_once '#include "a\" ", of a FIFO named a\" (clang reads \" as part of the name)' '#include "a\\" "' \
  "$at:1: error: the included file 'a[\\]x5c\" ' is a FIFO"
refused_at_once '#include of a FIFO named with an escape sequence' '#include "\033[31mfifo"' \
  "$at:1: error: the included file '[\\]x1b\[31mfifo' is a FIFO"
grep -q $'\033' <<<"$err" && fail "... and no control byte reaches the terminal" "$err" ||
  pass "... and no control byte reaches the terminal"
for pragma in parser_crash llvm_fatal_error; do
  refused_at_once "#pragma clang __debug $pragma" "#pragma clang __debug $pragma" "$at:1: error: this #pragma is not allowed"
done
refused_at_once '_Pragma("clang __debug parser_crash")' '_Pragma("clang __debug parser_crash")' \
  "$at:1: error: '_Pragma' is not allowed in a model file"
refused_at_once '_Pragma formed by token pasting' '#define CAT(a, b) a##b\nCAT(_Pr, agma)("clang __debug parser_crash")' \
  "$at:20: error: token pasting \(##\) is not allowed in a model file"
refused_at_once '__has_include of a FIFO' '#if __has_include("fifo")\n#endif' \
  "$at:5: error: '__has_include' is not allowed in a model file"
# what only looks like a directive, and the directives that read no file, are left to clang
printf '%s\n' '/* #include "fifo" */ // #import "fifo"' '#pragma once' '#pragma GCC diagnostic push' \
  '??=define W /* #include "fifo" */ 1' '#define S "\" #include \"fifo\""' '%:include "regular.h"' '#pragma GCC diagnostic pop' |
  sed '/^#include <lynx.h>/r /dev/stdin' examples/tiny.model >"$tmp/allowed.model"
run_lynxgen "$tmp/allowed.model" --plan
[ "$status" -eq 0 ] && pass "comments, strings, #pragma once and diagnostic, a trigraph and a digraph: planned" ||
  fail "comments, strings, #pragma once and diagnostic, a trigraph and a digraph: planned" "exit $status" "$err"

run_lynxgen examples/tiny.model --plan --profile /dev/zero
expect_error "--profile /dev/zero: refused at once" "error: the profile is a device"

# ---- plans too large to schedule ------------------------------------------------

sed 's/\.global_batch = [0-9]*/.global_batch = 1 << 20/' examples/tiny.model >"$tmp/batch.model"
run_lynxgen "$tmp/batch.model" --plan
expect_error "2^20 sequences per step in micro-batches of 2: refused, the limit named" \
  "batch.model:[0-9]+:[0-9]+: error: .* 524288 micro-batches per step; lynxgen schedules at most 4096"

gelus() { awk -v n="$1" '{print} /^tensor block\(tensor x\) \{/ {for (i = 0; i < n; i++) print "  x = gelu(x);"}' \
  examples/tiny.model; }
gelus 50 >"$tmp/gelu50.model"
run_lynxgen "$tmp/gelu50.model" --target cpu -o "$tmp/gelu50"
if [ "$status" -eq 0 ] && [ -s "$tmp/gelu50/stage1.c" ]; then
  pass "50 repeated x = gelu(x), 64 block ops: planned, verified and written (its first backward zeroes every gradient of the block)"
else
  fail "50 repeated x = gelu(x), 64 block ops: planned, verified and written (its first backward zeroes every gradient of the block)" "exit $status" "$err"
fi
gelus 52 >"$tmp/gelu52.model"
run_lynxgen "$tmp/gelu52.model" --plan
expect_error "52 repeated x = gelu(x), 65 block ops: a located error at the 65th naming the limit" \
  "gelu52.model:[0-9]+:[0-9]+: error: block\(\) holds 65 ops, its parameters included; at most 64 fit"
gelus 1100 >"$tmp/gelu1100.model"
run_lynxgen "$tmp/gelu1100.model" --plan
expect_error "1100 repeated x = gelu(x): a located error naming the limit" \
  "gelu1100.model:[0-9]+:[0-9]+: error: block\(\) has more than 1023 statements"
[ "$(wc -l <<<"$err")" -eq 2 ] && pass "... and no other error (the return it did not read is not missing)" ||
  fail "... and no other error (the return it did not read is not missing)" "$err"

# ---- sizes past int in the emitted programs ---------------------------------------

# a micro-batch of 2^32 tokens: the programs count a micro-batch's tokens in int
cat >"$tmp/tokens.model" <<'EOF'
#include <lynx.h>
static const struct lx_model model = { .vocab = 256, .seq_len = 4194304, .layers = 2, .hidden = 8, .heads = 1 };
static const struct lx_cluster cluster = { .gpu = GPU_H100_80GB, .gpus_per_node = 8 };
static const struct lx_parallel parallel = { .tp = 1, .pp = 1, .dp = 1, .micro_batch = 1024,
  .global_batch = 1024, .schedule = SCHEDULE_1F1B };
tensor prologue(tensor tokens) { return embedding(tokens, 256, 8); }
tensor block(tensor x) { return add(x, linear(gelu(linear(layernorm(x), 8)), 8)); }
tensor epilogue(tensor x, tensor targets) { return cross_entropy(lm_head(layernorm(x), 256), targets); }
EOF
run_lynxgen "$tmp/tokens.model" --plan
expect_error "a micro-batch of 2^32 tokens: a located error naming the int limit" \
  "tokens.model:4:[0-9]+: error: micro_batch x seq_len = 1024 x 4194304 is 4294967296 tokens per micro-batch"
# (B, T, C) = 16 x 16384 x 8192 = 2^31 elements cross the stage boundary: an enum constant cannot hold
# them; the stage files compile (-Werror) all the same
cat >"$tmp/wide.model" <<'EOF'
#include <lynx.h>
static const struct lx_model model = { .vocab = 256, .seq_len = 16384, .layers = 2, .hidden = 8192, .heads = 64 };
static const struct lx_cluster cluster = { .gpu = GPU_H100_80GB, .gpus_per_node = 8 };
static const struct lx_parallel parallel = { .tp = 1, .pp = 2, .dp = 1, .micro_batch = 16, .global_batch = 32,
  .schedule = SCHEDULE_1F1B };
tensor prologue(tensor tokens) { return add(embedding(tokens, 256, 8192), position_embedding(tokens, 8192)); }
tensor block(tensor x) {
  x = add(x, linear(attention(linear(layernorm(x), 24576), 64, 64), 8192));
  return add(x, linear(gelu(linear(layernorm(x), 32768)), 8192));
}
tensor epilogue(tensor x, tensor targets) { return cross_entropy(lm_head(layernorm(x), 256), targets); }
EOF
run_lynxgen "$tmp/wide.model" -o "$tmp/wide" --target cpu --allow-oom-plan
if [ "$status" -eq 0 ] && (cd "$tmp/wide" && mpicc -std=c11 -fopenmp -fsyntax-only -Wall -Wextra -Werror \
  stage0.c stage1.c) >"$tmp/cc.log" 2>&1; then
  pass "a (B, T, C) of 2^31 elements: the CPU stage files compile"
else
  fail "a (B, T, C) of 2^31 elements: the CPU stage files compile" "exit $status" "$err" "$(head -5 "$tmp/cc.log")"
fi

# ---- the plan search's budgets ---------------------------------------------------

# gpt-23b with tp, pp, dp and micro_batch open (and no --policy, mini_sequences open): 90 layouts x 4
# policies x 1, 4 or 16 pieces, 1080 candidates
grep -vE '^ *\.(tp|pp|dp|micro_batch) = ' examples/gpt-23b.model >"$tmp/open.model"
run_lynxgen "$tmp/open.model" --plan --search-time 0.5
expect_error "the search past --search-time: stops, names the best plan so far" \
  "error: the plan search's time budget \(--search-time 0.5 s\) ran out after [0-9]+ of 1080 candidates; the best found so far: (tp [0-9]+, pp [0-9]+|none)"
# below 0.25 GiB libclang cannot load (it aborted): a usage error
run_lynxgen "$tmp/open.model" --plan --max-memory 0.2
if [ "$status" -eq 2 ] && grep -qF "needs at least 0.25 GiB" <<<"$err"; then pass "--max-memory 0.2: a usage error, not an abort"
else fail "--max-memory 0.2: a usage error, not an abort" "exit $status" "$err"; fi
# 0.28 GiB of address space: enough for libclang and the parse, not for the whole search
run_lynxgen "$tmp/open.model" --plan --max-memory 0.28
expect_error "the search past --max-memory: out of memory, the budget named" "error: out of memory .*--max-memory"
grep -qE "^lynxgen: note: the (best plan the search had found: tp|plan search had found no plan)" <<<"$err" &&
  pass "... and the best plan the search had found" || fail "... and the best plan the search had found" "$err"

# ---- out of memory under the shell's limit --------------------------------------

LIMIT_KB=350000 run_lynxgen examples/gpt-23b.model --plan
expect_error "gpt-23b under ulimit -v 350 MB: one clean out-of-memory error" "^lynxgen: error: out of memory"

[ "$failures" -eq 0 ]
