#!/usr/bin/env bash
# Every header of the emitted programs' runtime compiles on its own after a
# stage file's definitions: it includes what it uses. A header that used a
# name of another without including it could only be read after that other
# one, and the two would need each other (lx_loop.h and the lx_resume.h it
# included halfway did, until both used what lx_stage.h, lx_command_line.h
# and lx_weights.h now hold). The headers that need no stage file are also
# compiled alone, as C++17 (tests/runtime/rules.mk).
#
# The stage files are out/'s CPU programs: GPT (tiny-cpu), fine-tuning
# (tiny-lora-cpu, FINETUNE) and PipeDream-2BW (tiny-2bw-cpu, STEPS_OVERLAP),
# up to the line that includes the target's main, then what that main
# defines before it includes lx_loop.h, then one header. A name used and not
# declared is an error; warnings are not, since a part alone leaves static
# functions unused or declared and not defined.
set -u
cd "$(dirname "$0")/.."
. tests/tap.sh # $tmp, pass, fail

flags="-std=c11 -fsyntax-only -fopenmp -Werror=implicit-function-declaration -Werror=implicit-int"
for program in tiny-cpu tiny-lora-cpu tiny-2bw-cpu; do
  stage=out/$program/stage0.c
  if ! grep -q '^#include "lx_main.h"$' "$stage"; then
    fail "$stage includes lx_main.h" "$(grep -c '#include' "$stage") includes"
    continue
  fi
  prefix=$tmp/$program-prefix.c
  sed '/^#include "lx_main.h"$/,$d' "$stage" >"$prefix"
  sed -n '/^#define LX_MAIN_H$/,/^#include "lx_loop.h"$/p' templates/cpu/lx_main.h | sed '1d;$d' >>"$prefix"
  for header in templates/common/lx_*.h templates/cpu/lx_*.h; do
    name=$(basename "$header")
    unit=$tmp/$program-$name.c
    { cat "$prefix"; echo "#include \"$name\""; } >"$unit"
    # shellcheck disable=SC2086 # the flags are words
    if errors=$(mpicc $flags -Itemplates/common -Itemplates/cpu "$unit" 2>&1); then
      pass "$name compiles on its own after $stage"
    else
      fail "$name compiles on its own after $stage" "$(grep -m 3 'error:' <<<"$errors")"
    fi
  done
done
exit $((failures > 0))
