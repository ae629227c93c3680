"""The emitted programs compute bit for bit what the programs of an earlier
lynxgen computed (issue 14: a redesign changes names, formatting and comments
of the generated code, never its arithmetic).

tests/equivalence/expected.json was recorded by running this file with
--record against the lynxgen of the commit it names (built from that commit's
tree): for each plan below, the per-step losses of a 4-step CPU run on
byte-level shards of Debian's fortunes and the SHA-256 of the checkpoint it
saves after the last step (every rank's weights and AdamW moments, the data
positions). The lynxgen under test generates, builds and runs the same plans,
and both must be equal. The checkpoint pins every parameter and moment, so
a changed buffer, a missed or reordered kernel call or a changed summation
order shows, even where the printed losses round alike.

The arithmetic is made independent of the machine: the programs are built
without -march=native (no FMA contraction: the x86-64 baseline has none) and
run single-threaded with OpenBLAS's SSE3 kernels (OPENBLAS_CORETYPE).

  python3 tests/equivalence_test.py --record [--lynxgen PATH]   # rewrite expected.json
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile

from tap import check, exit_status

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.join(ROOT, "tests", "equivalence")
EXPECTED = os.path.join(HERE, "expected.json")
FORTUNES = "/usr/share/games/fortunes/fortunes"
STEPS = 4
SQUEEZE = ("--gpu-memory", "0.0015", "--allow-oom-plan")  # recomputation in the pipeline's windows

PLANS = (
    ("gpt pp=2 full", "gpt.model", ("--pp", "2", "--policy", "full")),
    ("gpt pp=2 lynx-heu", "gpt.model", ("--pp", "2", "--policy", "lynx-heu") + SQUEEZE),
    ("gpt tp=2 pp=2 dp=2 ZeRO-1 sequence-parallel lynx-opt", "gpt.model",
     ("--tp", "2", "--pp", "2", "--dp", "2", "--zero", "--sequence-parallel", "--policy", "lynx-opt") + SQUEEZE),
    ("llama pp=2 tp=2 selective", "llama.model", ("--pp", "2", "--tp", "2", "--policy", "selective")),
    ("gpt pp=1 none, unrolled", "gpt.model", ("--pp", "1", "--policy", "none", "--unrolled-step")),
)


def environment():
    return dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", OPENBLAS_CORETYPE="Prescott")


def run(cmd, cwd):
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=environment())


def train(lynxgen, work, name, model, args):
    """(losses, checkpoint SHA-256) of one plan's run, or None with the reason printed."""
    program = os.path.join(work, name.replace(" ", "_").replace("=", "").replace(",", ""))
    steps = [
        [lynxgen, os.path.join(HERE, model), "-o", program, "--target", "cpu", *args],
        ["make", "-s", "-j2", "-C", program, "CFLAGS=-O1 -fno-math-errno"],
        [os.path.join(program, "run.sh"), "--data", os.path.join(work, "data/train_*.bin"), "--eval-interval", "0",
         "--steps", str(STEPS), "--metrics", os.path.join(program, "metrics.jsonl"), "--save",
         os.path.join(program, "state.bin")],
    ]
    for cmd in steps:
        r = run(cmd, work)
        if r.returncode != 0:
            print("# %s: %s failed\n%s" % (name, os.path.basename(cmd[0]), (r.stdout + r.stderr)[-3000:]))
            return None
    with open(os.path.join(program, "metrics.jsonl")) as f:
        losses = [json.loads(line)["loss"] for line in f if line.strip()]
    with open(os.path.join(program, "state.bin"), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    return {"losses": losses, "checkpoint_sha256": digest}


def main():
    record = "--record" in sys.argv
    lynxgen = sys.argv[sys.argv.index("--lynxgen") + 1] if "--lynxgen" in sys.argv else os.path.join(
        ROOT, "bin", "lynxgen")
    if not os.path.exists(FORTUNES):
        check(False, "fortunes corpus installed (scripts/deps.sh installs fortunes-min)")
        return
    work = tempfile.mkdtemp(prefix="lynx-equivalence-")
    r = run([lynxgen, "tokenize", FORTUNES, "-o", os.path.join(work, "data")], work)
    check(r.returncode == 0, "lynxgen tokenize makes byte-level shards of fortunes")
    results = {name: train(lynxgen, work, name, model, args) for name, model, args in PLANS}
    if record:
        commit = run(["git", "rev-parse", "--short", "HEAD"], ROOT).stdout.strip()
        with open(EXPECTED, "w") as f:
            json.dump({"recorded_by_commit": commit, "steps": STEPS, "plans": results}, f, indent=1)
            f.write("\n")
        check(all(results.values()), "every plan trains; expected.json recorded at %s" % commit)
        return
    with open(EXPECTED) as f:
        expected = json.load(f)
    for name, _, _ in PLANS:
        got, want = results[name], expected["plans"].get(name)
        check(got is not None and want is not None and got["losses"] == want["losses"],
              "%s: per-step losses equal those of commit %s's program %s" % (
                  name, expected["recorded_by_commit"], want["losses"] if want else "(not recorded)"))
        check(got is not None and want is not None and got["checkpoint_sha256"] == want["checkpoint_sha256"],
              "%s: the checkpoint after step %d is byte-identical to that of commit %s's program" % (
                  name, STEPS, expected["recorded_by_commit"]))


if __name__ == "__main__":
    main()
    sys.exit(exit_status())
