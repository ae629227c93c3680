"""A CUDA training run resumes where it was killed (make test-gpu).

examples/tiny.model is generated for the CUDA target (one GPU: tp = pp = dp =
1) and trained STEPS steps twice without interruption (the two runs give
the determinism of the GPU program, printed and bounded); then a third run,
saving every EVERY steps, is killed with kill -9 (run.sh, mpirun and the
rank at once) after step KILL_AFTER and resumed with --resume: its per-step
losses after the checkpoint must equal the uninterrupted run's within
RESUME_BOUND, and no CKPT.tmp may be left.

Without a GPU it prints "skipped: no GPU" and exits 0. LX_RESUME_TARGET=cpu
runs the same flow on the CPU program, GPU or not, where the bound is 0 (bit
for bit, as tests/resume_test.py checks for more plans): that is how the
script itself is tested on machines without a GPU. LX_KIT_PHASE=prepare /
device builds the program here and runs it on a lent GPU (tests/cuda/gpu_kit.py).
"""
import os
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from tap import check, exit_status  # tests/tap.py
from training_metrics import losses_by_step as losses

import gpu_kit  # tests/cuda/gpu_kit.py

LYNXGEN = os.path.join(ROOT, "bin", "lynxgen")
MODEL = os.path.join(ROOT, "examples", "tiny.model")
FORTUNES = "/usr/share/games/fortunes/fortunes"
STEPS = 20
EVERY = 5
KILL_AFTER = 8

# The state a checkpoint holds is exact: the fp32 master weights, the AdamW
# moments, the step, the data position; the bf16 weights are the masters
# rounded to nearest, as every AdamW step leaves them. A resumed CUDA run
# therefore differs from an uninterrupted one only where the GPU program is
# not deterministic (a float sum whose order varies between runs), which
# the two uninterrupted runs measure. A lost moment moves the losses by
# ~4e-2 (measured on the CPU program, tests/resume_test.py's resharding with
# the moments left unread), so 2e-4 tells a broken resume from the
# nondeterminism of a few float atomics.
RESUME_BOUND = {"cuda": 2e-4, "cpu": 0.0}


def run(command, cwd):
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True)


def command(program, data, metrics, *args):
    return [os.path.join(program, "run.sh"), "--steps", str(STEPS), "--data", data, "--eval-interval", "0",
            "--metrics", metrics, *args]


def worst_difference(got, reference):
    if not got or any(step not in reference for step in got):
        return float("inf")
    return max(abs(got[s] - reference[s]) / abs(reference[s]) for s in got)


def killed_run(program, data, ckpt):
    """Trains with --save every EVERY steps, kill -9 of the whole job after KILL_AFTER."""
    metrics = os.path.join(program, "killed.jsonl")
    job = subprocess.Popen(command(program, data, metrics, "--save", ckpt, "--checkpoint-every", str(EVERY)),
                           cwd=program, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline and job.poll() is None and len(losses(metrics)) < KILL_AFTER:
        time.sleep(0.002)  # a CUDA step of tiny.model takes milliseconds
    reached = len(losses(metrics)) >= KILL_AFTER and job.poll() is None
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()
    subprocess.run(["pkill", "-KILL", "-f", program + "/stage"])
    return reached, metrics


def main():
    target = os.environ.get("LX_RESUME_TARGET", "cuda")
    if target == "cuda" and gpu_kit.RUNS_GPU and gpu_kit.gpu_count() == 0:
        print("skipped: no GPU")
        return
    with gpu_kit.work_dir("cuda_resume") as work:
        data = os.path.join(work, "data", "train_*.bin")
        program = os.path.join(work, target)
        if gpu_kit.BUILDS:
            r = run([LYNXGEN, "tokenize", FORTUNES, "-o", os.path.join(work, "data")], work)
            if r.returncode == 0:
                r = run([LYNXGEN, MODEL, "--target", target, "--tp", "1", "--pp", "1", "--dp", "1", "-o", program],
                        work)
            if r.returncode == 0:
                r = run(["make", "-C", program], work)
            if not check(r.returncode == 0, "%s: examples/tiny.model generates and builds" % target):
                print((r.stdout + r.stderr)[-2000:])
                return
        if target == "cuda" and not gpu_kit.RUNS_GPU:
            return
        runs = []
        for i in range(2):
            metrics = os.path.join(program, "uninterrupted%d.jsonl" % i)
            r = run(command(program, data, metrics), program)
            runs.append(losses(metrics) if r.returncode == 0 else {})
        bound = RESUME_BOUND[target]
        spread = worst_difference(runs[1], runs[0])
        check(len(runs[0]) == STEPS and spread <= bound,
              "%s: two uninterrupted runs of %d steps agree within %.0e (worst relative difference %.2e)" % (
                  target, STEPS, bound, spread))
        ckpt = os.path.join(program, "state.bin")
        reached, metrics = killed_run(program, data, ckpt)
        r = run(command(program, data, metrics, "--save", ckpt, "--checkpoint-every", str(EVERY), "--resume", ckpt),
                program)
        got = losses(metrics)
        worst = worst_difference(got, runs[0])
        ok = reached and r.returncode == 0 and sorted(got) == list(range(1, STEPS + 1)) and worst <= bound
        check(ok, "%s: killed with kill -9 after step %d and resumed, the losses equal the uninterrupted run's "
              "within %.0e (worst relative difference %.2e)" % (target, KILL_AFTER, bound, worst))
        if not ok:
            print((r.stdout + r.stderr)[-2000:])
        check(not os.path.exists(ckpt + ".tmp"), "%s: no %s.tmp is left" % (target, os.path.basename(ckpt)))


main()
sys.exit(exit_status())
