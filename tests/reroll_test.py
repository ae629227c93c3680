#!/usr/bin/env python3
"""Loops in the emitted step (gen/emit/emit_reroll.c).

lynxgen prints each stage's run_schedule with its repeating runs of lines as
for loops (over i, then j and k around or inside them). This test expands
every loop of every stage source back into straight-line code, here and
independently of the C code: each line of a body, for each value of the
loop variable, with every "(BASE + STEP * v)" put back as the number it
stands for. The result must be, byte for byte, the program lynxgen prints
with --unrolled-step, for both targets and the plans below (pipelines under
GPipe and 1F1B, tensor/data/sequence parallelism, recompute in windows, and
the large examples whose steps run to millions of lines). It also reports
how much shorter the rolled stage sources are, and fails if a multi-
micro-batch plan's steady state was not rolled at all.

The CPU target's tests (cpu_training_test.py) run rolled programs: their
losses, gradients and memory extents check the loops numerically too.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

from emitted import unwrapped
from tap import check, exit_status

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LYNXGEN = os.path.join(ROOT, "bin", "lynxgen")

LOOP = re.compile(r"^( *)for \(int ([ijk]) = 0; \2 < (\d+); \2\+\+\) \{ /\* the \d+ lines? below, (\d+) times \*/$")


def substitute(line, var, value):
    """Every (BASE + STEP * var) of `line` as the number it is at var = value."""
    pattern = r"\((\d+)([uUlL]*) ([+-]) (?:(\d+)[uUlL]* \* )?" + var + r"\)"

    def number(m):
        step = int(m.group(4) or 1) * (1 if m.group(3) == "+" else -1)
        return str(int(m.group(1)) + step * value) + m.group(2)

    return re.sub(pattern, number, line)


def resolve(line, env):
    """`line` with the loop variables of env put in, inner expressions first:
    a later pass may have rolled a literal inside an earlier pass's expression,
    as in ((2 + 4 * j) + 36 * i)."""
    while True:
        before = line
        for var, value in env.items():
            line = substitute(line, var, value)
        if line == before:
            return line


def expand(lines, env=None):
    env = env or {}
    out, n = [], 0
    while n < len(lines):
        m = LOOP.match(resolve(lines[n], env))
        if not m:
            out.append(resolve(lines[n], env))
            n += 1
            continue
        indent, var, times = m.group(1), m.group(2), int(m.group(3))
        if int(m.group(4)) != times or var in env:
            raise ValueError(f"loop header disagrees with itself or reuses a variable: {lines[n]}")
        end = n + 1
        while end < len(lines) and lines[end] != indent + "}":
            end += 1
        if end == len(lines):
            raise ValueError(f"unclosed loop: {lines[n]}")
        body = []
        for line in lines[n + 1 : end]:
            if not line.startswith(indent + "  "):
                raise ValueError(f"loop body line not indented: {line}")
            body.append(line[2:])
        for value in range(times):
            out.extend(expand(body, {**env, var: value}))
        n = end + 1
    return out


def difference(rolled, unrolled):
    """Where the rolled source, its loops expanded, differs from the unrolled one; None if nowhere."""
    try:
        expanded = expand(rolled)
    except ValueError as e:
        return str(e)
    if expanded == unrolled:
        return None
    first = next((k for k, (a, b) in enumerate(zip(expanded, unrolled)) if a != b), min(len(expanded), len(unrolled)))
    return (f"expanded loops differ from --unrolled-step at line {first + 1}:\n"
            f"  expanded: {expanded[first] if first < len(expanded) else '(end)'}\n"
            f"  unrolled: {unrolled[first] if first < len(unrolled) else '(end)'}")


def generate(model, args, out):
    r = subprocess.run([LYNXGEN, model, "-o", out, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"lynxgen {model} {' '.join(args)} failed: {r.stderr[-400:]}")


def check_plan(tmp, model, args, want_loops=True):
    name = f"{os.path.basename(model)} {' '.join(args)}"
    rolled_dir, unrolled_dir = os.path.join(tmp, "rolled"), os.path.join(tmp, "unrolled")
    for d in (rolled_dir, unrolled_dir):
        shutil.rmtree(d, ignore_errors=True)
    generate(model, args, rolled_dir)
    generate(model, args + ["--unrolled-step"], unrolled_dir)
    stages = sorted(f for f in os.listdir(rolled_dir) if re.match(r"stage\d+\.(c|cu)$", f))
    rolled_lines = unrolled_lines = loops = 0
    problem = None if stages else "no stage sources"
    for stage in stages:
        with open(os.path.join(rolled_dir, stage)) as f:
            rolled = unwrapped(f.read()).split("\n")
        with open(os.path.join(unrolled_dir, stage)) as f:
            unrolled = unwrapped(f.read()).split("\n")
        problem = difference(rolled, unrolled)
        if problem:
            problem = f"{stage}: {problem}"
            break
        rolled_lines += len(rolled)
        unrolled_lines += len(unrolled)
        loops += sum(1 for line in rolled if LOOP.match(line))
    check(problem is None, f"{name}: {len(stages)} stage sources expand to the --unrolled-step ones "
          f"({unrolled_lines} lines printed as {rolled_lines}, {loops} loops)" + (f": {problem}" if problem else ""))
    if problem:
        return
    if want_loops:
        check(loops > 0 and rolled_lines < unrolled_lines, f"{name}: the steady state is rolled")


def main():
    tiny = os.path.join(ROOT, "examples", "tiny.model")
    examples = lambda m: os.path.join(ROOT, "examples", m)
    with tempfile.TemporaryDirectory() as tmp:
        for target in ("cpu", "cuda"):
            for schedule in ("gpipe", "1f1b"):
                check_plan(tmp, tiny, ["--target", target, "--schedule", schedule, "--global-batch", "32"])
            check_plan(tmp, tiny, ["--target", target, "--tp", "2", "--dp", "2", "--sequence-parallel",
                                   "--policy", "lynx-heu", "--gpu-memory", "0.0015", "--allow-oom-plan", "--global-batch", "32"])
            check_plan(tmp, tiny, ["--target", target, "--pp", "4", "--policy", "checkmate",
                                   "--gpu-memory", "0.0015", "--allow-oom-plan", "--global-batch", "64"])
        check_plan(tmp, examples("gpt13b.model"), ["--policy", "lynx-heu"])
        check_plan(tmp, examples("llama.model"), ["--policy", "selective", "--global-batch", "128"])
        # tp 4 and 24 layers a stage; 64 micro-batches of its 512 keep the test short (0.5 M lines unrolled)
        check_plan(tmp, examples("gpt-13b.model"), ["--global-batch", "64"])
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
