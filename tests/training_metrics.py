"""The metrics.jsonl an emitted training program writes (lx_metrics.h), as
the tests read it, and how the training tests generate, build and run the
CPU programs that write it."""
import json
import os
import subprocess
import tempfile

from tap import check

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LYNXGEN = os.path.join(ROOT, "bin", "lynxgen")
FORTUNES = "/usr/share/games/fortunes/fortunes"


# A 4-layer GPT of hidden 64 with tied embeddings on 32-token sequences, one
# rank, micro-batches of 2, fp32: the programs the CPU training tests build.
GPT_MODEL = """#include <lynx.h>
#define V {vocab}
#define H 64
static const struct lx_model model = {{ .vocab = V, .seq_len = 32, .layers = 4, .hidden = H, .heads = 4,
  .dropout = {dropout}, .tied_embeddings = 1 }};
static const struct lx_cluster cluster = {{ .gpu = GPU_A100_80GB, .gpus_per_node = 8 }};
static const struct lx_parallel parallel = {{ .tp = 1, .pp = 1, .dp = 1, .micro_batch = 2, .global_batch = 8,
  .schedule = SCHEDULE_1F1B }};
static const struct lx_training training = {{ .steps = 10, .lr = {lr}, .min_lr = {lr} / 10, .warmup_steps = 5,
  .lr_schedule = LR_COSINE, .weight_decay = 0.0, .grad_clip = 1.0, .seed = 7, .dtype = DTYPE_FP32 }};
tensor prologue(tensor tokens) {{
  return dropout(add(embedding(tokens, V, H), position_embedding(tokens, H)));
}}
tensor block(tensor x) {{
  tensor a = attention(linear(layernorm(x), 3 * H), 4, 4);
  x = add(x, dropout(linear(a, H)));
  tensor m = linear(gelu(linear(layernorm(x), 4 * H)), H);
  return add(x, dropout(m));
}}
tensor epilogue(tensor x, tensor targets) {{
  return cross_entropy(lm_head(layernorm(x), V), targets);
}}
"""


def losses_by_step(metrics):
    """step -> loss; a resumed run appends, its lines come last and win."""
    by_step = {}
    if os.path.exists(metrics):
        with open(metrics) as f:
            for line in f:
                if line.strip():
                    record = json.loads(line)
                    by_step[record["step"]] = record["loss"]
    return by_step


def run(cmd, cwd, env=None, timeout=None):
    """timeout: seconds, after which every process of the program (run.sh starts
    mpirun in a session of its own) is killed and None returned: a hang fails
    the check instead of the whole suite."""
    full_env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", **(env or {}))
    with subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=full_env) as p:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            subprocess.run(["pkill", "-KILL", "-f", os.path.dirname(cmd[0]) + "/"])
            p.kill()
            p.communicate()
            return None
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


# The tests' builds, faster than the Makefile's -O2, with the same numerics
# (no level contracts or reorders floating-point arithmetic): -O0 builds in a
# quarter of -O2's time, for programs that run a few steps of tiny models;
# -O1 in half, for those that train longer (resume_test: 65 s, 103 s at -O0).
QUICK_CFLAGS = "CFLAGS=-O0 -fno-math-errno"
TRAINING_CFLAGS = "CFLAGS=-O1 -march=native -fno-math-errno"


def generate(work, name, model_file, *args, target="all", quick=False):
    """quick: built with QUICK_CFLAGS instead of the Makefile's -O2."""
    out = os.path.join(work, name)
    r = run([LYNXGEN, model_file, "-o", out, "--target", "cpu", *args], work)
    if r.returncode != 0:
        print(r.stdout + r.stderr)
        return None
    flags = [QUICK_CFLAGS] if quick else []
    r = run(["make", "-s", "-j2", "-C", out, target, *flags], work)
    if r.returncode != 0:
        print(r.stdout + r.stderr)
        return None
    return out


def train(program, work, *args, variant="", timeout=None):
    metrics = os.path.join(program, "metrics.jsonl")
    r = run([os.path.join(program, "run.sh"), "--data", os.path.join(work, "data/train_*.bin"), "--metrics", metrics,
             *args], work, {"LX_VARIANT": variant}, timeout)
    return r, metrics


def losses(metrics):
    with open(metrics) as f:
        return [json.loads(line)["loss"] for line in f]


def fortunes_shards(prefix):
    """A fresh work directory whose data/ holds byte-level shards of Debian's
    fortunes (lynxgen tokenize), or None when the corpus is missing."""
    if not os.path.exists(FORTUNES):
        check(False, "fortunes corpus installed (scripts/deps.sh installs fortunes-min)")
        return None
    work = tempfile.mkdtemp(prefix=prefix)
    r = run([LYNXGEN, "tokenize", FORTUNES, "-o", os.path.join(work, "data")], work)
    check(r.returncode == 0, "lynxgen tokenize makes byte-level shards of fortunes")
    return work
