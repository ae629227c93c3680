#!/usr/bin/env bash
# The diagnostics of bin/lynxgen, end to end.
#
# Every tests/diag/*.model holds one mistake and states, in its first line,
#   // expect: LINE:COL: error: TEXT
# the position of the mistake (counted by hand) and a part of the message,
# and in lines that follow it, the notes that must come with it:
#   // expect-note: LINE:COL: note: TEXT        (a place in the model file)
#   // expect-note: PATH:LINE:COL: note: TEXT   (elsewhere, e.g. tests/diag/include/)
#   // expect-errors: N                         (no more errors than that, no echo)
# For each, lynxgen must exit 1, report FILE:LINE:COL: error: ...TEXT...,
# locate every error it prints in FILE (also one written in an included
# header or a macro), print nothing on stdout and leave no output directory
# behind. Then: usage errors exit 2, command-line overrides are
# checked like the model file's values, the near misses in
# tests/diag/valid/ are accepted, those in tests/diag/warn/ with the one
# warning they state (// expect-warning: LINE:COL: warning: TEXT) (the
# output directory: output_dir_test.sh). Prints one "ok - " or "not ok - "
# line per check.
set -u
cd "$(dirname "$0")/.."
LYNXGEN=bin/lynxgen
EXAMPLE=examples/gpt13b.model
. tests/tap.sh # $tmp, pass, fail

# Runs lynxgen with the given arguments; sets $status, $out (stdout), $err.
run_lynxgen() {
  "$LYNXGEN" "$@" >"$tmp/stdout" 2>"$tmp/stderr"
  status=$?
  out=$(cat "$tmp/stdout")
  err=$(cat "$tmp/stderr")
}

# Nothing of a run that failed may be left: neither DIR nor its hidden staging copy.
no_output_left() { [ ! -e "$1" ] && ! ls -A "$(dirname "$1")" | grep -q "^\.$(basename "$1")\.lynxgen-"; }

# Every "error:" line either carries FILE:LINE:COL or is the closing count.
all_errors_located() {
  local file=$1 line
  while IFS= read -r line; do
    case "$line" in
      "$file":[0-9]*:[0-9]*": error: "* | "lynxgen: "[0-9]*" error"*) ;;
      *"error:"*) return 1 ;;
    esac
  done <<<"$err"
}

# ---- one model file per diagnostic ------------------------------------------

# The expected notes of a case that are missing from $err, one per line.
missing_notes() {
  local file=$1 want where text
  while IFS= read -r want; do
    where=${want%%: note: *}
    text=${want#*: note: }
    [[ $where =~ ^[0-9]+:[0-9]+$ ]] && where="$file:$where"
    grep -F -- "$where: note: " <<<"$err" | grep -qF -- "$text" || echo "$want"
  done < <(sed -n 's|^// expect-note: ||p' "$file")
}

check_diag_file() {
  local file=$1 name expect errors loc text
  name=$(basename "$file" .model)
  expect=$(sed -n '1s|^// expect: ||p' "$file")
  errors=$(sed -n 's|^// expect-errors: ||p' "$file")
  loc=${expect%%: error: *}
  text=${expect#*: error: }
  if [ -z "$expect" ] || [ "$loc" = "$expect" ] || ! [[ $loc =~ ^[0-9]+:[0-9]+$ ]]; then
    fail "$name: first line is '// expect: LINE:COL: error: TEXT'" "$(head -1 "$file")"
    return
  fi
  rm -rf "$tmp/out"
  run_lynxgen "$file" -o "$tmp/out"
  local at_loc
  at_loc=$(grep -F -- "$file:$loc: error: " <<<"$err" | grep -F -- "$text")
  if [ "$status" -ne 1 ]; then
    fail "$name: exit status 1" "exit $status" "$err"
  elif [ -z "$at_loc" ]; then
    fail "$name: error at $loc naming '$text'" "$err"
  elif ! all_errors_located "$file"; then
    fail "$name: every error is located" "$err"
  elif [ -n "$(missing_notes "$file")" ]; then
    fail "$name: notes $(missing_notes "$file" | tr '\n' ' ')" "$err"
  elif [ -n "$errors" ] && [ "$(grep -c ': error: ' <<<"$err")" != "$errors" ]; then
    fail "$name: $errors error(s)" "$err"
  elif [ -n "$out" ]; then
    fail "$name: nothing on stdout" "$out"
  elif ! no_output_left "$tmp/out"; then
    fail "$name: no output directory left behind" "$(ls -a "$tmp")"
  else
    pass "$name: exit 1, $file:$loc: error: ...$text..."
  fi
}

diag_files=(tests/diag/*.model)
if [ ${#diag_files[@]} -lt 30 ] || [ ! -e "${diag_files[0]}" ]; then
  fail "tests/diag holds the diagnostic cases" "${#diag_files[@]} files"
fi
for file in "${diag_files[@]}"; do
  [ -e "$file" ] && check_diag_file "$file"
done

# Near misses that are not mistakes (tests/diag/valid/) must stay accepted,
# and their IR must be JSON (no nan or inf in it).
for file in tests/diag/valid/*.model; do
  [ -e "$file" ] || continue
  run_lynxgen "$file" --dump-ir
  if [ "$status" -ne 0 ] || [ -n "$err" ]; then
    fail "accepted: $(basename "$file" .model)" "exit $status" "$err"
  elif ! python3 -c 'import json, sys; json.load(sys.stdin)' <"$tmp/stdout" 2>"$tmp/json-error"; then
    fail "accepted: $(basename "$file" .model), its IR is JSON" "$(cat "$tmp/json-error")"
  else
    pass "accepted: $(basename "$file" .model), its IR is JSON"
  fi
done

# Valid but likely not meant (tests/diag/warn/): accepted (exit 0), with the
# one warning its first line states, at that place, and nothing else on stderr.
for file in tests/diag/warn/*.model; do
  [ -e "$file" ] || continue
  want=$(sed -n 's|^// expect-warning: ||p' "$file")
  run_lynxgen "$file" --plan
  if [ "$status" -ne 0 ] || [ "$(wc -l <"$tmp/stderr")" -ne 1 ] || [[ "$err" != "$file:$want"* ]]; then
    fail "warned: $(basename "$file" .model)" "exit $status, want $file:$want" "$err"
  else
    pass "warned: $(basename "$file" .model): $err"
  fi
done

# ---- usage errors: exit 2, nothing written ----------------------------------

check_usage() {
  local what=$1 want=$2
  shift 2
  rm -rf "$tmp/out"
  run_lynxgen "$@"
  if [ "$status" -ne 2 ]; then
    fail "usage error ($what): exit 2" "exit $status" "$err"
  elif ! grep -qF -- "$want" <<<"$err"; then
    fail "usage error ($what): message names '$want'" "$err"
  elif ! no_output_left "$tmp/out"; then
    fail "usage error ($what): no output directory" "$(ls -a "$tmp")"
  else
    pass "usage error ($what): exit 2, '$want'"
  fi
}

check_usage "no model file" "no model file" -o "$tmp/out"
check_usage "unknown option" "misused option '--bogus'" "$EXAMPLE" --bogus -o "$tmp/out"
# in a cluster the letter is named, not the argument before it
check_usage "unknown letter in -vq" "misused option '-v'" "$EXAMPLE" -vq -o "$tmp/out"
check_usage "a value for --plan" "misused option '--plan=yes'" "$EXAMPLE" --plan=yes
check_usage "--tp abc" "--tp needs a positive integer (at most 2147483647), got 'abc'" "$EXAMPLE" --tp abc -o "$tmp/out"
check_usage "--tp 0" "--tp needs a positive integer (at most 2147483647), got '0'" "$EXAMPLE" --tp 0 -o "$tmp/out"
check_usage "--tp 99999999999" "--tp needs a positive integer (at most 2147483647), got '99999999999'" "$EXAMPLE" \
  --tp 99999999999 -o "$tmp/out"
check_usage "--schedule bogus" "unknown schedule 'bogus'" "$EXAMPLE" --schedule bogus -o "$tmp/out"
check_usage "-o without a value" "needs a value" "$EXAMPLE" -o
check_usage "two model files" "more than one model file" "$EXAMPLE" "$EXAMPLE" -o "$tmp/out"
check_usage "nothing to do" "nothing to do" "$EXAMPLE"
# both print on stdout, the IR as JSON: together neither would parse
check_usage "--dump-ir with --plan --json" "--dump-ir and --plan both print on stdout" "$EXAMPLE" --dump-ir --plan --json

# ---- command-line overrides are diagnosed like the model file's values ------

check_override() {
  local what=$1 want1=$2 want2=$3
  shift 3
  rm -rf "$tmp/out"
  run_lynxgen "$EXAMPLE" "$@" -o "$tmp/out"
  if [ "$status" -ne 1 ]; then
    fail "override $what: exit 1" "exit $status" "$err"
  elif ! grep -F -- "$want1" <<<"$err" | grep -qF -- "$want2"; then
    fail "override $what: message names '$want1' and '$want2'" "$err"
  elif ! grep -qF -- "command line $1" <<<"$err"; then
    fail "override $what: the error points at the command line" "$err"
  elif ! no_output_left "$tmp/out"; then
    fail "override $what: no output directory" "$(ls -a "$tmp")"
  else
    pass "override $what: exit 1, '$want1 ... $want2'"
  fi
}

check_override "--tp 3 on 16 heads" "tp (3)" "heads (16)" --tp 3
check_override "--pp 48 on 24 layers" "layers (24)" "pp = 48" --pp 48
check_override "--global-batch 100" "global_batch (100)" "micro_batch x dp" --global-batch 100
check_override "--micro-batch 65537" "field '.micro_batch' = 65537" "out of range [0, 65536]" --micro-batch 65537
check_override "--tp 128" "field '.tp' = 128" "out of range [0, 64]" --tp 128
check_override "--pp 4097" "field '.pp' = 4097" "out of range [0, 4096]" --pp 4097
check_override "--virtual-stages 9" "field '.virtual_stages' = 9" "out of range [0, 8]" --virtual-stages 9 \
  --schedule interleaved
check_override "--virtual-stages 3 under 1f1b" "virtual_stages (3)" "schedule interleaved" --virtual-stages 3
check_override "--virtual-stages 1 under interleaved" "schedule interleaved needs virtual_stages of 2 or more" \
  "(it is 1)" --virtual-stages 1 --schedule interleaved
# A relation broken by an override points at the override, not at the model file's field it
# no longer fits (the file's global_batch 512, pp 4 and 8 GPUs).
check_override "--micro-batch 3 against the file's global_batch" "global_batch (512)" "micro_batch x dp (6)" \
  --micro-batch 3
check_override "--dp 4 on 8 GPUs" "tp x pp x dp = 1 x 4 x 4" "needs 16 GPUs" --dp 4
check_override "--schedule interleaved on 5 micro-batches" "groups of pp" "5 micro-batches" --schedule interleaved \
  --global-batch 40

# Every override given twice (more than there are fields): the last of each wins.
plan=$(bin/lynxgen "$EXAMPLE" --plan --tp 1 --pp 1 --dp 1 --micro-batch 1 --global-batch 8 --schedule gpipe \
  --sequence-parallel --zero --tp 2 --pp 2 --dp 2 --micro-batch 2 --global-batch 16 --schedule 1f1b 2>&1)
if grep -q "^plan *tp 2 x pp 2 x dp 2, micro-batch 2, 4 micro-batches per iteration, 1f1b" <<<"$plan"; then
  pass "each override given twice: the last value of each applies"
else
  fail "each override given twice: the last value of each applies" "$(head -5 <<<"$plan")"
fi

# A model file that cannot be read is reported by name.
run_lynxgen "$tmp/no-such.model" -o "$tmp/out"
if [ "$status" -ne 0 ] && grep -qF "$tmp/no-such.model" <<<"$err" && no_output_left "$tmp/out"; then
  pass "a missing model file is reported by name, nothing written"
else
  fail "a missing model file is reported by name, nothing written" "exit $status" "$err"
fi

# ---- what a diagnostic quotes of its input ----------------------------------

# The fields of a profile line are quoted in its errors: an escape sequence in
# one (retitling the window, clearing the screen; ESC, BEL, the 8-bit CSI 0x9b)
# reaches the terminal as \xNN, never as the bytes, and a field of 5000 bytes
# is quoted cut short.
{
  printf 'op linear 128 64 192 fp32 1 1 \033]0;PWNED\007\033[2J\n'
  printf 'bogus\2333J 1\n'
  head -c 5000 /dev/zero | tr '\0' x
  echo ' 1'
} >"$tmp/escape.profile"
run_lynxgen examples/tiny.model --plan --profile "$tmp/escape.profile"
what="a profile's fields quoted in its errors"
if [ "$status" -ne 1 ] || LC_ALL=C grep -qP '[\x00-\x09\x0b-\x1f\x7f-\xff]' "$tmp/stderr"; then
  fail "$what: exit 1, no control byte or byte past ASCII on stderr" "exit $status" "$(cat -v "$tmp/stderr")"
elif ! grep -qF "unknown attribute '\x1b]0;PWNED\x07\x1b[2J'" <<<"$err" ||
  ! grep -qF "unknown directive 'bogus\x9b3J'" <<<"$err"; then
  fail "$what: control bytes as \xNN" "$err"
elif ! grep -qE "unknown directive 'x{64}\.\.\.' " <<<"$err" || [ "$(wc -L <"$tmp/stderr")" -gt 200 ]; then
  fail "$what: a field of 5000 bytes cut short" "$(cut -c1-300 "$tmp/stderr")"
else
  pass "$what: control bytes as \xNN, a field of 5000 bytes cut short"
fi

[ "$failures" -eq 0 ]
