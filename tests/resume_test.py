"""Training runs lose nothing (issue 15, first part), on the CPU target.

Each plan's program is generated, built and run through its run.sh (mpirun)
on byte-level shards of Debian's fortunes, with dropout so that the random
stream matters:

- exact resume: a run killed with kill -9 (the whole job: run.sh, mpirun and
  every rank) at a random step after a checkpoint, then resumed with
  --resume, gives per-step losses bitwise equal to an uninterrupted run's,
  for pp = 2, tp x pp x dp = 2 x 2 x 2 with ZeRO-1 and lynx-heu, and a
  Llama-style model; no PATH.tmp is left once the resumed run is done;
- preemption: SIGTERM to run.sh, or SIGINT to its process group (Ctrl-C),
  lets every rank finish its step, save and exit 0 with a message; the run
  resumed from that checkpoint gives the uninterrupted run's losses;
- both for PipeDream-2BW too (pp = 2), whose steps overlap and whose state
  holds two weight versions: a checkpoint, and a stop signal, drain its
  pipeline first, and the resumed losses are the uninterrupted run's;
- a non-finite loss stops the run with a message and a non-zero status; the
  checkpoint on disk is the last good one (its step read from the file's
  header, whose layout docs/checkpoints.md gives);
- a --save path that cannot be written is refused before step 1;
- run.sh's preflight: a data glob that matches nothing, or a job whose ranks
  need more memory than the machine has (GPT 7B on the CPU: 290 GiB), stops
  run.sh before mpirun starts a rank, naming what is wrong;
- a rank that dies (kill -9 of stage 1's process alone) takes the job down
  within seconds, mpirun naming the rank, with no checkpoint written after;
- a stage stopped by the kernel (SIGSTOP: alive and silent, as a wedged
  peer is) leaves the others waiting: the watchdog of a waiting rank names
  what it waits on (the receive, its micro-batch and stage) and the job ends
  within seconds of the timeout, with no checkpoint written after the stop;
- resharding: a checkpoint saved under one plan (GPT pp 2, or tp 2 x pp 2 x
  dp 2 with ZeRO-1; Llama pp 2, or tp 2 x dp 2 with ZeRO-1) and resumed under
  the other continues with the other plan's uninterrupted losses, within
  the bound of a change of plan (the sums run in another order).
- interleaved 1F1B (a 4-layer GPT, two chunks per stage at pp 2): kill -9
  and resume reproduce its losses exactly, and a checkpoint moves between
  it and 1F1B of the same model both ways (a stage's layers are not
  consecutive there: the state's tensors go by name).

The expected losses are those of the uninterrupted run of the same program,
never numbers taken from the program under test's own resumed output.
"""
import os
import re
import random
import signal
import struct
import subprocess
import sys
import tempfile
import time

from tap import check, exit_status
from training_metrics import TRAINING_CFLAGS, losses_by_step as losses

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LYNXGEN = os.path.join(ROOT, "bin", "lynxgen")
FORTUNES = "/usr/share/games/fortunes/fortunes"
STEPS = 20
EVERY = 4  # --checkpoint-every
PREEMPTION_STEPS = 60  # three times the steps of the other runs: the signal comes long before the end

GPT = """#include <lynx.h>
static const struct lx_model model = { .vocab = 256, .seq_len = 64, .layers = 2, .hidden = 64, .heads = 2,
  .dropout = 0.1, .tied_embeddings = 1 };
static const struct lx_cluster cluster = { .gpu = GPU_A100_80GB, .gpus_per_node = 8 };
static const struct lx_parallel parallel = { .tp = 1, .pp = 1, .dp = 1, .micro_batch = 2, .global_batch = 8,
  .schedule = SCHEDULE_1F1B };
static const struct lx_training training = { .steps = 10, .lr = 3e-3, .min_lr = 3e-4, .warmup_steps = 3,
  .lr_schedule = LR_COSINE, .weight_decay = 0.1, .grad_clip = 1.0, .seed = 7, .dtype = DTYPE_FP32 };
tensor prologue(tensor tokens) { return dropout(add(embedding(tokens, 256, 64), position_embedding(tokens, 64))); }
tensor block(tensor x) {
  tensor a = attention(linear(layernorm(x), 192), 2, 2);
  x = add(x, dropout(linear(a, 64)));
  return add(x, dropout(linear(gelu(linear(layernorm(x), 256)), 64)));
}
tensor epilogue(tensor x, tensor targets) { return cross_entropy(lm_head(layernorm(x), 256), targets); }
"""

LLAMA = """#include <lynx.h>
static const struct lx_model model = { .vocab = 256, .seq_len = 64, .layers = 2, .hidden = 64, .heads = 4,
  .kv_heads = 2, .ffn_hidden = 128, .dropout = 0.0, .tied_embeddings = 1 };
static const struct lx_cluster cluster = { .gpu = GPU_A100_80GB, .gpus_per_node = 8 };
static const struct lx_parallel parallel = { .tp = 1, .pp = 2, .dp = 1, .micro_batch = 2, .global_batch = 8,
  .schedule = SCHEDULE_1F1B };
static const struct lx_training training = { .steps = 10, .lr = 3e-3, .min_lr = 3e-4, .warmup_steps = 3,
  .lr_schedule = LR_COSINE, .weight_decay = 0.1, .grad_clip = 1.0, .seed = 7, .dtype = DTYPE_FP32 };
tensor prologue(tensor tokens) { return embedding(tokens, 256, 64); }
tensor block(tensor x) {
  tensor qkv = rope(linear_nobias(rmsnorm(x), (4 + 2 * 2) * 16), 4, 2);
  x = add(x, linear_nobias(flash_attention(qkv, 4, 2), 64));
  return add(x, linear_nobias(swiglu(linear_nobias(rmsnorm(x), 2 * 128)), 64));
}
tensor epilogue(tensor x, tensor targets) { return cross_entropy(lm_head(rmsnorm(x), 256), targets); }
"""

# Offsets in the checkpoint's run header (lx_state_run, templates/common/lx_state.h).
MAGIC = b"LYNXSTAT"
STEP_OFFSET = 40


def environment():
    return dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")


def run(cmd, cwd):
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=environment())


def generate(work, name, model_file, *args):
    out = os.path.join(work, name)
    r = run([LYNXGEN, model_file, "-o", out, "--target", "cpu", *args], work)
    if r.returncode == 0:
        r = run(["make", "-s", "-j2", "-C", out, TRAINING_CFLAGS], work)
    if r.returncode != 0:
        print(r.stdout[-3000:] + r.stderr[-3000:])
        return None
    return out


def command(program, work, metrics, *args, steps=STEPS):
    return [os.path.join(program, "run.sh"), "--data", os.path.join(work, "data/train_*.bin"), "--eval-interval",
            "0", "--steps", str(steps), "--metrics", metrics, *args]


def terminal_signals():
    """SIGINT as a terminal's foreground job has it: a test run in the
    background (make test &) inherits SIGINT ignored, and bash cannot trap a
    signal that was ignored when it started, so run.sh would never see it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(program, work, metrics, *args, steps=STEPS):
    """run.sh in a session of its own, so that the whole job can be killed at once."""
    log = open(metrics + ".log", "w")
    return subprocess.Popen(command(program, work, metrics, *args, steps=steps), cwd=work, stdout=log,
                            stderr=subprocess.STDOUT, env=environment(), start_new_session=True,
                            preexec_fn=terminal_signals)


def saved_step(path):
    """The step a checkpoint holds; None when there is none."""
    if not os.path.exists(path):
        return None
    with open(path, "rb") as f:
        header = f.read(64)
    if header[:8] != MAGIC:
        return None
    return struct.unpack_from("<i", header, STEP_OFFSET)[0]


def wait_for_step(job, metrics, step, limit=120):
    deadline = time.time() + limit
    while time.time() < deadline and job.poll() is None:
        if len(losses(metrics)) >= step:
            return True
        time.sleep(0.005)
    return False


def job_processes(program):
    """The stage programs of this directory still alive (a kill must leave none)."""
    alive = []
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and os.readlink("/proc/%s/exe" % pid).startswith(program + "/"):
                alive.append(pid)
        except OSError:
            pass
    return alive


def kill_job(job, program):
    """Every process of the job at once: run.sh starts mpirun in a session of
    its own and Open MPI the ranks in process groups of their own, so killing
    run.sh's group alone would orphan them."""
    try:
        with open("/proc/%d/task/%d/children" % (job.pid, job.pid)) as f:
            mpirun = f.read().split()
    except OSError:  # run.sh has exited
        mpirun = []
    for pid in mpirun + job_processes(program):
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        os.killpg(job.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    job.wait()
    deadline = time.time() + 10
    while job_processes(program) and time.time() < deadline:
        time.sleep(0.05)
    return not job_processes(program)


def exact_resume(work, name, program, reference, rng):
    """kill -9 at a random step after the first checkpoint, resume, compare."""
    metrics, ckpt = os.path.join(program, "killed.jsonl"), os.path.join(program, "ck.bin")
    kill_at = rng.randint(EVERY + 1, STEPS - 8)  # the job still runs for 8 steps: time to kill it
    job = start(program, work, metrics, "--save", ckpt, "--checkpoint-every", str(EVERY))
    reached = wait_for_step(job, metrics, kill_at)
    gone = kill_job(job, program)
    killed_at = max(losses(metrics), default=0)
    step = saved_step(ckpt)
    check(reached and gone and step is not None and EVERY <= step <= killed_at < STEPS,
          "%s: kill -9 of the whole job after step %d of %d leaves no process and the checkpoint of step %s" % (
              name, killed_at, STEPS, step))
    r = run(command(program, work, metrics, "--save", ckpt, "--checkpoint-every", str(EVERY), "--resume", ckpt),
            work)
    got = losses(metrics)
    check(r.returncode == 0 and got == reference,
          "%s: resumed from step %s, the per-step losses equal the uninterrupted run's bitwise" % (name, step))
    if r.returncode != 0 or got != reference:
        print((r.stdout + r.stderr)[-2000:])
        print("resumed %s\nreference %s" % (got, reference))
    check(not os.path.exists(ckpt + ".tmp") and saved_step(ckpt) == STEPS,
          "%s: after the resumed run, %s holds step %d and no .tmp is left" % (name, os.path.basename(ckpt), STEPS))


RESHARD_BOUND = 1e-5  # another plan sums in another order (cpu_training_test's CROSS_PARALLEL_BOUND)


def resharded_resume(work, writer_name, writer, reader_name, reader, reference):
    """kill -9 after a checkpoint of one plan, resume under another: the
    reader's plan continues from the saved step with its own uninterrupted
    losses, within the bound of a change of plan. A change of tp, pp or dp
    is announced ("resuming ..., saved by tp x pp x dp ..."); a change of
    schedule alone (1F1B and interleaved: the same training) is not."""
    tag = (writer_name + "-to-" + reader_name).replace(" ", "_").replace("=", "")
    metrics, ckpt = os.path.join(work, tag + ".jsonl"), os.path.join(work, tag + ".bin")
    job = start(writer, work, metrics, "--save", ckpt, "--checkpoint-every", str(EVERY))
    reached = wait_for_step(job, metrics, EVERY + 1)
    gone = kill_job(job, writer)
    step = saved_step(ckpt)
    resumed = os.path.join(work, tag + "-resumed.jsonl")
    r = run(command(reader, work, resumed, "--resume", ckpt), work)
    got = losses(resumed)
    worst = max((abs(got[s] - reference[s]) / abs(reference[s]) for s in got), default=float("inf"))
    announced = "resuming" in r.stdout or "interleaved" in writer_name + reader_name
    ok = (reached and gone and step is not None and r.returncode == 0 and announced and
          sorted(got) == list(range(step + 1, STEPS + 1)) and worst <= RESHARD_BOUND)
    check(ok, "saved under %s at step %s, resumed under %s: its losses continue within %.0e (worst %.2e)" % (
        writer_name, step, reader_name, RESHARD_BOUND, worst))
    if not ok:
        print((r.stdout + r.stderr)[-2000:])


def wrapped_resharding(work, writer, reader):
    """A dp 1 run whose data wrapped around: 5 windows of B*T+1 tokens, 4 a
    step, so that after 2 steps it stands at window 3 (0-3, then 4, 0-2).
    Under dp 2 replica 0 reads even windows only: no plan of dp 2 continues
    there, and the refusal says so rather than blame the data."""
    data = os.path.join(work, "five-windows.bin")
    with open(data, "wb") as f:
        f.write(struct.pack("<256i", *([20240520, 1, 5 * 128 + 1] + [0] * 253)))
        f.write(struct.pack("<641H", *[(7 * i) % 256 for i in range(641)]))
    ckpt, metrics = os.path.join(work, "wrapped.bin"), os.path.join(work, "wrapped.jsonl")
    r = run(command(writer, work, metrics, "--data", data, "--save", ckpt, steps=2), work)
    if r.returncode != 0:
        print((r.stdout + r.stderr)[-2000:])
    r = run([os.path.join(reader, "run.sh"), "--data", data, "--steps", "0", "--resume", ckpt, "--val-data", data,
             "--val-batches", "1"], work)
    check(r.returncode == 1 and "only dp 1 continues, since the data wrapped around: resume with dp 1" in r.stderr,
          "a dp 1 checkpoint at window 3 of 5 (the data wrapped) under dp 2: refused, saying only dp 1 continues (%s)"
          % r.stderr.strip()[-300:])


def uninterrupted(work, program, steps=STEPS):
    metrics = os.path.join(program, "reference-%d.jsonl" % steps)
    r = run(command(program, work, metrics, steps=steps), work)
    if r.returncode != 0:
        print((r.stdout + r.stderr)[-2000:])
    return losses(metrics) if r.returncode == 0 else None


def preemption(work, program, reference, sig):
    """SIGTERM to run.sh, as a batch system or `kill` sends it; SIGINT to its
    process group, as a terminal's Ctrl-C sends it. The run is PREEMPTION_STEPS
    long (`reference` is its uninterrupted losses), so that the signal cannot
    come after its last step however fast the steps are."""
    name = signal.Signals(sig).name
    metrics, ckpt = os.path.join(program, name + ".jsonl"), os.path.join(program, name + ".bin")
    job = start(program, work, metrics, "--save", ckpt, steps=PREEMPTION_STEPS)
    reached = wait_for_step(job, metrics, 3)
    if sig == signal.SIGINT:
        os.killpg(job.pid, sig)
    else:
        job.send_signal(sig)
    status = job.wait(timeout=120)
    with open(metrics + ".log") as f:
        log = f.read()
    stopped = max(losses(metrics), default=0)
    step = saved_step(ckpt)
    check(reached and status == 0 and "stopped after step %d" % stopped in log and step == stopped < PREEMPTION_STEPS,
          "%s: every rank finishes its step (%d), saves it and exits 0 with a message (status %s)" % (
              name, stopped, status))
    if status != 0 or step != stopped:
        print(log[-2000:])
    r = run(command(program, work, metrics, "--resume", ckpt, steps=PREEMPTION_STEPS), work)
    check(r.returncode == 0 and losses(metrics) == reference,
          "%s: the run resumed from its checkpoint gives the uninterrupted run's losses bitwise" % name)


def non_finite(work, program):
    """A learning rate of 1e38 turns the weights huge after step 1: the next
    loss is not finite. The checkpoint of step 1 must stay as it was."""
    metrics, ckpt = os.path.join(program, "inf.jsonl"), os.path.join(program, "inf.bin")
    r = run(command(program, work, metrics, "--save", ckpt, "--checkpoint-every", "1", "--lr", "1e38"), work)
    good = [s for s, loss in losses(metrics).items() if loss is not None]
    step = saved_step(ckpt)
    check(r.returncode != 0 and "stopping without saving" in r.stderr,
          "a non-finite loss stops the run with a message and a non-zero status (%d)" % r.returncode)
    check(good and step == max(good) and not os.path.exists(ckpt + ".tmp"),
          "after a non-finite loss the checkpoint is the last good step's (%s; last finite loss at step %s)" % (
              step, max(good) if good else None))


def save_preflight(work, program):
    metrics = os.path.join(program, "preflight.jsonl")
    afile = os.path.join(work, "a-file")
    open(afile, "w").close()
    for path, why in ((os.path.join(work, "no-such-dir", "ck.bin"), "No such file"),
                      (os.path.join(afile, "ck.bin"), "not a directory"),
                      (work, "is a directory")):
        r = run(command(program, work, metrics, "--save", path), work)
        check(r.returncode == 1 and "--save %s" % path in r.stderr and why in r.stderr and "step" not in r.stdout,
              "--save %s is refused before step 1 (%s)" % (os.path.relpath(path, work), why))
        if r.returncode != 1 or why not in r.stderr:
            print((r.stdout + r.stderr)[-1500:])
    # a save renames a new file over PATH and writes PATH.tmp first: a link or a pipe at either is refused
    # before step 1, and the file a link names is left as it was
    victim = os.path.join(work, "victim")
    with open(victim, "w") as f:
        f.write("another file of the user's\n")
    os.symlink(victim, os.path.join(work, "linked.bin"))
    os.symlink(victim, os.path.join(work, "tmp-linked.bin.tmp"))
    os.mkfifo(os.path.join(work, "pipe.bin"))
    hf_linked = os.path.join(work, "hf-linked")
    os.makedirs(hf_linked)
    os.symlink(victim, os.path.join(hf_linked, "config.json"))
    for flag, name, culprit, kind in (("--save", "linked.bin", "linked.bin", "a symbolic link"),
                                      ("--save", "tmp-linked.bin", "tmp-linked.bin.tmp", "a symbolic link"),
                                      ("--save", "pipe.bin", "pipe.bin", "not a regular file"),
                                      ("--export-hf", "hf-linked", "hf-linked/config.json", "a symbolic link")):
        path = os.path.join(work, name)
        r = run(command(program, work, metrics, flag, path), work)
        said = "%s is %s" % (os.path.join(work, culprit), kind)
        check(r.returncode == 1 and said in r.stderr and "step" not in r.stdout,
              "%s %s is refused before step 1: %s is %s" % (flag, name, culprit, kind))
        if r.returncode != 1 or said not in r.stderr:
            print((r.stdout + r.stderr)[-1500:])
    with open(victim, "rb") as f:
        check(f.read() == b"another file of the user's\n", "the file the links name is as it was")
    # the check of --save's directory never opens a file of the user's: not PATH.tmp, which the save
    # itself writes later, and nothing of its own is left beside it
    probed = os.path.join(work, "probed")
    os.makedirs(probed)
    users = os.path.join(probed, "ck.bin.tmp")
    with open(users, "w") as f:
        f.write("the user's own notes\n")
    r = subprocess.run([os.path.join(program, "stage0"), "--preflight", "--save", os.path.join(probed, "ck.bin")],
                       cwd=work, capture_output=True, text=True, env=environment())
    kept = open(users).read() == "the user's own notes\n"
    check(r.returncode == 0 and kept and os.listdir(probed) == ["ck.bin.tmp"],
          "--save's preflight leaves the user's ck.bin.tmp as it was, and no file of its own (%s)" % (
              sorted(os.listdir(probed))))
    if r.returncode != 0:
        print((r.stdout + r.stderr)[-1500:])


def launch_preflight(work, program):
    metrics = os.path.join(program, "no-data.jsonl")
    r = run(command(program, work, metrics)[:1] + ["--data", os.path.join(work, "nothing_*.bin"), "--steps", "1"], work)
    check(r.returncode == 1 and "no file matches" in r.stderr and "nothing_*.bin" in r.stderr and
          "mpirun" not in r.stdout + r.stderr and not os.path.exists(metrics),
          "run.sh's preflight stops a job whose data glob matches nothing before mpirun (%d: %s)" % (
              r.returncode, r.stderr.strip()[-200:]))
    big = generate(work, "gpt7b-cpu", os.path.join(ROOT, "examples", "gpt-7b.model"), "--tp", "1", "--pp", "1",
                   "--dp", "1", "--allow-oom-plan")
    r = run([os.path.join(big, "run.sh"), "--data", os.path.join(work, "data/train_*.bin"), "--eval-interval", "0",
             "--steps", "1"], work) if big else None
    with open("/proc/meminfo") as f:
        available = [int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:")][0]
    # what the program's preflight says one rank needs; more than 7e9 * 16 bytes (fp32 weights, gradients,
    # two AdamW moments), more than this machine has
    needs = [int(w) for line in (r.stdout if r else "").splitlines() if line.startswith("preflight:")
             for w in line.split() if w.isdigit()]
    check(r is not None and needs and needs[-1] > max(available, 7e9 * 16) and r.returncode == 1 and
          "need %d bytes" % needs[-1] in r.stderr and
          "bytes available" in r.stderr and "mpirun" not in r.stdout + r.stderr,
          "run.sh's preflight stops a job that needs more memory than this machine has (%s)" % (
              r.stderr.strip()[-200:] if r else "no build"))


def stage_pids(program, stage):
    return [int(pid) for pid in job_processes(program)
            if os.readlink("/proc/%s/exe" % pid) == os.path.join(program, "stage%d" % stage)]


def signal_stage_1(work, program, name, sig, *args):
    """Trains with --save every step, sends sig to stage 1's process after
    step 3 and waits for the job to end. Returns whether stage 1 got it and
    how the job ended: (hit, status or None, seconds after the signal, log)."""
    metrics, ckpt = os.path.join(program, name + ".jsonl"), os.path.join(program, name + ".bin")
    job = start(program, work, metrics, "--save", ckpt, "--checkpoint-every", "1", *args, steps=PREEMPTION_STEPS)
    hit = wait_for_step(job, metrics, 3) and stage_pids(program, 1)
    for pid in hit or []:
        os.kill(pid, sig)
    last_step, sent = max(losses(metrics), default=0), time.time()
    try:
        status = job.wait(timeout=30)
    except subprocess.TimeoutExpired:
        status = None
    took = time.time() - sent
    with open(metrics + ".log") as f:
        log = f.read()
    check(saved_step(ckpt) is not None and saved_step(ckpt) <= last_step,
          "%s: no checkpoint after the signal (saved step %s, last step reported before it %d)" % (
              name, saved_step(ckpt), last_step))
    check(kill_job(job, program), "%s: no rank of the job is left" % name)
    return bool(hit), status, took, log


def dead_rank(work, program):
    hit, status, took, log = signal_stage_1(work, program, "dead-rank", signal.SIGKILL)
    check(hit and status not in (None, 0) and took < 10 and "rank 1" in log and "signal 9" in log,
          "a rank killed with kill -9: the job ends %.1f s later (status %s), mpirun naming rank 1" % (took, status))


def watchdog(work, program):
    timeout = 2
    hit, status, took, log = signal_stage_1(work, program, "stopped-rank", signal.SIGSTOP, "--watchdog", str(timeout))
    named = [line for line in log.splitlines() if line.startswith("lynx: watchdog: rank 0 (stage 0) made no progress")]
    # it waits on stage 1's message or loss, in the tied embedding's all-reduce with it, or in a collective of
    # every rank that stage 1 never reaches: a barrier of the save every step makes, the stop agreement
    waits_on_stage_1 = named and any(what in named[0] for what in (
        "stage 1", "tied-embedding", "the save of", "agreement on stop signals"))
    check(hit and status not in (None, 0) and waits_on_stage_1,
          "a stopped stage: rank 0's watchdog names what it waits on and the job ends %.1f s after the stop "
          "(--watchdog %d; status %s): %s" % (took, timeout, status, named[0] if named else log[-1500:]))
    # then the training thread's stack, frames of rank 0's program among them (program(+offset))
    lines = log.splitlines()
    head = [i for i, line in enumerate(lines) if line == "lynx: watchdog: the training thread's stack:"]
    frames = lines[head[0] + 1:head[0] + 65] if head else []
    own = [f for f in frames if re.match(r"^\S*/stage0\((\w*)\+0x[0-9a-f]+\)\[0x[0-9a-f]+\]$", f)]
    check(len(own) >= 2, "a stopped stage: the watchdog prints the waiting thread's stack, %d frames of stage0 "
          "(%s)" % (len(own), " | ".join(frames[:6]) if frames else log[-800:]))


def main():
    if not os.path.exists(FORTUNES):
        check(False, "fortunes corpus installed (scripts/deps.sh installs fortunes-min)")
        return
    seed = int(os.environ.get("LX_RESUME_SEED", time.time()))
    print("# kill steps drawn with seed %d (LX_RESUME_SEED=%d repeats them)" % (seed, seed))
    rng = random.Random(seed)
    work = tempfile.mkdtemp(prefix="lynx-resume-")
    r = run([LYNXGEN, "tokenize", FORTUNES, "-o", os.path.join(work, "data")], work)
    check(r.returncode == 0, "lynxgen tokenize makes byte-level shards of fortunes")
    for name, text in (("gpt.model", GPT), ("llama.model", LLAMA)):
        with open(os.path.join(work, name), "w") as f:
            f.write(text)
    gpt, llama = os.path.join(work, "gpt.model"), os.path.join(work, "llama.model")
    gpt4 = os.path.join(work, "gpt4.model")  # interleaved 1F1B at pp 2: two chunks of one layer per stage
    with open(gpt4, "w") as f:
        f.write(GPT.replace(".layers = 2", ".layers = 4"))
    plans = (("pp=2", gpt, ("--pp", "2")),
             ("tp=2 pp=2 dp=2 ZeRO-1 lynx-heu", gpt,
              ("--tp", "2", "--pp", "2", "--dp", "2", "--zero", "--policy", "lynx-heu", "--gpu-memory", "0.0015")),
             ("2bw pp=2", gpt, ("--pp", "2", "--schedule", "2bw")),
             ("4 layers pp=2", gpt4, ("--pp", "2")),
             ("4 layers interleaved pp=2", gpt4, ("--pp", "2", "--schedule", "interleaved")),
             ("llama pp=2", llama, ("--pp", "2")),
             ("llama tp=2 dp=2 ZeRO-1", llama, ("--tp", "2", "--pp", "1", "--dp", "2", "--zero")))
    built = {}
    for name, model, args in plans:
        program = generate(work, name.replace(" ", "_").replace("=", ""), model, *args)
        reference = uninterrupted(work, program) if program else None
        check(reference is not None and len(reference) == STEPS, "%s: generates, builds and trains %d steps" % (
            name, STEPS))
        if reference is None:
            continue
        built[name] = (program, reference)
        if name in ("llama tp=2 dp=2 ZeRO-1", "4 layers pp=2"):
            continue  # the resharding below resumes it
        exact_resume(work, name, program, reference, rng)
        if name == "2bw pp=2":  # a stop between overlapping steps: the pipeline drains first
            long_reference = uninterrupted(work, program, steps=PREEMPTION_STEPS)
            check(long_reference is not None and len(long_reference) == PREEMPTION_STEPS,
                  "%s: trains %d steps uninterrupted" % (name, PREEMPTION_STEPS))
            preemption(work, program, long_reference, signal.SIGTERM)
        if name == "pp=2":
            long_reference = uninterrupted(work, program, steps=PREEMPTION_STEPS)
            check(long_reference is not None and len(long_reference) == PREEMPTION_STEPS,
                  "%s: trains %d steps uninterrupted" % (name, PREEMPTION_STEPS))
            preemption(work, program, long_reference, signal.SIGTERM)
            preemption(work, program, long_reference, signal.SIGINT)
            non_finite(work, program)
            save_preflight(work, program)
            launch_preflight(work, program)
            dead_rank(work, program)
            watchdog(work, program)
    # A checkpoint moves between plans (tp, pp, dp, ZeRO-1): users change plans between runs.
    for writer, reader in (("pp=2", "tp=2 pp=2 dp=2 ZeRO-1 lynx-heu"), ("tp=2 pp=2 dp=2 ZeRO-1 lynx-heu", "pp=2"),
                           ("llama pp=2", "llama tp=2 dp=2 ZeRO-1"), ("llama tp=2 dp=2 ZeRO-1", "llama pp=2"),
                           ("4 layers pp=2", "4 layers interleaved pp=2"), ("4 layers interleaved pp=2", "4 layers pp=2")):
        if writer in built and reader in built:
            resharded_resume(work, writer, built[writer][0], reader, *built[reader])
    if "pp=2" in built and "tp=2 pp=2 dp=2 ZeRO-1 lynx-heu" in built:
        wrapped_resharding(work, built["pp=2"][0], built["tp=2 pp=2 dp=2 ZeRO-1 lynx-heu"][0])


if __name__ == "__main__":
    main()
    sys.exit(exit_status())
