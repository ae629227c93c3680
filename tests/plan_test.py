"""lynxgen --plan and --plan --json: every example and policy gives a plan
that parses, with one entry per stage, a positive iteration time, peaks and
arenas that are consistent, and the Lynx policies never slower than Megatron's
full recompute (the scheduler only moves recomputation off the critical path
or drops less)."""
import glob
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LYNXGEN = os.path.join(ROOT, "bin", "lynxgen")
failures = 0


def check(cond, what):
    global failures
    print(("ok - " if cond else "not ok - ") + what)
    failures += not cond


def plan(model, *args):
    r = subprocess.run([LYNXGEN, model, "--plan", "--json", *args], capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stderr)
        return None
    try:
        return json.loads(r.stdout)
    except json.JSONDecodeError as e:
        print(e, r.stdout[:2000])
        return None


for model in sorted(glob.glob(os.path.join(ROOT, "examples", "*.model"))):
    name = os.path.basename(model)
    p = plan(model, "--policy", "full")
    check(p is not None, "%s: --plan --json parses" % name)
    if p is None:
        continue
    stages = p["stages"]
    check(len(stages) == p["plan"]["pp"] and p["iteration_s"] > 0,
          "%s: one entry per stage (%d), iteration %.3f s" % (name, len(stages), p["iteration_s"]))
    parts = ("weights_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes", "transient_bytes")
    check(all(s["peak_bytes"] >= sum(s[k] for k in parts) > 0 for s in stages),
          "%s: each stage's peak covers its breakdown" % name)
    check(all(s["arena_bytes"] >= s["weights_bytes"] for s in stages), "%s: each stage has an arena" % name)
    check(0 < p["mfu"] <= p["hfu"] < 1, "%s: 0 < MFU (%.3f) <= HFU (%.3f) < 1 under full recompute" % (
        name, p["mfu"], p["hfu"]))

gpt = os.path.join(ROOT, "examples", "gpt13b.model")
times = {}
for policy in ("none", "full", "selective", "checkmate", "lynx-heu"):
    p = plan(gpt, "--policy", policy)
    check(p is not None, "gpt13b --policy %s plans" % policy)
    if p:
        times[policy] = p["iteration_s"]
if "full" in times and "lynx-heu" in times:
    check(times["lynx-heu"] <= times["full"] * (1 + 1e-9),
          "gpt13b: lynx-heu (%.3f s) is not slower than full recompute (%.3f s)" % (times["lynx-heu"], times["full"]))

# Plan search: a model that leaves tp, pp, dp and the micro-batch open gets the
# fastest plan that fits, checked here by planning every combination through
# the command line and taking the fastest.
OPEN = """#include <lynx.h>
#define H 256
static const struct lx_model model = { .vocab = 1024, .seq_len = 256, .layers = 4, .hidden = H, .heads = 4,
  .dropout = 0.1, .tied_embeddings = 1 };
static const struct lx_cluster cluster = { .gpu = GPU_A100_80GB, .nodes = 1, .gpus_per_node = 4 };
static const struct lx_parallel parallel = { .global_batch = 16, .schedule = SCHEDULE_1F1B };
tensor prologue(tensor t) { return dropout(add(embedding(t, 1024, H), position_embedding(t, H))); }
tensor block(tensor x) {
  tensor a = attention(linear(layernorm(x), 3 * H), 4, 4);
  x = add(x, dropout(linear(a, H)));
  return add(x, dropout(linear(gelu(linear(layernorm(x), 4 * H)), H)));
}
tensor epilogue(tensor x, tensor y) { return cross_entropy(lm_head(layernorm(x), 1024), y); }
"""
import tempfile
with tempfile.NamedTemporaryFile("w", suffix=".model", delete=False) as f:
    f.write(OPEN)
chosen = plan(f.name, "--policy", "full")
brute = []
for tp in (1, 2, 4):
    for pp in (1, 2, 4):
        if tp * pp > 4:
            continue
        dp = 4 // (tp * pp)
        for mb in (1, 2, 4, 8, 16):
            if 16 % (mb * dp) or 16 // (mb * dp) < pp:
                continue
            p = plan(f.name, "--policy", "full", "--tp", str(tp), "--pp", str(pp), "--dp", str(dp),
                     "--micro-batch", str(mb))
            if p and all(st["fits"] for st in p["stages"]):
                brute.append((p["iteration_s"], tp, pp, dp, mb))
best = min(brute) if brute else None
got = chosen and (chosen["plan"]["tp"], chosen["plan"]["pp"], chosen["plan"]["dp"], chosen["plan"]["micro_batch"])
check(best is not None and chosen is not None and abs(chosen["iteration_s"] - best[0]) <= 1e-9 * best[0],
      "plan search picks the fastest of %d plans that fit: %s, as planning each one does %s" % (
          len(brute), got, best[1:] if best else None))
r = subprocess.run([LYNXGEN, f.name, "--plan", "--explain", "--policy", "full"], capture_output=True, text=True)
check(r.returncode == 0 and "chosen" in r.stdout and "slower" in r.stdout,
      "--explain lists the candidates, the chosen one and by how much the others lose")
os.unlink(f.name)
sys.exit(1 if failures else 0)
