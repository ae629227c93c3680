"""Run-time overrides of the training settings (issue 15), on the CPU target.

One small GPT (no dropout, so that a forward pass is a pure function of the
weights and the batch) is generated with training settings unlike the model
language's defaults, built once, and run through its run.sh:

- --help lists every training flag with the model file's value in brackets;
- the lr column of metrics.jsonl follows --lr, --min-lr, --warmup and
  --lr-schedule as the closed form of the schedule (computed here, from
  docs/model-language.md's definition) predicts; a --warmup longer than
  --steps is warned about (the lr never reaches --lr), the others are not;
- --grad-clip, --weight-decay, --beta1, --beta2 and --eps change the losses
  after the first step, and the same flags twice give the same losses;
- a value out of range is a usage error (exit 2) naming the flag and value;
- --gradcheck runs the double-precision builds (run.sh says how to make them),
  and a float program refuses it;
- --steps 0 only validates: the loss it prints is the first step's loss of
  a run on the same batch (the initial weights' forward loss), or after
  --resume the saved run's last validation loss; it writes no file, and
  without validation data, or with --save, it is a usage error;
- --resume refuses a changed setting that decides the losses, naming it and
  both values, whether the saved run had the model file's value or one given
  on its command line, and accepts a changed reporting setting.
"""
import json
import math
import os
import re
import subprocess
import sys
import tempfile

from tap import check, exit_status
from training_metrics import QUICK_CFLAGS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LYNXGEN = os.path.join(ROOT, "bin", "lynxgen")
FORTUNES = "/usr/share/games/fortunes/fortunes"
USAGE = 2  # the emitted programs' exit status for a bad command line

# The model file's settings, each unlike the language's default, so that
# --help showing them shows the model's values.
SETTINGS = {"--steps": 10, "--lr": 3e-3, "--min-lr": 2e-4, "--warmup": 3, "--lr-schedule": "linear",
            "--beta1": 0.85, "--beta2": 0.97, "--eps": 1e-7, "--weight-decay": 0.05, "--grad-clip": 2.0,
            "--seed": 11, "--eval-interval": 0, "--checkpoint-every": 0}

MODEL = """#include <lynx.h>
static const struct lx_model model = { .vocab = 256, .seq_len = 16, .layers = 2, .hidden = 32, .heads = 2,
  .dropout = 0.0, .tied_embeddings = 1 };
static const struct lx_cluster cluster = { .gpu = GPU_A100_80GB, .gpus_per_node = 8 };
static const struct lx_parallel parallel = { .tp = 1, .pp = 1, .dp = 1, .micro_batch = 2, .global_batch = 4,
  .schedule = SCHEDULE_1F1B };
static const struct lx_training training = { .steps = 10, .lr = 3e-3, .min_lr = 2e-4, .warmup_steps = 3,
  .lr_schedule = LR_LINEAR, .beta1 = 0.85, .beta2 = 0.97, .eps = 1e-7, .weight_decay = 0.05,
  .grad_clip = 2.0, .seed = 11, .dtype = DTYPE_FP32 };
tensor prologue(tensor tokens) { return add(embedding(tokens, 256, 32), position_embedding(tokens, 32)); }
tensor block(tensor x) {
  x = add(x, linear(attention(linear(layernorm(x), 96), 2, 2), 32));
  return add(x, linear(gelu(linear(layernorm(x), 128)), 32));
}
tensor epilogue(tensor x, tensor targets) { return cross_entropy(lm_head(layernorm(x), 256), targets); }
"""


def launch(cmd, cwd):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env, timeout=300)


class Program:
    """The built program and the shards it trains on; each run writes its own metrics file."""

    def __init__(self, work):
        self.work, self.dir, self.runs = work, os.path.join(work, "prog"), 0

    def build(self):
        model = os.path.join(self.work, "options.model")
        with open(model, "w") as f:
            f.write(MODEL)
        for cmd in ([LYNXGEN, "tokenize", FORTUNES, "-o", os.path.join(self.work, "data")],
                    [LYNXGEN, model, "-o", self.dir, "--target", "cpu"],
                    ["make", "-s", "-j2", "-C", self.dir, QUICK_CFLAGS]):
            r = launch(cmd, self.work)
            if r.returncode != 0:
                print(r.stdout[-2000:] + r.stderr[-2000:])
                return False
        return True

    def start(self, *args):
        """(completed process, rows of its metrics.jsonl)."""
        self.runs += 1
        metrics = os.path.join(self.work, "metrics%d.jsonl" % self.runs)
        r = launch([os.path.join(self.dir, "run.sh"), "--data", os.path.join(self.work, "data/train_*.bin"),
                    "--metrics", metrics, *args], self.work)
        rows = []
        if os.path.exists(metrics):
            with open(metrics) as f:
                rows = [json.loads(line) for line in f if line.strip()]
        return r, rows

    def losses(self, *args):
        r, rows = self.start(*args)
        return [row["loss"] for row in rows] if r.returncode == 0 else None


def expected_lr(step, warmup, steps, lr, min_lr, schedule):
    """Linear warm-up to lr over `warmup` steps, then constant, or a cosine or
    linear decay that reaches min_lr at the last step."""
    if step <= warmup:
        return lr * step / warmup
    if schedule == "constant":
        return lr
    progress = (step - warmup) / (steps - warmup)
    shape = (1 + math.cos(math.pi * progress)) / 2 if schedule == "cosine" else 1 - progress
    return min_lr + (lr - min_lr) * shape


def help_defaults(program):
    r = launch([os.path.join(program.dir, "run.sh"), "--help"], program.work)
    lines = re.findall(r"^  (--[a-z0-9-]+)(?: [A-Z]+)?\s.*\[(.*)\]$", r.stdout, re.M)
    check(r.returncode == 0 and lines, "--help exits 0 and lists the options with their defaults")
    shown = dict(lines)
    for flag, value in SETTINGS.items():
        got = shown.get(flag)
        same = got is not None and (got == value if isinstance(value, str) else float(got) == value)
        check(same, "--help shows %s with the model file's value [%s] (shows %s)" % (flag, value, got))


def schedules(program):
    cases = [(("--lr-schedule", "constant", "--warmup", "0", "--lr", "0.002"), (0, 6, 0.002, 2e-4, "constant")),
             (("--lr-schedule", "cosine", "--warmup", "2", "--lr", "0.004", "--min-lr", "0.001"),
              (2, 6, 0.004, 0.001, "cosine")),
             (("--warmup", "1", "--min-lr", "0"), (1, 6, 3e-3, 0.0, "linear"))]
    # a warm-up longer than the run: the lr climbs all the way, and the program says it never gets to --lr
    cases.append((("--warmup", "8"), (8, 6, 3e-3, 2e-4, "linear")))
    for args, (warmup, steps, lr, min_lr, schedule) in cases:
        r, rows = program.start("--steps", str(steps), *args)
        want = [expected_lr(s, warmup, steps, lr, min_lr, schedule) for s in range(1, steps + 1)]
        got = [row["lr"] for row in rows]
        close = len(got) == steps and all(abs(g - w) <= 1e-8 * w for g, w in zip(got, want))
        check(r.returncode == 0 and close, "%s: the lr of every step is the schedule's %s (got %s)" % (
            " ".join(args), ["%.6g" % w for w in want], got))
        warned = re.findall(r"^lynx: warning: (.*)$", r.stderr, re.M)
        expect = ["--warmup 8 is more than --steps 6: the learning rate never reaches --lr 0.003; it ends at "
                  "0.00225"] if warmup > steps else []
        check(warned == expect, "%s: warnings %s (want %s)" % (" ".join(args), warned, expect))


def optimizer_settings(program):
    base = program.losses("--steps", "4")
    for flag, value in (("--grad-clip", "0.5"), ("--grad-clip", "0"), ("--weight-decay", "0.9"),
                        ("--beta1", "0.5"), ("--beta2", "0.5"), ("--eps", "0.001")):
        first, again = program.losses("--steps", "4", flag, value), program.losses("--steps", "4", flag, value)
        check(base and first and first[0] == base[0] and first[1:] != base[1:],
              "%s %s changes the losses after step 1 (%s vs %s)" % (flag, value, first, base))
        check(first is not None and first == again, "%s %s twice gives the same losses" % (flag, value))


def bad_values(program):
    for args in (("--beta1", "1"), ("--beta2", "-0.1"), ("--eps", "0"), ("--weight-decay", "-1"),
                 ("--grad-clip", "nan"), ("--warmup", "-2"), ("--lr", "inf"), ("--min-lr", "0.5"),
                 ("--lr-schedule", "exponential")):
        r, _ = program.start("--steps", "1", *args)
        said = r.stderr + r.stdout
        check(r.returncode == USAGE and args[0] in said and (args[1] in said or "above --lr" in said),
              "%s %s is refused with exit %d, naming the flag (%s)" % (
                  args[0], args[1], USAGE, said.strip().splitlines()[0] if said.strip() else "no message"))
    r, _ = program.start("--lr-schedule", "step")
    check("constant, cosine or linear" in r.stderr, "a bad --lr-schedule lists the accepted names")


def gradcheck_builds(program):
    """--gradcheck needs the double-precision builds of `make gradcheck`: run.sh picks them, and says
    how to build them where they are missing; a float program refuses the flag (its rounding swamps a
    central difference)."""
    r, _ = program.start("--gradcheck")
    said = r.stderr + r.stdout
    check(r.returncode == 1 and "stage0-gradcheck is not built: make -C %s gradcheck" % program.dir in said,
          "run.sh --gradcheck without `make gradcheck` says what to build (%s)" % said.strip()[-200:])
    r = launch([os.path.join(program.dir, "stage0"), "--preflight", "--gradcheck"], program.work)
    check(r.returncode == USAGE and "--gradcheck needs the double-precision programs" in r.stderr,
          "a float program refuses --gradcheck with exit %d (%s)" % (USAGE, r.stderr.strip()[-200:]))


def validation_loss(r):
    found = re.search(r"^validation loss (\S+)", r.stdout, re.M)
    return float(found.group(1)) if found else None


def files_under(*dirs):
    return {os.path.join(d, name) for top in dirs for d, _, names in os.walk(top) for name in names}


def validation_only(program):
    val = ("--val-data", os.path.join(program.work, "data/train_*.bin"), "--val-batches", "1")
    before = files_under(program.work)
    r, _ = program.start("--steps", "0", *val)
    loss, new = validation_loss(r), files_under(program.work) - before
    first = program.losses("--steps", "1")
    check(r.returncode == 0 and loss is not None and first and loss == first[0],
          "--steps 0 prints the initial weights' loss on the first batch, the first step's loss (%s vs %s)" % (
              loss, first))
    check(r.returncode == 0 and not new, "--steps 0 writes no file (wrote %s)" % sorted(new))
    r, _ = program.start("--steps", "0")
    check(r.returncode == USAGE and "--val-data" in r.stderr, "--steps 0 without validation data is a usage error")
    r, _ = program.start("--steps", "0", *val, "--save", os.path.join(program.work, "none.bin"))
    check(r.returncode == USAGE and "--save" in r.stderr, "--steps 0 with --save is a usage error")


def resume(program):
    ckpt = os.path.join(program.work, "state.bin")
    val = ("--val-data", os.path.join(program.work, "data/val_*.bin"), "--val-batches", "2")
    r, rows = program.start("--steps", "4", "--save", ckpt, *val, "--eval-interval", "4")
    last = rows[-1].get("val_loss") if rows else None
    r, _ = program.start("--steps", "0", "--resume", ckpt, *val)
    check(r.returncode == 0 and last is not None and validation_loss(r) == last,
          "--steps 0 --resume prints the saved run's last validation loss (%s vs %s)" % (validation_loss(r), last))
    for flag, value, saved in (("--beta2", "0.9", "0.97"), ("--lr-schedule", "cosine", "linear"),
                               ("--grad-clip", "0", "2"), ("--steps", "5", "4")):
        args = ("--steps", "4", flag, value) if flag != "--steps" else ("--steps", value)
        r, _ = program.start(*args, "--resume", ckpt)
        said = r.stderr + r.stdout
        check(r.returncode != 0 and "%s %s" % (flag, saved) in said and "%s %s" % (flag, value) in said,
              "--resume refuses %s %s (saved %s), naming both" % (flag, value, saved))
    r, _ = program.start("--steps", "4", "--resume", ckpt, "--print-every", "3", "--eval-interval", "0")
    check(r.returncode == 0, "--resume accepts changed reporting settings (--print-every, --eval-interval)")
    # a checkpoint records a setting given on the command line: resuming needs it again
    os.remove(ckpt)  # a run that starts afresh refuses to replace a checkpoint (run_guards_test)
    r, _ = program.start("--steps", "4", "--weight-decay", "0.2", "--save", ckpt)
    r, _ = program.start("--steps", "4", "--resume", ckpt)
    said = r.stderr + r.stdout
    check(r.returncode != 0 and "--weight-decay 0.2" in said and "--weight-decay 0.05" in said,
          "--resume of a run saved with --weight-decay 0.2 refuses the model file's 0.05, naming both")
    r, _ = program.start("--steps", "4", "--resume", ckpt, "--weight-decay", "0.2")
    check(r.returncode == 0, "--resume with the saved run's --weight-decay 0.2 continues")


def main():
    if not os.path.exists(FORTUNES):
        check(False, "fortunes corpus installed (scripts/deps.sh installs fortunes-min)")
        return
    program = Program(tempfile.mkdtemp(prefix="lynx-options-"))
    if not program.build():
        check(False, "the test model generates and builds")
        return
    help_defaults(program)
    schedules(program)
    optimizer_settings(program)
    bad_values(program)
    gradcheck_builds(program)
    validation_only(program)
    resume(program)


main()
sys.exit(exit_status())
