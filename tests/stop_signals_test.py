"""A stop signal ends a CPU run cleanly whenever it comes (docs/checkpoints.md,
Stopping), on examples/tiny.model (two stages) through its run.sh:

- SIGTERM, SIGINT or SIGHUP sent to run.sh at moments from its start to
  its first steps (while the preflight runs, while mpirun starts the ranks,
  while they start MPI): the job always ends within seconds, exit 0 (or,
  sent before the shell reached the script's first line, run.sh ends of
  it before starting anything), with
  the message naming the signal sent (not the SIGUSR1 that run.sh relays),
  no rank killed by the relayed signal and none left; a checkpoint only
  where a step was trained, of the step the message names;
- mpirun stopped (alive, deaf) while its ranks are gone: run.sh ends it
  within its bound, with a message, rather than wait forever;
- a metrics line cut short (a full disk, a crash mid-write) is dropped when
  the resumed run opens the file: every line of it is a JSON object, each
  step once up to the stop and once after;
- a run that diverges names the checkpoint that stays only where one
  exists, and says nan, not -nan.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

from tap import check, exit_status
from training_metrics import ROOT, fortunes_shards, generate

STEPS = 1000  # far more than a test waits for: a signal that is lost shows as a run that goes on
LIMIT = 30  # seconds a stopped job may take to end
DELAYS = ((signal.SIGTERM, 0.0), (signal.SIGINT, 0.05), (signal.SIGTERM, 0.1), (signal.SIGHUP, 0.2),
          (signal.SIGTERM, 0.25), (signal.SIGTERM, 0.3), (signal.SIGINT, 0.35), (signal.SIGTERM, 0.45),
          (signal.SIGHUP, 0.6), (signal.SIGTERM, 0.8))
MAGIC, STEP_OFFSET = b"LYNXSTAT", 40  # the checkpoint's run header (templates/common/lx_state.h)


def environment():
    return dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")


def terminal_signals():
    """The stop signals as a terminal's foreground job has them: a test started
    in the background inherits SIGINT ignored, one under nohup SIGHUP, and a
    shell cannot trap a signal ignored when it started."""
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def start(program, work, name, *args, steps=STEPS):
    """run.sh in a session of its own; its output in NAME.log."""
    log = open(os.path.join(work, name + ".log"), "w")
    cmd = [os.path.join(program, "run.sh"), "--data", os.path.join(work, "data/train_*.bin"), "--eval-interval", "0",
           "--steps", str(steps), "--metrics", os.path.join(work, name + ".jsonl"), *args]
    return subprocess.Popen(cmd, cwd=work, stdout=log, stderr=subprocess.STDOUT, env=environment(),
                            start_new_session=True, preexec_fn=terminal_signals)


def read(work, name):
    with open(os.path.join(work, name)) as f:
        return f.read()


def saved_step(path):
    """The step a checkpoint holds; None when there is none."""
    if not os.path.exists(path):
        return None
    with open(path, "rb") as f:
        header = f.read(64)
    return int.from_bytes(header[STEP_OFFSET:STEP_OFFSET + 4], "little") if header[:8] == MAGIC else None


def job_processes(program):
    """The stage programs of this directory still alive."""
    alive = []
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and os.readlink("/proc/%s/exe" % pid).startswith(program + "/"):
                alive.append(int(pid))
        except OSError:
            pass
    return alive


def children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def end(job, program, limit=LIMIT):
    """How the job ended: its status, or None when it was still running after
    `limit` seconds (then every process of it is killed)."""
    try:
        return job.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        for pid in children(job.pid) + job_processes(program):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        job.kill()
        job.wait()
        return None


def wait_for_lines(job, metrics, n, limit=60):
    deadline = time.time() + limit
    while time.time() < deadline and job.poll() is None:
        if os.path.exists(metrics) and read(*os.path.split(metrics)).count("\n") >= n:
            return True
        time.sleep(0.01)
    return False


def early_stop(program, work, sig, delay):
    """sig to run.sh `delay` s after it starts (SIGINT to its process group,
    as a terminal's Ctrl-C sends it)."""
    signame = signal.Signals(sig).name
    name = "early-%s-%g" % (signame, delay)
    ckpt = os.path.join(work, name + ".ck")
    job = start(program, work, name, "--save", ckpt)
    time.sleep(delay)
    sent = time.time()
    if sig == signal.SIGINT:
        os.killpg(job.pid, sig)
    else:
        job.send_signal(sig)
    status = end(job, program)
    took = time.time() - sent
    log = read(work, name + ".log")
    said = [line for line in log.splitlines() if "asked to stop" in line]
    trained = re.search(r"stopped after step (\d+)", said[0]) if said else None
    if status == -sig and not log:  # before run.sh's first line, which traps it: nothing had started
        check(not job_processes(program), "%s %.2f s after run.sh starts: it ends before it started anything" % (
            signame, delay))
        return
    clean = (status == 0 and len(said) == 1 and "(%s)" % signame in said[0] and "exited on signal" not in log and
             saved_step(ckpt) == (int(trained.group(1)) if trained else None))
    check(clean, "%s %.2f s after run.sh starts: the job ends %.1f s later, exit 0, naming %s; %s (status %s)" % (
        signame, delay, took, signame, said[0] if said else "no stop message", status))
    if not clean:
        print(log[-2500:])
    deadline = time.time() + 5  # a rank killed at LIMIT takes a moment to go
    while job_processes(program) and time.time() < deadline:
        time.sleep(0.05)
    check(not job_processes(program), "%s %.2f s after the start: no rank of the job is left" % (signame, delay))


def deaf_mpirun(program, work):
    """mpirun stopped (SIGSTOP: it can neither relay the stop nor notice its
    ranks die) and its ranks killed: run.sh ends it within its bound."""
    name = "deaf-mpirun"
    job = start(program, work, name, "--save", os.path.join(work, name + ".ck"))
    started = wait_for_lines(job, os.path.join(work, name + ".jsonl"), 2)
    mpirun = children(job.pid)
    ranks = job_processes(program)
    for pid in mpirun:
        os.kill(pid, signal.SIGSTOP)
    job.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    sent = time.time()
    for pid in ranks:
        os.kill(pid, signal.SIGKILL)
    status = end(job, program)
    took = time.time() - sent
    log = read(work, name + ".log")
    check(started and mpirun and status == 1 and "mpirun has not" in log and took < 20,
          "an mpirun that outlives its ranks is ended by run.sh %.1f s after they die, with a message (status %s)" %
          (took, status))
    if status != 1:
        print(log[-1500:])


def parsed_lines(metrics):
    """Each line of the file as JSON, None for one that is not."""
    records = []
    with open(metrics) as f:
        for line in f:
            try:
                records.append(json.loads(line))
            except ValueError:
                records.append(None)
    return records


def cut_line_resume(program, work):
    """A stop after a few steps, a partial line appended as a full disk leaves
    it, and the resumed run to its end."""
    steps, name = 20, "cut-line"
    metrics, ckpt = os.path.join(work, name + ".jsonl"), os.path.join(work, name + ".ck")
    job = start(program, work, name, "--save", ckpt, steps=steps)
    wait_for_lines(job, metrics, 3)
    job.send_signal(signal.SIGTERM)
    status = end(job, program)
    stopped = saved_step(ckpt)
    log = read(work, name + ".log")
    check(status == 0 and stopped and "asked to stop (SIGTERM): stopped after step %d" % stopped in log,
          "SIGTERM mid-run: saved after step %s, the message naming SIGTERM (status %s)" % (stopped, status))
    with open(metrics, "a") as f:
        f.write('{"step":%d,"loss":4.12' % (stopped + 1))
    job = start(program, work, name + "-resumed", "--save", ckpt, "--resume", ckpt, "--metrics", metrics, steps=steps)
    status = end(job, program, limit=120)  # it trains to its end, a step a second on a loaded machine
    records = parsed_lines(metrics)
    numbers = [r["step"] if r else None for r in records]
    expected = list(range(1, (stopped or 0) + 1)) + list(range((stopped or 0) + 1, steps + 1))
    check(status == 0 and numbers == expected,
          "a metrics line cut short is dropped on resume: every line is JSON, steps 1-%s then %s-%d (got %s)" % (
              stopped, (stopped or 0) + 1, steps, numbers if numbers != expected else "so"))


def divergence(program, work):
    """--lr 1e4 without clipping: the gradient norm is nan at step 2."""
    for every, kept in (("2", False), ("1", True)):
        name = "diverged-every-" + every
        ckpt = os.path.join(work, name + ".ck")
        job = start(program, work, name, "--lr", "1e4", "--warmup", "0", "--grad-clip", "0", "--save", ckpt,
                    "--checkpoint-every", every, steps=30)
        status = end(job, program, limit=120)
        log = read(work, name + ".log")
        said = [line for line in log.splitlines() if "stopping without saving" in line]
        line = said[0] if said else ""
        right = ("the last good checkpoint stays in %s" % ckpt in line) if kept else (
            "stays in" not in line and "no checkpoint was saved" in line)
        check(status not in (0, None) and line and right and "-nan" not in log and os.path.exists(ckpt) == kept,
              "a diverged run with --checkpoint-every %s names %s: %s" % (
                  every, "the checkpoint that stays" if kept else "none, as none exists", line or log[-800:]))


def main():
    work = fortunes_shards("lynx-stop-")
    if work is None:
        return
    program = generate(work, "tiny", os.path.join(ROOT, "examples", "tiny.model"), quick=True)
    check(program is not None, "examples/tiny.model generates and builds for the CPU")
    if program is None:
        return
    for sig, delay in DELAYS:
        early_stop(program, work, sig, delay)
    deaf_mpirun(program, work)
    cut_line_resume(program, work)
    divergence(program, work)


if __name__ == "__main__":
    main()
    sys.exit(exit_status())
