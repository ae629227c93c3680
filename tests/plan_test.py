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
sys.exit(1 if failures else 0)
