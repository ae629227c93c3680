#!/usr/bin/env bash
# The emitted Makefiles' `make clean` removes what make built, by name, and
# no file of the user's beside it (the output directory is theirs to add to:
# notes, logs, a `my-check` or a `results.o`). Nothing is compiled: the built
# files are stand-ins, so this runs anywhere.
set -u
cd "$(dirname "$0")/.."
. tests/tap.sh # $tmp, pass, fail

sed 's/= attention(/= flash_attention(/' examples/tiny.model >"$tmp/flash.model"
users="my-check my-gradcheck results.o notes.txt"
# TARGET-NAME LYNXGEN-ARGS | BUILT-FILES
while IFS='|' read -r name args built; do
  out=$tmp/$name
  # shellcheck disable=SC2086 # the arguments are words
  bin/lynxgen $args -o "$out" >/dev/null || fail "lynxgen writes the $name program"
  for f in $built $users; do echo made >"$out/$f"; done
  make -s -C "$out" clean >/dev/null 2>&1 || fail "make clean runs ($name)"
  left="" lost=""
  for f in $built; do [ -e "$out/$f" ] && left="$left $f"; done
  for f in $users; do [ -e "$out/$f" ] || lost="$lost $f"; done
  if [ -z "$left" ]; then pass "make clean removes what make built ($name)"
  else fail "make clean removes what make built ($name)" "left:$left"; fi
  if [ -z "$lost" ]; then pass "make clean keeps the user's files ($name)"
  else fail "make clean keeps the user's files ($name)" "removed:$lost"; fi
done <<LIST
cpu|examples/tiny.model --target cpu|stage0 stage1 stage0-check stage1-check stage0-gradcheck stage1-gradcheck
cuda|examples/tiny.model --tp 1 --dp 1|stage0 stage1 stage0.o stage1.o lx_kernels.o
cuda-flash|$tmp/flash.model --tp 1 --dp 1|stage0 stage1 stage0.o stage1.o lx_kernels.o lx_kernels_cudnn.o lx_cuda_cudnn_attention.o
LIST
[ "$failures" -eq 0 ]
