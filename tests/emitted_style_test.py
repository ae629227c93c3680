"""The emitted stage files read like hand-written code (issue 14).

For the examples and plans that exercise every kind of place (pipeline
buffers, kept and recomputed activations, in-window recompute, sequence
parallelism's whole tensors), on both targets:

- no line is longer than 120 columns, except the rows of the data tables
  (parameter tensors, buckets, the profile table);
- the arena is addressed only in the accessors: every use of AT( is the
  body of an accessor function or a layer-boundary function, so every
  statement names its tensors;
- every accessor is introduced by a comment that gives its shape and the
  model-file line of the op it belongs to, and is used by the code;
- no two accessors share a name.

The arithmetic of the same programs is checked by tests/equivalence_test.py.
"""
import os
import re
import subprocess
import sys
import tempfile

from tap import check, exit_status

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LYNXGEN = os.path.join(ROOT, "bin", "lynxgen")
WIDTH = 120
SQUEEZE = ("--gpu-memory", "0.0015", "--allow-oom-plan", "--global-batch", "32")

PLANS = (
    ("tiny.model", ("--target", "cpu")),
    ("tiny.model", ("--target", "cpu", "--tp", "2", "--dp", "2", "--sequence-parallel", "--policy", "lynx-heu")
     + SQUEEZE),
    ("tiny.model", ("--target", "cuda", "--pp", "4", "--policy", "checkmate") + SQUEEZE),
    ("tiny.model", ("--target", "cuda", "--tp", "2", "--sequence-parallel", "--policy", "lynx-opt") + SQUEEZE),
    ("llama.model", ("--target", "cuda", "--policy", "selective", "--global-batch", "128")),
    ("gpt13b.model", ("--target", "cuda", "--policy", "lynx-heu")),
    # interleaved 1F1B: per-chunk pipeline buffers, boundary functions over the chunks' edges
    ("tiny.model", ("--target", "cpu", "--schedule", "interleaved", "--policy", "lynx-heu") + SQUEEZE),
    ("tiny.model", ("--target", "cuda", "--schedule", "interleaved", "--tp", "2", "--sequence-parallel",
                    "--policy", "full") + SQUEEZE),
)

ACCESSOR = re.compile(r"^static \w+ \*(\w+)\((void|int layer|int mb|int layer, int mb)\) \{")
ADDRESSING = (re.compile(r"^static \w+ \*\w+\([^)]*\) \{ return \(\w+ \*\)(HOST_)?AT\("),  # a one-line accessor
              re.compile(r"^  return \(\w+ \*\)(HOST_)?AT\("),  # an accessor's or boundary function's body
              re.compile(r"^  if \(layer == [A-Z_ +\-0-9|=layer]+\) return \(\w+ \*\)AT\("),  # a boundary function's
              re.compile(r"^#define (AT|HOST_AT|PARAMS|GRADS|MASTER)\b"))
SHAPE_COMMENT = re.compile(r"^/\* (\(.*\)|\d+ elements|\d+ bytes|a scalar): .*\S+:\d+ \*/$|^/\* \(.*\): the .*stage \d+ \*/$"
                           r"|^/\* \d+ bytes: sequence parallelism: .* \*/$")


def table_row(line):
    return line.startswith("  {")


def check_file(label, path):
    with open(path) as f:
        lines = f.read().split("\n")
    long_lines = [i + 1 for i, line in enumerate(lines) if len(line) > WIDTH and not table_row(line)]
    check(not long_lines, "%s: no line over %d columns outside the data tables%s" % (
        label, WIDTH, " (lines %s)" % long_lines[:5] if long_lines else ""))
    stray = [i + 1 for i, line in enumerate(lines) if "AT(" in line and not any(p.match(line) for p in ADDRESSING)]
    check(not stray, "%s: the arena is addressed only inside the accessors%s" % (
        label, " (also at lines %s: %s)" % (stray[:5], lines[stray[0] - 1].strip()) if stray else ""))
    names, uncommented = [], []
    for i, line in enumerate(lines):
        m = ACCESSOR.match(line)
        if m:
            names.append(m.group(1))
            if not SHAPE_COMMENT.match(lines[i - 1]):
                uncommented.append("%d: %s" % (i, lines[i - 1]))
    code = "\n".join(line for line in lines if not ACCESSOR.match(line))
    unused = [n for n in names if not re.search(r"\b%s\(" % n, code)]
    check(names and not uncommented, "%s: each of the %d accessors has a comment with its shape and model line%s" % (
        label, len(names), " (not: %s)" % uncommented[:3] if uncommented else ""))
    check(names and not unused, "%s: every accessor is used%s" % (label, " (not: %s)" % unused[:5] if unused else ""))
    check(len(set(names)) == len(names), "%s: accessor names are unique" % label)


def main():
    work = tempfile.mkdtemp(prefix="lynx-style-")
    for k, (model, args) in enumerate(PLANS):
        out = os.path.join(work, "plan%d" % k)
        r = subprocess.run([LYNXGEN, os.path.join(ROOT, "examples", model), "-o", out, *args], capture_output=True,
                           text=True)
        label = "%s %s" % (model, " ".join(args))
        check(r.returncode == 0, "%s: generates" % label)
        if r.returncode != 0:
            print(r.stderr[-2000:])
            continue
        for stage in sorted(f for f in os.listdir(out) if re.match(r"stage\d+\.(c|cu)$", f)):
            check_file("%s: %s" % (label, stage), os.path.join(out, stage))


if __name__ == "__main__":
    main()
    sys.exit(exit_status())
