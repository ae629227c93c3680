#!/usr/bin/env bash
# -o DIR never loses a user's file (gen/report/output_dir.h; issue 19):
# - a non-empty directory lynxgen did not write is refused (exit 2), intact;
# - regenerating a directory lynxgen wrote replaces its files and keeps the
#   files a user added since (notes, build products), and refuses (exit 2)
#   while a file lynxgen wrote was changed, keeping the change;
# - a name with a control character is refused (exit 2);
# - `-o .`, `-o ..`, `-o /`, the home directory and a symbolic link are
#   refused (exit 2) even when lynxgen wrote them, and nothing in them changes;
# - a rejected model leaves the previous output untouched;
# - a generated file replaced by a FIFO or a link to a device is a change
#   (exit 2), never waited on; a lock held on DIR's parent is waited for with
#   a message, and SIGTERM ends the wait leaving nothing behind;
# - DIR keeps its permissions (a private 0700, a shared setgid 2770) and its
#   group; a new DIR has mkdir's mode;
# - lnk/., lnk/x/.. and the like are the symbolic link lnk, refused; a
#   refused -o creates no directory;
# - 8 runs at once on one DIR all succeed and leave one consistent output
#   (every file the manifest lists, with its hash) and no staging directory;
# - no run leaves a hidden staging directory next to DIR;
# - a plan that does not fit the GPU exits 1 and writes nothing, unless
#   --allow-oom-plan asks for it; memory figures use a unit that suits them.
# Prints one "ok - " or "not ok - " line per check.
set -u
cd "$(dirname "$0")/.."
LYNXGEN=$PWD/bin/lynxgen
MODEL=$PWD/examples/tiny.model
. tests/tap.sh # $tmp, pass, fail
# check NAME COMMAND...: passes when COMMAND succeeds
check() {
  local name=$1
  shift
  if "$@"; then pass "$name"; else fail "$name" "exit $status" "$err"; fi
}

# Runs lynxgen with the given arguments from the current directory; sets $status and $err.
run_lynxgen() {
  "$LYNXGEN" --target "${TARGET:-cpu}" "$@" >"$tmp/stdout" 2>"$tmp/stderr"
  status=$?
  err=$(cat "$tmp/stderr")
}

# run_bounded SECONDS ARGS...: run_lynxgen that cannot hang the test: SIGTERM after SECONDS, SIGKILL 3 s later
# ($status 124 or 137)
run_bounded() {
  local seconds=$1
  shift
  timeout -k 3 "$seconds" "$LYNXGEN" --target "${TARGET:-cpu}" "$@" >"$tmp/stdout" 2>"$tmp/stderr"
  status=$?
  err=$(cat "$tmp/stderr")
}

no_staging_left() { ! ls -A "$1" | grep -q '\.lynxgen-'; }

# Every file manifest.txt lists holds the hash it lists.
manifest_holds() {
  (cd "$1" && sed -n 's/^output \([0-9a-f]*\)  \(.*\)$/\1  \2/p' manifest.txt | sha256sum --quiet -c -)
}

# ---- names the launch scripts could not use -----------------------------------

# run.sh finds its programs by $(dirname "$0"), which drops a trailing newline: "$tmp/out\n"/run.sh
# would start "$tmp/out"'s programs
run_lynxgen "$MODEL" -o "$tmp/out"$'\n'
check "-o with a control character in its name: exit 2, nothing written" \
  test "$status" -eq 2 -a ! -e "$tmp/out"$'\n' -a ! -e "$tmp/out"
grep -qF "control character (byte 0x0a)" <<<"$err" && pass "the refusal names the byte" ||
  fail "the refusal names the byte" "$err"

# a last component of 255 bytes, the most a name holds: the staging directory beside it, ".NAME.lynxgen-XXXXXX",
# cuts NAME to fit (it failed with "File name too long"); written twice, the second time replacing the first
long_name=$(printf 'o%.0s' $(seq 255))
run_lynxgen "$MODEL" -o "$tmp/$long_name" && run_lynxgen "$MODEL" -o "$tmp/$long_name"
check "-o with a 255-byte last component: written, then replaced (exit $status)" \
  test "$status" -eq 0 -a -s "$tmp/$long_name/plan.txt"

# the directory's mode is the umask's, as mkdir's would be (not the staging directory's 0700)
(umask 022 && "$LYNXGEN" --target cpu "$MODEL" -o "$tmp/shared" >/dev/null 2>&1)
mode=$(stat -c %a "$tmp/shared")
check "-o DIR under umask 022: mode 755 (got $mode)" test "$mode" = 755

# an existing directory keeps its permissions and group: a shared setgid 2770 one of another group (as root: daemon's;
# else one of the user's other groups) on the first write, a private 0700 one on regeneration (once both became 755)
group=$(id -u | grep -qx 0 && echo 1 || id -G | tr ' ' '\n' | grep -vx "$(id -g)" | head -1)
mkdir "$tmp/shared-group" && chmod 2770 "$tmp/shared-group" && chgrp "${group:-$(id -g)}" "$tmp/shared-group"
before=$(stat -c '%a %g' "$tmp/shared-group")
run_lynxgen "$MODEL" -o "$tmp/shared-group"
after=$(stat -c '%a %g' "$tmp/shared-group")
check "-o an empty directory of mode 2770, another group: written, mode and group kept ($before, got $after)" \
  test "$status" -eq 0 -a "$after" = "$before" -a -s "$tmp/shared-group/plan.txt"
chmod 700 "$tmp/shared-group" && echo log >"$tmp/shared-group/run.log"
before=$(stat -c %a "$tmp/shared-group")
run_lynxgen "$MODEL" -o "$tmp/shared-group" --micro-batch 1
after=$(stat -c %a "$tmp/shared-group")
check "a directory lynxgen wrote, then made private: regenerated, still $before (got $after)" \
  test "$status" -eq 0 -a "$after" = "$before" -a -s "$tmp/shared-group/run.log"

# a new directory in a setgid parent takes the setgid bit, as mkdir's would
mkdir "$tmp/setgid-parent" && chmod 2775 "$tmp/setgid-parent" && mkdir "$tmp/setgid-parent/by-mkdir"
(umask 022 && "$LYNXGEN" --target cpu "$MODEL" -o "$tmp/setgid-parent/out" >/dev/null 2>&1)
mode=$(stat -c %a "$tmp/setgid-parent/out") mkdir_mode=$(stat -c %a "$tmp/setgid-parent/by-mkdir")
check "a new -o DIR in a setgid parent: mkdir's mode $mkdir_mode (got $mode)" test "$mode" = "$mkdir_mode"

# ---- directories lynxgen did not write ---------------------------------------

mkdir -p "$tmp/mine"
echo precious >"$tmp/mine/notes.txt"
run_lynxgen "$MODEL" -o "$tmp/mine"
check "-o a non-empty directory lynxgen did not write: exit 2, left intact" \
  test "$status" -eq 2 -a "$(cat "$tmp/mine/notes.txt")" = precious -a ! -e "$tmp/mine/plan.txt"
grep -qF "lynxgen did not write it" <<<"$err" && pass "the refusal says why" || fail "the refusal says why" "$err"

mkdir -p "$tmp/empty"
run_lynxgen "$MODEL" -o "$tmp/empty"
check "-o an empty directory: written" test "$status" -eq 0 -a -s "$tmp/empty/plan.txt"

# ---- directories lynxgen wrote ---------------------------------------------

run_lynxgen "$MODEL" -o "$tmp/gen"
first=$status
echo "my notes" >"$tmp/gen/notes.txt"
mkdir "$tmp/gen/runs" && echo log >"$tmp/gen/runs/log.txt"
cp "$tmp/gen/plan.txt" "$tmp/plan.before"
run_lynxgen "$MODEL" -o "$tmp/gen/" --micro-batch 1
check "-o a directory lynxgen wrote: regenerated (exit 0, new plan)" \
  test "$first" -eq 0 -a "$status" -eq 0 -a -n "$(cmp "$tmp/gen/plan.txt" "$tmp/plan.before" 2>&1)"
check "files a user added to it since are kept, directories too" \
  test "$(cat "$tmp/gen/notes.txt" 2>/dev/null)" = "my notes" -a "$(cat "$tmp/gen/runs/log.txt" 2>/dev/null)" = log
check "the new output is whole (every file of its manifest, with its hash)" manifest_holds "$tmp/gen"
check "no staging directory is left next to it" no_staging_left "$tmp"

echo "# my edit" >>"$tmp/gen/stage0.c"
run_lynxgen "$MODEL" -o "$tmp/gen"
check "a file lynxgen wrote and the user changed: exit 2, the change kept" \
  test "$status" -eq 2 -a "$(tail -1 "$tmp/gen/stage0.c")" = "# my edit"
grep -qF "stage0.c changed since lynxgen wrote it" <<<"$err" && pass "the refusal names the changed file" ||
  fail "the refusal names the changed file" "$err"
sed -i '$d' "$tmp/gen/stage0.c"

echo "user's" >"$tmp/gen/lx_kernels.cu"
TARGET=cuda run_lynxgen "$MODEL" -o "$tmp/gen"
check "a user's file of a name the new output uses: exit 2, the file kept" \
  test "$status" -eq 2 -a "$(cat "$tmp/gen/lx_kernels.cu")" = "user's"
rm "$tmp/gen/lx_kernels.cu"

cp "$tmp/gen/plan.txt" "$tmp/plan.before"
run_lynxgen tests/diag/syntax_error.model -o "$tmp/gen"
check "a rejected model leaves the previous output as it was" \
  test "$status" -eq 1 -a -z "$(cmp "$tmp/gen/plan.txt" "$tmp/plan.before" 2>&1)"

# a write that fails midway (a 16 KiB file-size limit; plan.txt alone is larger)
cp -r "$tmp/gen" "$tmp/gen.before"
(ulimit -f 16 && exec "$LYNXGEN" --target cpu "$MODEL" -o "$tmp/gen" --micro-batch 2) >/dev/null 2>"$tmp/stderr"
status=$?
check "a write that fails midway (ulimit -f): exit 1, the previous output as it was" \
  test "$status" -eq 1 -a -z "$(diff -r "$tmp/gen" "$tmp/gen.before" 2>&1)"
check "... and no staging directory left" no_staging_left "$tmp"
rm -rf "$tmp/gen.before"

# a generated file replaced by what cannot be read to its end: a FIFO (with a writer that never writes), a link to
# /dev/zero. Hashing it once hung lynxgen, deaf to SIGTERM; it is a change, refused like an edit.
run_lynxgen "$MODEL" -o "$tmp/hostile"
rm "$tmp/hostile/trace.json" && mkfifo "$tmp/hostile/trace.json"
sleep 30 <>"$tmp/hostile/trace.json" &
writer=$!
run_bounded 15 "$MODEL" -o "$tmp/hostile"
kill "$writer"
check "a generated file replaced by a FIFO: exit 2 at once (got $status), the FIFO kept" \
  test "$status" -eq 2 -a -p "$tmp/hostile/trace.json"
grep -qF "trace.json changed since lynxgen wrote it" <<<"$err" && pass "the refusal names the FIFO" ||
  fail "the refusal names the FIFO" "$err"
rm "$tmp/hostile/trace.json" && ln -s /dev/zero "$tmp/hostile/trace.json"
run_bounded 15 "$MODEL" -o "$tmp/hostile"
check "a generated file replaced by a link to /dev/zero: exit 2 at once (got $status), the link kept" \
  test "$status" -eq 2 -a -L "$tmp/hostile/trace.json"
check "... and no staging directory left" no_staging_left "$tmp"

# another process holding a lock on DIR's parent (any reader can): lynxgen says what it waits for, and SIGTERM ends
# the wait (timeout's 124, not 137: it once blocked every signal there) without leaving its staging directory
mkdir "$tmp/locked"
flock -o "$tmp/locked" sleep 30 &
holder=$!
sleep 0.5
run_bounded 2 "$MODEL" -o "$tmp/locked/out"
kill "$holder"
check "a lock held on the parent: SIGTERM ends the wait (got $status), nothing left in the parent" \
  test "$status" -eq 124 -a -z "$(ls -A "$tmp/locked")"
grep -qF "waiting for the lock on $tmp/locked" <<<"$err" && pass "the wait names the lock it waits for" ||
  fail "the wait names the lock it waits for" "$err"

# ---- directories never replaced --------------------------------------------

# `-o .` inside a directory lynxgen once wrote: once, this deleted everything in it
(cd "$tmp/gen" && run_lynxgen "$MODEL" -o . && echo "$status" >"$tmp/status")
check "-o . inside a directory lynxgen wrote: exit 2, the user's files kept" \
  test "$(cat "$tmp/status")" -eq 2 -a -s "$tmp/gen/notes.txt" -a -s "$tmp/gen/stage0.c"
(cd "$tmp/gen/runs" && run_lynxgen "$MODEL" -o .. && echo "$status" >"$tmp/status")
check "-o .. (holds the working directory): exit 2, untouched" \
  test "$(cat "$tmp/status")" -eq 2 -a -s "$tmp/gen/notes.txt" -a -s "$tmp/gen/runs/log.txt"
run_lynxgen "$MODEL" -o /
check "-o /: exit 2" test "$status" -eq 2

# a home directory that lynxgen once wrote (HOME pointed at an old output)
run_lynxgen "$MODEL" -o "$tmp/home"
echo "dotfile" >"$tmp/home/.profile"
HOME=$tmp/home run_lynxgen "$MODEL" -o "$tmp/home"
check "-o \$HOME, even one lynxgen wrote: exit 2, untouched" \
  test "$status" -eq 2 -a "$(cat "$tmp/home/.profile")" = dotfile
HOME=$tmp/home run_lynxgen "$MODEL" -o "$tmp"
check "-o a directory that holds \$HOME: exit 2" test "$status" -eq 2 -a -s "$tmp/home/.profile"

ln -s gen "$tmp/link"
run_lynxgen "$MODEL" -o "$tmp/link"
check "-o a symbolic link: exit 2, neither the link nor its target replaced" \
  test "$status" -eq 2 -a -L "$tmp/link" -a -s "$tmp/gen/notes.txt"

# the link however spelled: lnk/., lnk/ and lnk/x/.. are the directory lnk points to (once replaced)
cp "$tmp/gen/plan.txt" "$tmp/plan.before"
for spelling in link/. link/./ link/runs/..; do
  run_bounded 30 "$MODEL" -o "$tmp/$spelling" --micro-batch 1
  check "-o $spelling: exit 2 (got $status), neither the link nor its target replaced" \
    test "$status" -eq 2 -a -L "$tmp/link" -a -s "$tmp/gen/notes.txt" \
    -a -z "$(cmp "$tmp/gen/plan.txt" "$tmp/plan.before" 2>&1)"
done

# a refused -o creates no directory (its missing parents were made before the checks); . and .. are read as
# written, so newA/newB/../../newC is newC, and makes newC alone
mkdir "$tmp/spelled"
(cd "$tmp/spelled" && run_bounded 30 "$MODEL" -o newX/.. && echo "$status" >"$tmp/status")
check "-o newX/.. (the working directory): exit 2, newX not created" \
  test "$(cat "$tmp/status")" -eq 2 -a ! -e "$tmp/spelled/newX"
(cd "$tmp/spelled" && run_bounded 30 "$MODEL" -o newA/newB/../../newC && echo "$status" >"$tmp/status")
check "-o newA/newB/../../newC: newC written, newA not created" \
  test "$(cat "$tmp/status")" -eq 0 -a -s "$tmp/spelled/newC/plan.txt" -a ! -e "$tmp/spelled/newA"

# ---- concurrent runs ---------------------------------------------------------

rm -rf "$tmp/race"
for i in 1 2 3 4 5 6 7 8; do
  "$LYNXGEN" "$MODEL" --target cpu -o "$tmp/race" --micro-batch $((i % 2 + 1)) >/dev/null 2>"$tmp/race.$i.err" &
done
statuses=0
for job in $(jobs -p); do wait "$job" || statuses=$((statuses + 1)); done
check "8 runs at once on one -o: all exit 0" test "$statuses" -eq 0
check "... and leave one whole output (its manifest's files and hashes)" manifest_holds "$tmp/race"
check "... and no staging directory" no_staging_left "$tmp"

# ---- plans that do not fit ---------------------------------------------------

run_lynxgen "$MODEL" -o "$tmp/oom" --gpu-memory 0.0001
check "a plan that does not fit the GPU: exit 1, nothing written" test "$status" -eq 1 -a ! -e "$tmp/oom"
grep -qE "does not fit.*as --gpu-memory sets it.*--allow-oom-plan" <<<"$err" &&
  pass "the error says so, that --gpu-memory set the GPU's memory, and names --allow-oom-plan" ||
  fail "the error says so, that --gpu-memory set the GPU's memory, and names --allow-oom-plan" "$err"
run_lynxgen "$MODEL" --plan --gpu-memory 0.0001
check "--plan of a plan that does not fit: exit 1" test "$status" -eq 1
run_lynxgen "$MODEL" -o "$tmp/oom" --gpu-memory 0.0001 --allow-oom-plan
check "--allow-oom-plan writes it (exit 0) for what-if studies" test "$status" -eq 0 -a -s "$tmp/oom/plan.txt"
grep -q "DOES NOT FIT" "$tmp/oom/plan.txt" && pass "... and plan.txt says it does not fit" ||
  fail "... and plan.txt says it does not fit" "$(grep memory "$tmp/oom/plan.txt")"

# ---- memory figures ------------------------------------------------------------

run_lynxgen "$MODEL" -o "$tmp/small"
summary=$(cat "$tmp/stdout")
if grep -q "peak memory" <<<"$summary" && ! grep -qE " 0\.00 [KMG]iB" <<<"$summary" "$tmp/small/plan.txt" &&
  grep -qE "peak memory [0-9.]+ [KM]iB" <<<"$summary"; then
  pass "a small model's memory is printed in a unit that shows it (no 0.00 GiB)"
else
  fail "a small model's memory is printed in a unit that shows it (no 0.00 GiB)" "$summary"
fi

[ "$failures" -eq 0 ]
