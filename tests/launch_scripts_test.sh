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
# srun stand-in: runs the command once per task with SLURM_PROCID set, as srun
# does (after the stage programs' preflight, or it fails); it records whether
# a task that fails ends the others (--kill-on-bad-exit=1: Slurm's default
# lets them run on, waiting for the dead one).
cat >"$tmp/bin/srun" <<'EOF'
#!/bin/sh
[ -e "$LOG.preflight" ] || exit 9
tasks=1
while [ $# -gt 0 ]; do
  case $1 in
  --ntasks=*) tasks=${1#--ntasks=} ;;
  --kill-on-bad-exit=1) echo kill-on-bad-exit >"$LOG.srun" ;;
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
# mpirun stand-in: one line per argument (after the preflight, or it fails).
printf '#!/bin/sh\n[ -e "$LOG.preflight" ] || exit 9\nfor a in "$@"; do printf "%%s\\n" "$a"; done >"$LOG"\n' \
  >"$tmp/bin/mpirun"
# stage stand-ins: their stage, SLURM_PROCID and arguments, one per line;
# the preflight each script runs first goes to a log of its own.
for s in 0 1; do
  printf '#!/bin/sh\nlog=$LOG; [ "$1" = --preflight ] && log=$LOG.preflight && shift\n{ echo "stage%d task ${SLURM_PROCID:-}"; for a in "$@"; do printf "%%s\\n" "$a"; done; } >>"$log"\n' \
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

preflight="stage0 task "$'\n'"$expected_args"$'\n'"stage1 task "$'\n'"$expected_args"
if [ "$(cat slurm.log.preflight)" = "$preflight" ]; then
  pass "run-slurm.sh: each stage program's --preflight gets every argument intact, before srun"
else
  fail "run-slurm.sh: each stage program's --preflight gets every argument intact" "$(cat slurm.log.preflight)"
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

if [ "$(cat mpirun.log.preflight)" = "$preflight" ]; then
  pass "run.sh: each stage program's --preflight gets every argument intact, before mpirun"
else
  fail "run.sh: each stage program's --preflight gets every argument intact" "$(cat mpirun.log.preflight)"
fi

if [ "$(cat slurm.log.srun 2>/dev/null)" = kill-on-bad-exit ]; then
  pass "run-slurm.sh: a task that dies ends the job's other tasks (srun --kill-on-bad-exit=1)"
else
  fail "run-slurm.sh: a task that dies ends the job's other tasks (srun --kill-on-bad-exit=1)"
fi

# Inside a Slurm job of the wrong size, run-slurm.sh says so before srun.
LOG=$tmp/small.log SLURM_NTASKS=3 PATH=$tmp/bin:$PATH sh "$out/run-slurm.sh" >"$tmp/small.out" 2>&1
status=$?
if [ $status = 1 ] && grep -q "this job has 3 tasks; the program needs 4 (2 stages x 2 ranks)" "$tmp/small.out" &&
  [ ! -e small.log ]; then
  pass "run-slurm.sh refuses a job of 3 tasks for a program of 4, before srun"
else
  fail "run-slurm.sh refuses a job of 3 tasks for a program of 4" "exit $status" "$(cat "$tmp/small.out")"
fi

if [ -z "$(find "$tmp" "$out" -name PWNED)" ]; then
  pass "no argument ran as a command"
else
  fail "no argument ran as a command" "a file named PWNED"
fi
[ "$failures" -eq 0 ]
