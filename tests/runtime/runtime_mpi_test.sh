#!/usr/bin/env bash
# The runtime checks that need several MPI ranks or bin/lynxgen:
#   - a GPT-2 checkpoint loaded by 2 ranks (one pipeline stage each) and saved
#     back with lx_checkpoint_save_all is byte-identical; tagged non-blocking
#     sends match their receives; all-reduce sums
#   - a program started with the wrong number of ranks says so and exits 1
#   - a failing MPI call prints the call and aborts the job (no hang)
#   - a bad flag under mpirun exits 2 with one message, not one per rank
#   - `lynxgen tokenize` writes valid shards of the right sizes, and its
#     errors exit 1 (usage errors 2); it never replaces shards already there
# Prints "ok - ..." / "not ok - ..." lines; exits non-zero on a failure.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-.build}
prog=$BUILD/tests/runtime_test
lynxgen=bin/lynxgen
scratch=$(mktemp -d /tmp/lx_runtime_mpi_XXXXXX)
trap 'rm -rf "$scratch"' EXIT
failures=0

ok() { echo "ok - $*"; }
not_ok() { echo "not ok - $*"; failures=$((failures + 1)); }
check() { # check DESCRIPTION COMMAND...: ok when the command succeeds
  local what=$1; shift
  if "$@"; then ok "$what"; else not_ok "$what"; fi
}

# As root and in containers (see toolchain-notes): allow root, oversubscribe
# the cores, and use shared memory without single-copy.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi() { # mpi NP ARGS...: runs $prog under mpirun, with a timeout against hangs
  local np=$1; shift
  timeout 60 mpirun --oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none \
    -np "$np" "$prog" "$@"
}

# expect STATUS TEXT DESCRIPTION COMMAND...: the command exits STATUS and
# its output contains TEXT.
expect() {
  local want=$1 text=$2 what=$3; shift 3
  local out status
  out=$("$@" 2>&1); status=$?
  if [ "$status" -eq "$want" ] && grep -qF -- "$text" <<<"$out"; then ok "$what"
  else not_ok "$what (exit $status, want $want and \"$text\")"; sed 's/^/     /' <<<"$out" | head -20; fi
}

for tool in mpirun "$prog" "$lynxgen" python3; do
  command -v "$tool" >/dev/null || { not_ok "$tool is missing (scripts/deps.sh installs it)"; exit 1; }
done

# ---- MPI -----------------------------------------------------------------------------
"$prog" make-checkpoint "$scratch/model.bin"
out=$(mpi 2 mpi "$scratch/model.bin" "$scratch/copy.bin" 2>&1); status=$?
echo "$out" | grep -E '^(not )?ok - '
check "the 2-rank run exits 0" test "$status" -eq 0
[ "$status" -ne 0 ] && sed 's/^/     /' <<<"$out" | grep -vE '^ *(not )?ok - ' | head -20
check "a cmp of the 2-rank copy agrees" cmp -s "$scratch/model.bin" "$scratch/copy.bin"

# Each launch costs ~0.5-1 s: one run per case, several checks on its output.
# expect_once STATUS TEXT DESCRIPTION ARGS...: mpirun exits STATUS, and TEXT
# appears exactly once (rank 0 speaks for all).
expect_once() {
  local want=$1 text=$2 what=$3; shift 3
  local out status count
  out=$(mpi "$@" 2>&1); status=$?
  count=$(grep -cF -- "$text" <<<"$out")
  if [ "$status" -eq "$want" ] && [ "$count" -eq 1 ]; then ok "$what"
  else not_ok "$what (exit $status, want $want; \"$text\" $count times, want once)"; sed 's/^/     /' <<<"$out" | head -20; fi
}
expect_once 1 "this program was generated for 3 ranks (tp x pp x dp) but runs with 2; use run.sh" \
  "a wrong world size is refused once with exit 1" 2 mpi-start 3
expect_once 2 "unknown option '--bogus'" "a bad flag under mpirun exits 2 with one message" 2 mpi-options --bogus
expect_once 0 "--eval-interval N" "--help under mpirun prints once and exits 0" 2 mpi-options --help
out=$(mpi 1 mpi-fail 2>&1); status=$?
check "a failing MPI call aborts the job (exit $status)" test "$status" -ne 0
if grep -qE 'MPI error on rank 0 at tests/runtime/runtime_test.c:[0-9]+: MPI_Send\(&x, 1, LX_MPI_REAL, 99, 0, MPI_COMM_WORLD\): MPI_ERR_RANK' <<<"$out"; then
  ok "the MPI error names the call, file, line and MPI's reason"
else
  not_ok "the MPI error names the call, file, line and MPI's reason"; sed 's/^/     /' <<<"$out" | head
fi

# ---- lynxgen tokenize ------------------------------------------------------------------
text=/usr/share/games/fortunes/fortunes
if [ ! -s "$text" ]; then text=README.md; echo "# fortunes-min not installed: tokenizing $text"; fi
expect 0 "vocab 256" "lynxgen tokenize writes shards" "$lynxgen" tokenize "$text" -o "$scratch/data"
check "the shards are llm.c shards holding the file's bytes, val the last 10%" python3 - "$text" "$scratch/data" <<'PY'
import struct, sys
text = open(sys.argv[1], "rb").read()
def shard(path):
    data = open(path, "rb").read()
    magic, version, count = struct.unpack("<3i", data[:12])
    assert (magic, version) == (20240520, 1), (magic, version)
    assert data[12:1024] == bytes(1012), "header padding not zero"
    assert len(data) == 1024 + 2 * count, (len(data), count)
    return list(struct.unpack("<%dH" % count, data[1024:]))
train, val = shard(sys.argv[2] + "/train_000000.bin"), shard(sys.argv[2] + "/val_000000.bin")
assert len(val) == int(len(text) * 0.1) and len(train) + len(val) == len(text), (len(train), len(val))
assert train + val == list(text), "tokens are not the file's bytes"
PY
expect 0 "windows" "the runtime loader reads the tokenized shards" "$prog" check-shard "$scratch/data/train_*.bin" 4 32

before=$(cksum <"$scratch/data/train_000000.bin")
printf 'another text, not the first one\n' >"$scratch/other.txt"
expect 1 "holds token shards already" "tokenizing into a directory that holds shards exits 1" \
  "$lynxgen" tokenize "$scratch/other.txt" -o "$scratch/data"
check "  ... and leaves them as they were" test "$(cksum <"$scratch/data/train_000000.bin")" = "$before"
# a directory named like a glob pattern is listed, not globbed; a planted link is a shard name too
mkdir -p "$scratch/sh[a]rds" && printf 'the user'"'"'s\n' >"$scratch/victim.txt"
ln -s "$scratch/victim.txt" "$scratch/sh[a]rds/train_000000.bin"
expect 1 "holds token shards already" "a shard name in a directory named sh[a]rds is found too" \
  "$lynxgen" tokenize "$scratch/other.txt" -o "$scratch/sh[a]rds"
check "  ... and the file its link names is as it was" grep -qx "the user's" "$scratch/victim.txt"

expect 0 "val 0 tokens" "--val-fraction 0 writes no validation shard" \
  "$lynxgen" tokenize "$text" -o "$scratch/noval" --val-fraction 0
check "  ... and no val file" test ! -e "$scratch/noval/val_000000.bin"
expect 0 "train_000002.bin" "--shard-tokens splits the train split into shards" \
  "$lynxgen" tokenize "$text" -o "$scratch/split" --shard-tokens 5000 --val-fraction 0.25
check "  ... whose sizes add up to the file" python3 - "$text" "$scratch/split" <<'PY'
import glob, os, sys
size = os.path.getsize(sys.argv[1])
files = sorted(glob.glob(sys.argv[2] + "/*_0*.bin"))
total = sum((os.path.getsize(f) - 1024) // 2 for f in files)
assert total == size, (total, size)
assert all(os.path.getsize(f) <= 1024 + 2 * 5000 for f in files)
for split in ("train", "val"):  # of equal sizes: no short tail that the programs would refuse
    sizes = [os.path.getsize(f) for f in files if os.path.basename(f).startswith(split)]
    assert len(sizes) > 1 and max(sizes) - min(sizes) <= 2, (split, sizes)
PY

# the --data glob it prints names the new shards alone, however DIR is spelled
head -c 3000 "$text" >"$scratch/short.txt"
"$lynxgen" tokenize "$text" -o "$scratch/run1" --val-fraction 0 >/dev/null
out=$("$lynxgen" tokenize "$scratch/short.txt" -o "$scratch/run[1]/" --val-fraction 0)
flags=$(sed -n 's/^train with //p' <<<"$out")
eval "set -- $flags"
expect 0 "windows 23" "the --data glob tokenize prints for -o 'run[1]/' reads its 3000 bytes, not run1's: $flags" \
  "$prog" check-shard "${2:-missing}" 4 32

: >"$scratch/empty.txt"
expect 1 "is empty" "an empty text file exits 1" "$lynxgen" tokenize "$scratch/empty.txt" -o "$scratch/x"
expect 1 "cannot read $scratch/missing.txt" "a missing text file exits 1" \
  "$lynxgen" tokenize "$scratch/missing.txt" -o "$scratch/x"
expect 1 "cannot create directory" "an output directory that cannot be made exits 1" \
  "$lynxgen" tokenize "$text" -o "$scratch/empty.txt/sub"
expect 1 "/dev/zero is a device, not a text file" "a device is refused, not read forever" \
  "$lynxgen" tokenize /dev/zero -o "$scratch/x"
expect 2 "no output directory" "a missing -o is a usage error" "$lynxgen" tokenize "$text"
expect 2 "-o needs a directory" "an empty -o is a usage error" "$lynxgen" tokenize "$text" -o ''
expect 2 "--val-fraction wants a number in [0, 1)" "a bad --val-fraction is a usage error" \
  "$lynxgen" tokenize "$text" -o "$scratch/x" --val-fraction 1.5
expect 0 "usage: lynxgen tokenize" "lynxgen tokenize --help" "$lynxgen" tokenize --help

[ "$failures" -eq 0 ]
