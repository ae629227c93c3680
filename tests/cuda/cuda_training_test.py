"""The CUDA program trains as the CPU program does (make test-gpu).

examples/tiny.model is generated for both targets (--tp 1 --dp 1, pp = 1, and
pp = 2 when nvidia-smi lists two GPUs or more), each is built with its own
Makefile and trained for STEPS steps through its run.sh on the same token
shard, validating every VAL_INTERVAL steps; the per-step losses and
validation losses of the two metrics.jsonl files must agree within
LOSS_BOUND, and the worst relative difference is printed.

Then every parallel layout runs on the one GPU, its ranks talking through
host memory (--comm host; NCCL refuses two ranks on a device): tiny and the
Llama at tp 2 x pp 2 x dp 2 with ZeRO-1, sequence parallelism and lynx-heu
recomputing in the pipeline's windows, and tiny at pp 4 with checkmate, each
within LOSS_BOUND of the CPU program of the same plan; the first one's saved
state reloads (--resume, --steps 0) to its last validation loss.

Without a GPU it prints "skipped: no GPU" and exits 0. LX_CPU_ONLY=1 runs
the CPU half alone, GPU or not (the shard, generation, builds, runs and
parsing), and the check below that the data can tell a data error from
bf16 rounding. LX_KIT_PHASE=prepare / device runs it in two halves, on
this machine and then on a lent GPU (tests/cuda/gpu_kit.py).

The data: window w of the shard (B*T = 128 tokens, the loader's unit) is
either one token repeated or uniform over the 256 bytes, by a seeded coin.
A step's loss is the mean over its four micro-batches, i.e. four windows,
so it depends on how many of them are constant: a CUDA program that read
other windows than the CPU one (another order, an offset, another replica's
share) differs by tens of percent in some steps, where bf16 rounding
differs by a fraction of a percent (LOSS_BOUND). The check measures it: the
CPU program reading the shard one window later must differ from the real
run by more than SHIFT_FACTOR x LOSS_BOUND in some step.
"""
import json
import os
import re
import random
import struct
import subprocess
import sys
from array import array

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from tap import check, exit_status  # tests/tap.py

import gpu_kit  # tests/cuda/gpu_kit.py

LYNXGEN = os.path.join(ROOT, "bin", "lynxgen")
MODEL = os.path.join(ROOT, "examples", "tiny.model")
WINDOW = 2 * 64  # tiny.model: micro_batch 2 x seq_len 64 tokens per loader window
STEPS = 20
VAL_INTERVAL = 10
VAL_BATCHES = 2

# bf16 (8 significant bits: unit roundoff u = 2^-9 ~ 2e-3) against the CPU's
# fp32 with fp64 reductions. The CUDA program rounds the initial weights and
# every activation to bf16, accumulating in fp32, with fp32 master weights
# and AdamW state like the CPU. One step's loss is a mean over 4 x 128 token
# losses whose rounding errors (a few u each, of either sign) mostly cancel:
# ~1e-4 relative at step 1. The runs then drift apart: rounding only the
# initial weights to bf16 moves the CPU's losses on this data by up to 1e-3
# relative by step 20 (measured), and rounding every activation each step
# adds a few times that. 2% leaves that margin, as llm.c does for its bf16
# GPT-2 against PyTorch's fp32 (0.05 at a loss of 5.3, test_gpt2.cu), and
# stays below what a data error does here (checked, SHIFT_FACTOR).
LOSS_BOUND = 0.02
SHIFT_FACTOR = 3

def write_shard(path, windows, seed, skip_windows=0):
    """An llm.c shard of windows + 1 windows (the loader needs B*T + 1 tokens
    per batch), each constant or uniform by a coin; skip_windows drops the
    first ones, as a loader reading one window late would see it."""
    rng = random.Random(seed)
    tokens = array("H")
    for _ in range(windows + 1):
        kinds = 1 if rng.random() < 0.5 else 256
        tokens.extend(rng.randrange(kinds) for _ in range(WINDOW))
    tokens = tokens[skip_windows * WINDOW:]
    if sys.byteorder != "little":
        tokens.byteswap()
    header = [20240520, 1, len(tokens)] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(tokens.tobytes())


def make_data(work):
    """Training shards (and a copy one window late), validation shards."""
    data = {}
    for name, skip in (("train", 0), ("late", 1)):
        if gpu_kit.BUILDS:
            os.makedirs(os.path.join(work, name))
            write_shard(os.path.join(work, name, "train_000000.bin"), 100, 1, skip)
        data[name] = os.path.join(work, name, "train_*.bin")
    if gpu_kit.BUILDS:
        write_shard(os.path.join(work, "val_000000.bin"), 8, 2)
    data["val"] = os.path.join(work, "val_*.bin")
    return data


def run(command, cwd):
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True)


def build_program(out, model, target, args, work, what):
    """lynxgen model --target target args -o out, built; `what` names the check."""
    if not gpu_kit.BUILDS:  # a kit on the GPU machine: built when it was prepared
        return out if check(os.path.exists(os.path.join(out, "run.sh")), what + " (when the kit was prepared)") else None
    r = run([LYNXGEN, model, "--target", target, *args, "-o", out], work)
    if r.returncode == 0:
        r = run(["make", "-C", out], work)
    check(r.returncode == 0, what)
    if r.returncode != 0:
        print("     " + (r.stdout + r.stderr)[-2000:].replace("\n", "\n     "))
        return None
    return out


def build(target, pp, work):
    """The program of examples/tiny.model for target with pp stages, built."""
    return build_program(os.path.join(work, "%s-pp%d" % (target, pp)), MODEL, target,
                         ("--tp", "1", "--dp", "1", "--pp", str(pp)), work,
                         "%s pp=%d: lynxgen generates examples/tiny.model and make builds it" % (target, pp))


def train(program, target, train_data, val_data, metrics, *args):
    """metrics.jsonl of a STEPS-step run, as a list of records (None: it failed).
    A kit's CPU runs are read back on the GPU machine, not run again."""
    r = None
    if target == "cuda" or gpu_kit.RUNS_CPU:
        r = run([os.path.join(program, "run.sh"), "--steps", str(STEPS), "--data", train_data, "--val-data",
                 val_data, "--eval-interval", str(VAL_INTERVAL), "--val-batches", str(VAL_BATCHES), "--metrics",
                 metrics, *args], program)
    records = []
    if (r is None or r.returncode == 0) and os.path.exists(metrics):
        with open(metrics) as f:
            records = [json.loads(line) for line in f]
    ok = len(records) == STEPS and all(rec["step"] == i + 1 for i, rec in enumerate(records))
    check(ok, "%s: %d steps on %s run, one metrics.jsonl line each" % (os.path.basename(program), STEPS, train_data))
    if not ok:
        if r is not None:
            print("     exit %d: %s" % (r.returncode, failure_report(r).replace("\n", "\n     ")))
        return None
    return records


def losses(records):
    """(what, value) of every loss and validation loss, in step order."""
    out = []
    for rec in records:
        out.append(("step %d loss" % rec["step"], rec["loss"]))
        if "val_loss" in rec:
            out.append(("step %d val_loss" % rec["step"], rec["val_loss"]))
    return out


def worst_relative_difference(a, b):
    """(difference, what) of the largest relative difference of the two runs' losses."""
    la, lb = losses(a), losses(b)
    if [what for what, _ in la] != [what for what, _ in lb]:
        return float("inf"), "a different set of losses"
    worst = (0.0, "")
    for (what, x), (_, y) in zip(la, lb):
        if x is None or y is None:  # a non-finite loss
            return float("inf"), what
        worst = max(worst, (abs(x - y) / abs(x), what))
    return worst


def check_data_discriminates(program, data, reference):
    late = train(program, "cpu", data["late"], data["val"], os.path.join(program, "late.jsonl"))
    if late is None:
        return
    shift, where = worst_relative_difference(reference, late)
    check(shift > SHIFT_FACTOR * LOSS_BOUND,
          "the data tells a data error from rounding: reading it one window late moves the %s by %.1f%% "
          "(> %d x the %.0f%% bound)" % (where, 100 * shift, SHIFT_FACTOR, 100 * LOSS_BOUND))


def build_and_train(target, pp, work, data):
    """The run's metrics records (None: it did not build or run); the first
    CPU program also checks that the data discriminates."""
    program = build(target, pp, work)
    if program is None or (target == "cuda" and not gpu_kit.RUNS_GPU):
        return None
    records = train(program, target, data["train"], data["val"], os.path.join(program, "metrics.jsonl"))
    if records and target == "cpu" and pp == 1:
        check_data_discriminates(program, data, records)
    return records


# Every parallel layout on one GPU: NCCL refuses two ranks on a device, so
# the CUDA ranks talk through host memory (--comm host, lx_cuda_comm.h); the
# schedule's streams and events stay as they are. lynx-heu's GPU memory is
# squeezed so that it recomputes in the pipeline's windows (without offload),
# or at pp 2 offloads to pinned host memory; ZB-H1's later
# stages run their linears' weight gradients as W passes in the drain; 2BW's
# steps overlap, and validation drains its pipeline; interleaved 1F1B sends
# around the ring of stages, each stage holding two chunks of layers.
LLAMA = os.path.join(ROOT, "tests", "equivalence", "llama.model")
WINDOWED = ("--tp", "2", "--pp", "2", "--dp", "2", "--zero", "--sequence-parallel", "--policy", "lynx-heu",
            "--gpu-memory", "0.0015", "--allow-oom-plan", "--no-offload")
# Pipeline-only layouts first: on one GPU the sequence-parallel ones make the
# most host-backend transfers, and a lease that runs out should still have
# measured the others. Fine-tuning (LoRA adapters on tiny's block linears, the
# base frozen) comes first of all, on one rank: its CUDA kernels against the CPU's.
TINY_LORA = os.path.join(ROOT, "examples", "tiny-lora.model")
LAYOUTS = (
    ("tiny-lora pp1 LoRA", TINY_LORA, ("--tp", "1", "--dp", "1", "--pp", "1", "--policy", "none")),
    ("tiny-lora pp1 LoRA-FA", TINY_LORA, ("--tp", "1", "--dp", "1", "--pp", "1", "--policy", "none", "--lora-fa")),
    ("tiny pp4 checkmate", MODEL, ("--tp", "1", "--dp", "1", "--pp", "4", "--policy", "checkmate")),
    ("tiny pp4 zb-h1", MODEL, ("--tp", "1", "--dp", "1", "--pp", "4", "--schedule", "zb-h1", "--policy", "none")),
    # PipeDream-2BW: overlapping steps, two weight versions, the delayed update (the CPU run is its reference)
    ("tiny pp4 2bw", MODEL, ("--tp", "1", "--dp", "1", "--pp", "4", "--schedule", "2bw", "--policy", "none")),
    # interleaved 1F1B: two chunks per stage, activations and gradients around the ring of two stages
    ("tiny pp2 interleaved", MODEL, ("--tp", "1", "--dp", "1", "--pp", "2", "--schedule", "interleaved",
                                     "--policy", "none")),
    # activation offload: cudaMemcpyAsync to pinned host memory after the forwards, back before the backwards
    ("tiny pp2 lynx-heu offload", MODEL, ("--tp", "1", "--dp", "1", "--pp", "2", "--policy", "lynx-heu",
                                          "--gpu-memory", "0.003", "--allow-oom-plan")),
    # token-wise offload (a what-if profile): a gelu's first rows to host memory, the others recomputed
    ("tiny tp2 pp2 gpipe token-wise", MODEL, ("--tp", "2", "--dp", "1", "--pp", "2", "--schedule", "gpipe",
                                             "--policy", "lynx-heu", "--gpu-memory", "0.002", "--profile",
                                             os.path.join(ROOT, "tests", "profiles", "tiny-token-split.profile"))),
    # the attention's recompute in pieces of its kv heads (a what-if profile), each in a window of its own
    ("tiny tp2 pp2 dp2 head pieces", MODEL, ("--tp", "2", "--dp", "2", "--pp", "2", "--policy", "lynx-heu",
                                            "--gpu-memory", "0.002", "--profile",
                                            os.path.join(ROOT, "tests", "profiles", "tiny-head-pieces.profile"))),
    ("tiny tp2 pp2 dp2 ZeRO-1 SP lynx-heu", MODEL, WINDOWED),
    ("llama tp2 pp2 dp2 ZeRO-1 SP lynx-heu", LLAMA, WINDOWED),
    # mini-sequences (MsT): the SwiGLU MLPs and the vocabulary-parallel LM head and loss in 4 pieces
    ("llama tp2 pp2 SP mini-sequences 4", LLAMA, ("--tp", "2", "--pp", "2", "--dp", "1", "--sequence-parallel",
                                                  "--policy", "none", "--mini-sequences", "4")),
)
RELOADED = "tiny tp2 pp2 dp2 ZeRO-1 SP lynx-heu"  # the layout whose final state is also reloaded
RELOAD_BOUND = 1e-6  # the same weights through the same kernels: the saved run's last validation loss


def reload_checkpoint(program, data, records, comm):
    """--resume of the run's final state, validation only: its last validation loss again."""
    r = run([os.path.join(program, "run.sh"), "--steps", "0", "--resume", os.path.join(program, "state.bin"),
             "--data", data["train"], "--val-data", data["val"], "--val-batches", str(VAL_BATCHES), *comm], program)
    got = [float(line.split()[2]) for line in r.stdout.splitlines() if line.startswith("validation loss")]
    want = records[-1].get("val_loss")
    ok = r.returncode == 0 and len(got) == 1 and want is not None and abs(got[0] - want) <= RELOAD_BOUND * abs(want)
    check(ok, "%s: the saved state reloads (--resume, --steps 0) to the last validation loss %s (got %s)" % (
        os.path.basename(program), want, got))
    if not ok:
        print("     exit %d: %s" % (r.returncode, failure_report(r).replace("\n", "\n     ")))


def failure_report(r):
    """What a failed run said: every line of lynx's own (each rank's watchdog and the stack it
    printed, lx_watchdog.h) and the end of the output."""
    text = r.stdout + r.stderr
    own = [line for line in text.splitlines()
           if line.startswith("lynx:") or re.search(r"\(\S*\+0x[0-9a-f]+\)\[0x[0-9a-f]+\]$", line)]
    return "\n".join(own[:400]) + "\n...\n" + text[-1500:]


def run_layout(target, name, model, args, work, data):
    """A layout's metrics records on target (CUDA: all ranks on one GPU), with a checkpoint reload."""
    program = build_program(os.path.join(work, "%s-%s" % (target, name.replace(" ", "-"))), model, target, args,
                            work, "%s %s: generates and builds" % (target, name))
    if program is None or (target == "cuda" and not gpu_kit.RUNS_GPU):
        return None
    # a stuck rank ends the job within a minute and names what it waits on (lx_cuda_comm.h)
    comm = ("--comm", "host", "--watchdog", "60") if target == "cuda" else ()
    records = train(program, target, data["train"], data["val"], os.path.join(program, "metrics.jsonl"),
                    "--save", os.path.join(program, "state.bin"), *comm)
    if records and name == RELOADED and (target == "cuda" or gpu_kit.RUNS_CPU):
        reload_checkpoint(program, data, records, comm)
    return records


def compare(cpu, cuda, pp):
    worst, where = worst_relative_difference(cpu, cuda)
    check(worst <= LOSS_BOUND,
          "pp=%d: CUDA and CPU losses and validation losses agree within %.0f%% over %d steps; worst relative "
          "difference %.2e (%s)" % (pp, 100 * LOSS_BOUND, STEPS, worst, where))


def main():
    cpu_only = os.environ.get("LX_CPU_ONLY") == "1"
    gpus = gpu_kit.gpu_count() if gpu_kit.RUNS_GPU else 1  # a kit is prepared for a one-GPU machine
    if gpus == 0 and not cpu_only:
        print("skipped: no GPU")
        return 0
    pipelines = [1, 2] if gpus >= 2 or cpu_only else [1]
    if not cpu_only and gpus < 2:
        print("# pp=2 skipped: nvidia-smi lists %d GPU, pp=2 needs 2" % gpus)
    with gpu_kit.work_dir("cuda_training") as work:
        data = make_data(work)
        for pp in pipelines:
            cpu = build_and_train("cpu", pp, work, data)
            if cpu_only:
                if cpu:
                    print("# cpu pp=%d losses: %s" % (pp, " ".join("%.4f" % rec["loss"] for rec in cpu)))
                continue
            cuda = build_and_train("cuda", pp, work, data)
            if cpu and cuda:
                compare(cpu, cuda, pp)
        for name, model, args in LAYOUTS:
            cpu = run_layout("cpu", name, model, args, work, data)
            if cpu_only:
                continue
            cuda = run_layout("cuda", name, model, args, work, data)
            if cpu and cuda:
                worst, where = worst_relative_difference(cpu, cuda)
                check(worst <= LOSS_BOUND,
                      "%s, its ranks on one GPU (--comm host): CUDA and CPU losses agree within %.0f%% over %d "
                      "steps; worst relative difference %.2e (%s)" % (name, 100 * LOSS_BOUND, STEPS, worst, where))
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
