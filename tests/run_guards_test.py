"""A training run refuses, before it trains, what would lose or misplace a
user's work, and stops cleanly when it can no longer record itself; on the
CPU target, through run.sh.

Two small GPTs (2 and 4 layers) are generated and built once:

- --resume of the 4-layer model's checkpoint into the 2-layer program is
  refused, naming a tensor this model lacks (it loaded the first layers and
  trained on before);
- a checkpoint whose saved step is outside 1..steps (1000, 0, -5), whose
  data position is negative, whose tensor count is 2^61 (a product that
  wrapped to 0 let the table overrun its buffer), whose step is 2 where the
  run saved step 6 (the header's checksum), or one bit of whose weights is
  flipped (the checksum of the state), is named corrupt before step 1;
- a checkpoint of a finished run resumes to a note that nothing is left;
- the same shards in another directory resume; shards of as many batches
  with one token changed are refused (the checkpoint records a fingerprint
  of the data's content);
- --save at an existing file that the run does not resume is refused before
  step 1 (a run started without --resume by mistake would replace the
  checkpoint it meant to continue), and the file is left as it was;
- a metrics file that cannot be written (/dev/full) stops the run after
  that step with the file named, saves the state and exits 1;
- a validation longer than --watchdog (many short batches) completes: each
  batch is progress;
- a --resume whose checkpoint reads hang (a stuck filesystem, simulated by a
  preloaded pread) is ended by the watchdog, which now watches the loading too,
  naming the checkpoint;
- a job whose MPI groups never form (a preloaded MPI_Comm_split that hangs)
  is ended by the watchdog too;
- a --resume whose checkpoint is replaced by another save while it is read
  (a preloaded pread renames the other state over it) continues the file it
  opened, with the uninterrupted run's losses;
- the validation batches are checked before step 1: their tokens, and that
  there are --val-batches of them; a run that never validates needs none;
- two flags naming one file where a write would destroy the other file
  (--save and --export-llmc, --metrics and --resume) are a usage error;
- --auto-resume, one command line run as a requeued job runs it: it starts
  where --save's checkpoint does not exist, and continues from it where it
  does, with the uninterrupted run's losses bit for bit;
- --checkpoint-every without --save warns; --metrics in a missing directory,
  --data naming a directory, and --init given a training state are refused
  with what to do instead.
"""
import os
import re
import shutil
import struct
import subprocess
import sys
import time

from tap import check, exit_status
from training_metrics import fortunes_shards, generate, losses_by_step, run

STEPS = 6
# lx_state_run.step, .tensors and .header_checksum, the replicas' data positions (docs/checkpoints.md)
STEP_OFFSET, TENSORS_OFFSET, HEADER_CHECKSUM_OFFSET, POSITIONS_OFFSET = 40, 152, 184, 4096
SHARD_HEADER_BYTES = 1024  # a token shard's header: 256 int32 (templates/common/lx_data.h)

MODEL = """#include <lynx.h>
static const struct lx_model model = { .vocab = 256, .seq_len = 16, .layers = 2, .hidden = 32, .heads = 2,
  .dropout = 0.0, .tied_embeddings = 1 };
static const struct lx_cluster cluster = { .gpu = GPU_A100_80GB, .gpus_per_node = 8 };
static const struct lx_parallel parallel = { .tp = 1, .pp = 1, .dp = 1, .micro_batch = 2, .global_batch = 4,
  .schedule = SCHEDULE_1F1B };
static const struct lx_training training = { .steps = 6, .lr = 3e-3, .min_lr = 2e-4, .warmup_steps = 2,
  .seed = 11, .dtype = DTYPE_FP32 };
tensor prologue(tensor tokens) { return add(embedding(tokens, 256, 32), position_embedding(tokens, 32)); }
tensor block(tensor x) {
  x = add(x, linear(attention(linear(layernorm(x), 96), 2, 2), 32));
  return add(x, linear(gelu(linear(layernorm(x), 128)), 32));
}
tensor epilogue(tensor x, tensor targets) { return cross_entropy(lm_head(layernorm(x), 256), targets); }
"""


def launch(cmd, work):
    return run(cmd, work, timeout=300) or subprocess.CompletedProcess(cmd, -1, "", "timed out after 300 s")


def build(work, name, text):
    model = os.path.join(work, name + ".model")
    with open(model, "w") as f:
        f.write(text)
    return generate(work, name, model, quick=True)


def train(work, program, *args):
    return launch([os.path.join(program, "run.sh"), "--data", os.path.join(work, "data/train_*.bin"), *args], work)


def trained(r):
    """Whether the run reported a training step."""
    return any(line.startswith("step ") for line in r.stdout.splitlines())


def saved_step(path):
    with open(path, "rb") as f:
        return struct.unpack_from("<i", f.read(64), STEP_OFFSET)[0]


def patched(path, name, offset, fmt, value):
    """A copy of the checkpoint at path with one field changed."""
    with open(path, "rb") as f:
        data = bytearray(f.read())
    struct.pack_into(fmt, data, offset, value)
    copy = os.path.join(os.path.dirname(path), name)
    with open(copy, "wb") as f:
        f.write(data)
    return copy


def another_model(work, program, deeper):
    ckpt = os.path.join(work, "deeper.bin")
    r = train(work, deeper, "--save", ckpt, "--metrics", os.path.join(work, "deeper.jsonl"))
    check(r.returncode == 0 and saved_step(ckpt) == STEPS, "the 4-layer model trains and saves")
    r = train(work, program, "--resume", ckpt, "--metrics", os.path.join(work, "m.jsonl"))
    said = "holds tensor block layer 2" in r.stderr and "which this model does not have" in r.stderr
    check(r.returncode == 1 and said and not trained(r),
          "--resume of a 4-layer model's checkpoint in a 2-layer program is refused, naming a tensor it lacks")
    if not said:
        print(r.stderr[-1500:])


def corrupt_checkpoints(work, program, ckpt):
    """Each field out of range, and (the header's checksum) one in range:
    step 2 of a run that saved step 6 resumed at step 3 with step 6's weights."""
    for name, offset, fmt, value, says in (
            ("step-1000.bin", STEP_OFFSET, "<i", 1000, "says step 1000 of %d" % STEPS),
            ("step-0.bin", STEP_OFFSET, "<i", 0, "says step 0 of %d" % STEPS),
            ("step-minus-5.bin", STEP_OFFSET, "<i", -5, "says step -5 of %d" % STEPS),
            ("position.bin", POSITIONS_OFFSET, "<q", -3, "continues at training window -3"),
            # 88 bytes an entry times 2^61 wraps to 0: the size check passed and the table overran its buffer
            ("tensors.bin", TENSORS_OFFSET, "<q", 1 << 61, "%d tensors do not fit" % (1 << 61)),
            ("step-2.bin", STEP_OFFSET, "<i", 2, "its header, data positions or tensor table do not match")):
        copy = patched(ckpt, name, offset, fmt, value)
        if name == "position.bin":  # as an older program wrote it, without the header's checksum
            copy = patched(copy, name, HEADER_CHECKSUM_OFFSET, "<Q", 0)
        r = train(work, program, "--resume", copy, "--metrics", os.path.join(work, "m.jsonl"))
        check(r.returncode == 1 and "is corrupt" in r.stderr and says in r.stderr and not trained(r),
              "--resume of a checkpoint that %s is refused as corrupt before step 1" % says)
        if says not in r.stderr:
            print(r.stderr[-1500:])


def other_data(work, program, ckpt):
    """The same shards elsewhere resume (paths may change); the same number
    of windows with one token changed is refused."""
    moved, altered = os.path.join(work, "moved"), os.path.join(work, "altered")
    for name in (moved, altered):
        shutil.copytree(os.path.join(work, "data"), name)
    first = sorted(f for f in os.listdir(altered) if f.startswith("train_"))[0]
    with open(os.path.join(altered, first), "r+b") as f:
        f.seek(SHARD_HEADER_BYTES + 2 * 10)  # token 10 (uint16)
        token = struct.unpack("<H", f.read(2))[0]
        f.seek(SHARD_HEADER_BYTES + 2 * 10)
        f.write(struct.pack("<H", (token + 1) % 256))
    for where, ok in ((moved, True), (altered, False)):
        r = train(work, program, "--resume", ckpt, "--data", os.path.join(where, "train_*.bin"), "--metrics",
                  os.path.join(work, "m.jsonl"))
        said = "was trained on other data than %s" % os.path.join(where, "train_*.bin")
        if ok:
            check(r.returncode == 0, "--resume with the same shards in another directory continues")
        else:
            check(r.returncode == 1 and said in r.stderr and not trained(r),
                  "--resume with data of as many batches but one token changed is refused before step 1")
        if r.returncode != (0 if ok else 1):
            print(r.stderr[-1500:])


def damaged_data(work, program, ckpt):
    """One bit of one weight flipped, as a damaged disk would: the checksum
    the header records no longer matches."""
    with open(ckpt, "rb") as f:
        data = bytearray(f.read())
    first_tensor = POSITIONS_OFFSET + 8 * 1  # the tensor table, after dp = 1 data positions
    offset = struct.unpack_from("<q", data, first_tensor + 64 + 16)[0]  # name[64], rows, cols, offset
    data[offset + 4 * 3] ^= 0x01  # the lowest mantissa bit of its element 3
    damaged = os.path.join(work, "damaged.bin")
    with open(damaged, "wb") as f:
        f.write(data)
    r = train(work, program, "--resume", damaged, "--metrics", os.path.join(work, "m.jsonl"))
    said = "is corrupt: the weights and moments read from it do not match the checksum saved with them"
    check(r.returncode == 1 and said in r.stderr and not trained(r),
          "--resume of a checkpoint with one bit of a weight flipped is refused as corrupt before step 1")
    if said not in r.stderr:
        print(r.stderr[-1500:])


def finished_run(work, program, ckpt):
    r = train(work, program, "--resume", ckpt, "--save", ckpt, "--metrics", os.path.join(work, "m.jsonl"))
    check(r.returncode == 0 and "is of a finished run (step %d of %d): nothing is left to train" % (STEPS, STEPS)
          in r.stdout and not trained(r), "--resume of a finished run says that nothing is left to train")


def existing_save(work, program, ckpt):
    with open(ckpt, "rb") as f:
        before = f.read()
    other = os.path.join(work, "other.bin")
    shutil.copyfile(ckpt, other)
    for args, how in ((("--save", ckpt, "--seed", "12"), "starts afresh"),  # another seed: another state
                      (("--save", ckpt, "--resume", other), "resumes another checkpoint")):
        r = train(work, program, *args, "--metrics", os.path.join(work, "m.jsonl"))
        said = "%s exists and this run %s: its first save would replace it" % (ckpt, how)
        check(r.returncode == 1 and said in r.stderr and "--resume %s" % ckpt in r.stderr and not trained(r),
              "--save at an existing checkpoint that the run %s is refused before step 1" % how.split(" ")[0])
        if said not in r.stderr:
            print(r.stderr[-1500:])
    with open(ckpt, "rb") as f:
        check(f.read() == before, "the checkpoint at --save is left as it was")


def unwritable_metrics(work, program):
    ckpt = os.path.join(work, "full.bin")
    r = train(work, program, "--metrics", "/dev/full", "--save", ckpt)
    named = "cannot write step 1 to the metrics file /dev/full: No space left on device" in r.stderr
    stopped = "stopped after step 1 of %d; saved, continue with --resume %s" % (STEPS, ckpt) in r.stdout
    check(r.returncode == 1 and named and stopped and os.path.exists(ckpt) and saved_step(ckpt) == 1,
          "a metrics file that cannot be written stops the run after that step, named, with its state saved, "
          "exit 1 (status %d)" % r.returncode)
    if not (named and stopped):
        print((r.stdout + r.stderr)[-2000:])


def shard(path, tokens):
    """A token shard (uint16, llm.c's format) of the given tokens."""
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *([20240520, 1, len(tokens)] + [0] * 253)))
        f.write(struct.pack("<%dH" % len(tokens), *tokens))
    return path


def long_validation(work, program):
    """Validation batches are short, their sum is not: enough of them to
    outlast the watchdog's second by far (the count grows until they do);
    the run must complete. Each batch its own: 32000 windows of 33 tokens."""
    val = shard(os.path.join(work, "long-val.bin"), [(7 * i) % 256 for i in range(32000 * 32 + 1)])

    def run(*args):
        start = time.time()
        r = train(work, program, "--metrics", os.path.join(work, "m.jsonl"), "--steps", "1", "--watchdog", "1",
                  *args)
        return r, time.time() - start
    _, bare = run()
    for batches in (2000, 8000, 32000):
        r, took = run("--val-data", val, "--val-batches", str(batches), "--eval-interval", "1")
        if r.returncode != 0 or took - bare > 2:
            break
    check(r.returncode == 0 and "| val " in r.stdout and took - bare > 2,
          "a validation of %d batches, %.1f s, under --watchdog 1 completes (each batch is progress; status %d)" % (
              batches, took - bare, r.returncode))
    if r.returncode != 0:
        print(r.stderr[-1500:])


# A filesystem that stops answering: a read of 4 KiB or more from the file
# LX_STALL names hangs (the checkpoint's tensors; its header and the shards
# are read in smaller pieces), as on a stuck network mount.
# A library for LD_PRELOAD whose pread first calls on_read(fd, bytes, path of fd).
PREAD_HOOK = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>
static void on_read(int fd, size_t n, const char *path);
static void hook(int fd, size_t n) {
  char link[64], path[4096];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t len = readlink(link, path, sizeof path - 1);
  if (len <= 0) return;
  path[len] = 0;
  on_read(fd, n, path);
}
ssize_t pread(int fd, void *buf, size_t n, off_t at) {
  hook(fd, n);
  ssize_t (*next)(int, void *, size_t, off_t) = (ssize_t (*)(int, void *, size_t, off_t))dlsym(RTLD_NEXT, "pread");
  return next(fd, buf, n, at);
}
ssize_t pread64(int fd, void *buf, size_t n, off_t at) {
  hook(fd, n);
  ssize_t (*next)(int, void *, size_t, off_t) = (ssize_t (*)(int, void *, size_t, off_t))dlsym(RTLD_NEXT, "pread64");
  return next(fd, buf, n, at);
}
"""
# Reads of LX_STALL of a page or more hang, as on a stuck filesystem.
STALLING_READS = PREAD_HOOK + r"""
static void on_read(int fd, size_t n, const char *path) {
  const char *name = getenv("LX_STALL");
  (void)fd;
  if (name && n >= 4096 && !strcmp(path, name)) sleep(600);
}
"""
# The first read of LX_REPLACE renames LX_REPLACE_WITH over it, as a save does.
REPLACING_READS = PREAD_HOOK + r"""
static void on_read(int fd, size_t n, const char *path) {
  static int done;
  const char *name = getenv("LX_REPLACE"), *with = getenv("LX_REPLACE_WITH");
  (void)fd, (void)n;
  if (!done && name && with && !strcmp(path, name)) done = 1, rename(with, name);
}
"""


def preloaded(work, name, source):
    """A library of that C source for LD_PRELOAD, or None where it does not build."""
    path, shim = os.path.join(work, name + ".c"), os.path.join(work, name + ".so")
    with open(path, "w") as f:
        f.write(source)
    built = subprocess.run(["cc", "-shared", "-fPIC", "-o", shim, path, "-ldl"], capture_output=True, text=True)
    check(built.returncode == 0, "the %s library builds (%s)" % (name, built.stderr.strip()[-300:]))
    return shim if built.returncode == 0 else None


def stalled_resume(work, program, ckpt):
    """--resume from a checkpoint whose reads hang: the watchdog, armed before
    the checkpoint is read, ends the job in --watchdog seconds, naming it."""
    shim = preloaded(work, "stalling-reads", STALLING_READS)
    if not shim:
        return
    start = time.monotonic()
    r = run([os.path.join(program, "run.sh"), "--data", os.path.join(work, "data/train_*.bin"), "--resume", ckpt,
             "--save", os.path.join(work, "stalled.bin"), "--watchdog", "2"], work,
            env={"LD_PRELOAD": shim, "LX_STALL": os.path.realpath(ckpt)}, timeout=120)
    seconds = time.monotonic() - start
    said = r and re.search(r"made no progress for \d+ s \(--watchdog 2\): it waits on the training state " +
                           re.escape(ckpt), r.stderr)
    check(r is not None and r.returncode != 0 and said and seconds < 60,
          "a --resume whose reads hang ends in %.0f s, the watchdog naming the checkpoint (status %s): %s" % (
              seconds, r and r.returncode, (r.stderr if r else "timed out")[-400:]))


# MPI_Comm_split, which makes the CPU program's tensor-, data- and pipeline-parallel groups, never returns.
STALLING_GROUPS = r"""
#include <mpi.h>
#include <unistd.h>
int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *out) {
  sleep(600);
  return PMPI_Comm_split(comm, color, key, out);
}
"""


def stalled_groups(work, program):
    """The communicators' set-up hangs (a peer that never arrives): the
    watchdog, armed once the command line is read, ends the job."""
    path, shim = os.path.join(work, "stalling-groups.c"), os.path.join(work, "stalling-groups.so")
    with open(path, "w") as f:
        f.write(STALLING_GROUPS)
    built = subprocess.run(["mpicc", "-shared", "-fPIC", "-o", shim, path], capture_output=True, text=True)
    check(built.returncode == 0, "the stalling-groups library builds (%s)" % built.stderr.strip()[-300:])
    if built.returncode != 0:
        return
    start = time.monotonic()
    r = run([os.path.join(program, "run.sh"), "--data", os.path.join(work, "data/train_*.bin"), "--watchdog", "2",
             "--metrics", os.path.join(work, "m.jsonl")], work, env={"LD_PRELOAD": shim}, timeout=120)
    seconds = time.monotonic() - start
    check(r is not None and r.returncode != 0 and "made no progress for" in r.stderr and seconds < 60,
          "a job whose MPI groups never form ends in %.0f s, by the watchdog (status %s): %s" % (
              seconds, r and r.returncode, (r.stderr if r else "timed out")[-300:]))


def replaced_while_resuming(work, program, reference):
    """A save that renames another state into --resume's file while the run
    reads it (a requeued twin of the job): the run resumes the file it
    opened, whole, not one file's header with the other's data positions
    and tensors (which it refused as corrupt before)."""
    first, second = os.path.join(work, "after-step-1.bin"), os.path.join(work, "after-step-2.bin")
    made = (train(work, program, "--save", first, "--metrics", "/dev/full"),
            train(work, program, "--resume", first, "--save", second, "--metrics", "/dev/full"))
    check(all(r.returncode == 1 for r in made) and saved_step(first) == 1 and saved_step(second) == 2,
          "two states of one run, after step 1 and after step 2")
    shim = preloaded(work, "replacing-reads", REPLACING_READS)
    if not shim or saved_step(second) != 2:
        return
    metrics = os.path.join(work, "replaced.jsonl")
    r = run([os.path.join(program, "run.sh"), "--data", os.path.join(work, "data/train_*.bin"), "--resume", first,
             "--metrics", metrics], work, env={"LD_PRELOAD": shim, "LX_REPLACE": os.path.realpath(first),
                                               "LX_REPLACE_WITH": os.path.realpath(second)}, timeout=300)
    want = {s: loss for s, loss in reference.items() if s > 1}
    got = losses_by_step(metrics) if r and r.returncode == 0 else None
    check(r is not None and r.returncode == 0 and not os.path.exists(second) and saved_step(first) == 2 and
          got == want, "--resume of a state that a save replaces while it is read continues the state it opened "
          "after step 1, with the uninterrupted run's losses bitwise: %s" % (r.stderr[-400:] if r else "timed out"))


def validation_data(work, program):
    """The validation data a run will read is checked before step 1: a token
    outside the vocabulary in its first batches (found at the first
    validation, steps in, before), and fewer batches than --val-batches
    (which counted some twice); a run that never validates needs none."""
    tokens = [i % 256 for i in range(4 * 32 + 1)]
    tokens[50] = 300
    ckpt = os.path.join(work, "val-guard.bin")
    r = train(work, program, "--val-data", shard(os.path.join(work, "oov-val.bin"), tokens), "--val-batches", "4",
              "--eval-interval", "5", "--save", ckpt, "--metrics", os.path.join(work, "m.jsonl"))
    check(r.returncode == 1 and "token 300 at position 50 is outside the vocabulary" in r.stderr and
          not trained(r) and not os.path.exists(ckpt),
          "a token outside the vocabulary in the validation batches is refused before step 1 (%s)" %
          r.stderr.strip()[-200:])
    r = train(work, program, "--val-data", shard(os.path.join(work, "one-val.bin"), tokens[:40]), "--val-batches",
              "2", "--eval-interval", "2", "--metrics", os.path.join(work, "m.jsonl"))
    check(r.returncode == 1 and "holds 1 batch of B*T+1 = 33 tokens: --val-batches 2 would count some twice" in
          r.stderr and "--val-batches 1 or fewer" in r.stderr and not trained(r),
          "fewer validation batches than --val-batches is refused before step 1, saying how many there are")
    r = train(work, program, "--val-data", os.path.join(work, "nothing_*.bin"), "--eval-interval", str(STEPS + 1),
              "--metrics", os.path.join(work, "m.jsonl"))
    check(r.returncode == 0 and trained(r),
          "a run whose --eval-interval is past its steps trains without the validation data it would not read")


def colliding_files(work, program, ckpt):
    """Two flags naming one file, however spelled, where one write would
    destroy the other file: a usage error before anything runs."""
    fresh = os.path.join(work, "fresh.bin")
    metrics = ("--metrics", os.path.join(work, "m.jsonl"))
    for args, said in ((("--save", fresh, "--export-llmc", os.path.join(work, ".", "fresh.bin"), *metrics),
                        "--save %s and --export-llmc" % fresh),
                       (("--resume", ckpt, "--metrics", ckpt), "--metrics %s and --resume %s" % (ckpt, ckpt))):
        with open(ckpt, "rb") as f:
            before = f.read()
        r = train(work, program, *args)
        with open(ckpt, "rb") as f:
            kept = f.read() == before
        check(r.returncode == 2 and said in r.stderr and "are one file" in r.stderr and not trained(r) and
              not os.path.exists(fresh) and kept,
              "%s and %s naming one file: a usage error, nothing written" % (args[0], args[2]))
        if "are one file" not in r.stderr:
            print(r.stderr[-1500:])


def auto_resume(work, program, reference):
    """One command line, run as a requeued job runs it: the first run
    starts (no checkpoint yet) and stops after step 1, unable to record
    itself; the same command continues from the saved step with the
    uninterrupted run's losses, bit for bit; once more, nothing is left."""
    ckpt = os.path.join(work, "auto.bin")
    args = ("--save", ckpt, "--auto-resume")
    first = train(work, program, *args, "--metrics", "/dev/full")
    check(first.returncode == 1 and os.path.exists(ckpt) and saved_step(ckpt) == 1,
          "--auto-resume without a checkpoint starts; stopped after step 1, it saved step 1")
    metrics = os.path.join(work, "auto.jsonl")
    again = train(work, program, *args, "--metrics", metrics)
    got = losses_by_step(metrics)
    check(again.returncode == 0 and "--auto-resume: continuing %s after step 1" % ckpt in again.stdout and
          got == {s: loss for s, loss in reference.items() if s > 1},
          "the same command again continues after step 1 with the uninterrupted run's losses bitwise")
    if again.returncode != 0 or got != {s: loss for s, loss in reference.items() if s > 1}:
        print((again.stdout + again.stderr)[-1500:], got, reference)
    done = train(work, program, *args, "--metrics", metrics)
    check(done.returncode == 0 and "nothing is left to train" in done.stdout and not trained(done),
          "and once more: the run is finished, nothing is left to train")
    alone = train(work, program, "--auto-resume", "--metrics", metrics)
    check(alone.returncode == 2 and "--auto-resume continues from --save's checkpoint" in alone.stderr,
          "--auto-resume without --save is a usage error")


def refused_settings(work, program, ckpt):
    r = train(work, program, "--checkpoint-every", "2", "--steps", "2", "--metrics", os.path.join(work, "m.jsonl"))
    check(r.returncode == 0 and "checkpoints every 2 steps go nowhere without --save" in r.stderr,
          "--checkpoint-every without --save trains with a warning")
    missing = os.path.join(work, "no-such-dir", "m.jsonl")
    r = train(work, program, "--metrics", missing)
    check(r.returncode == 1 and "--metrics %s: cannot write it" % missing in r.stderr and not trained(r),
          "--metrics in a missing directory is refused before step 1")
    r = launch([os.path.join(program, "run.sh"), "--data", os.path.join(work, "data"), "--metrics",
                os.path.join(work, "m.jsonl")], work)
    check(r.returncode == 1 and "is a directory: give the glob of its shards, such as" in r.stderr,
          "--data naming a directory says to give its shards' glob (%s)" % r.stderr.strip()[-200:])
    r = train(work, program, "--init", ckpt, "--metrics", os.path.join(work, "m.jsonl"))
    check(r.returncode == 2 and "is a training state (written by --save), not weights" in r.stderr and
          "--resume %s" % ckpt in r.stderr, "--init given a training state says to --resume it")


def main():
    work = fortunes_shards("lynx-guards-")
    if not work:
        return
    program = build(work, "gpt2", MODEL)
    deeper = build(work, "gpt4", MODEL.replace(".layers = 2", ".layers = 4")) if program else None
    check(program is not None and deeper is not None, "the two test models generate and build")
    if not deeper:
        return
    ckpt = os.path.join(work, "state.bin")
    r = train(work, program, "--save", ckpt, "--metrics", os.path.join(work, "first.jsonl"))
    check(r.returncode == 0 and saved_step(ckpt) == STEPS, "the 2-layer model trains %d steps and saves" % STEPS)
    reference = losses_by_step(os.path.join(work, "first.jsonl"))
    another_model(work, program, deeper)
    corrupt_checkpoints(work, program, ckpt)
    damaged_data(work, program, ckpt)
    finished_run(work, program, ckpt)
    other_data(work, program, ckpt)
    existing_save(work, program, ckpt)
    unwritable_metrics(work, program)
    long_validation(work, program)
    stalled_resume(work, program, ckpt)
    stalled_groups(work, program)
    replaced_while_resuming(work, program, reference)
    validation_data(work, program)
    refused_settings(work, program, ckpt)
    colliding_files(work, program, ckpt)
    auto_resume(work, program, reference)


main()
sys.exit(exit_status())
