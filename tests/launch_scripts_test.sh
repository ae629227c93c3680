#!/usr/bin/env bash
# The launch scripts hand every argument to every stage program exactly as the
# user wrote it (issue 15): run.sh through mpirun, run-slurm.sh through srun,
# each task running the program of its stage. srun and mpirun are replaced by
# stand-ins on PATH that run or list what they were given, and the stage
# programs by stand-ins that record their arguments, so this runs anywhere.
set -u
cd "$(dirname "$0")/.."
. tests/tap.sh # $tmp, pass, fail

out=$tmp/out
bin/lynxgen examples/tiny.model --tp 2 --dp 1 --pp 2 -o "$out" >/dev/null || fail "lynxgen writes a CUDA program"
mkdir -p "$tmp/bin"
# srun stand-in: runs the command once per task with SLURM_PROCID set, as srun does.
cat >"$tmp/bin/srun" <<'EOF'
#!/bin/sh
tasks=1
while [ $# -gt 0 ]; do
  case $1 in
  --ntasks=*) tasks=${1#--ntasks=} ;;
  --*) ;;
  *) break ;;
  esac
  shift
done
task=0
while [ "$task" -lt "$tasks" ]; do
  SLURM_PROCID=$task "$@" || exit $?
  task=$((task + 1))
done
EOF
# mpirun stand-in: one line per argument.
printf '#!/bin/sh\nfor a in "$@"; do printf "%%s\\n" "$a"; done >"$LOG"\n' >"$tmp/bin/mpirun"
# stage stand-ins: their stage, SLURM_PROCID and arguments, one per line.
for s in 0 1; do
  printf '#!/bin/sh\n{ echo "stage%d task ${SLURM_PROCID:-}"; for a in "$@"; do printf "%%s\\n" "$a"; done; } >>"$LOG"\n' \
    "$s" >"$out/stage$s"
done
chmod +x "$tmp/bin/srun" "$tmp/bin/mpirun" "$out/stage0" "$out/stage1"

# Spaces, a glob, a command substitution and quotes: each must arrive as one
# unchanged argument, and none may run.
args=(--save "$tmp/my checkpoints/ck.bin" --data '*.bin' --metrics '$(touch PWNED)' --val-data "it's \"quoted\"")
expected_args=$(printf '%s\n' "${args[@]}")

cd "$tmp" || exit 1
LOG=$tmp/slurm.log PATH=$tmp/bin:$PATH sh "$out/run-slurm.sh" "${args[@]}"
status=$?
expected=""
for task in 0 1 2 3; do
  expected+="stage$((task / 2)) task $task"$'\n'"$expected_args"$'\n'
done
if [ $status = 0 ] && [ "$(cat slurm.log)"$'\n' = "$expected" ]; then
  pass "run-slurm.sh: each of the 4 tasks runs its stage's program (task / 2) with every argument intact"
else
  fail "run-slurm.sh: each of the 4 tasks runs its stage's program with every argument intact" "exit $status" \
    "$(cat slurm.log 2>/dev/null)"
fi

LOG=$tmp/mpirun.log PATH=$tmp/bin:$PATH sh "$out/run.sh" "${args[@]}"
status=$?
# After each stage program: the arguments as given, then ':' or the end.
after_stage=$(awk -v n=${#args[@]} '/\/stage[01]$/ {c = n; next} c > 0 {print; c--}' mpirun.log)
if [ $status = 0 ] && [ "$after_stage" = "$expected_args"$'\n'"$expected_args" ]; then
  pass "run.sh: mpirun starts both stage programs with every argument intact"
else
  fail "run.sh: mpirun starts both stage programs with every argument intact" "exit $status" \
    "$(cat mpirun.log 2>/dev/null)"
fi

if [ -z "$(find "$tmp" "$out" -name PWNED)" ]; then
  pass "no argument ran as a command"
else
  fail "no argument ran as a command" "a file named PWNED"
fi
[ "$failures" -eq 0 ]
