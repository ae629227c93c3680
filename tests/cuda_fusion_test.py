#!/usr/bin/env python3
"""Fused calls in the emitted CUDA programs (gen/emit/emit_fusion.c, emit_cuda.c).

Each fused program is compared, line by line, with the same program
generated with --no-epilogue-fusion, where every op is its own call with the
operands the CPU printer also uses (emit_operands.c, exercised numerically by
the CPU tests). Every difference must be one of the fusions, and each fused
call must take exactly the operands of the calls it replaces:
- linear_forward(out, in, w, bias) + gelu_forward(gout, gin) with gin == out
  becomes linear_gelu_forward(gout, aux = out, in, w, bias);
- linear_backward(din, dw, db, dout, in, w) + gelu_backward(gdin, gdout, gin)
  with gdout == din becomes linear_backward(NULL, dw, db, dout, in, w) +
  linear_dgelu_backward(gdin, dout, w, gin);
- add_forward(sum, a, b) + layernorm_forward(out, nin, w, b) with nin == sum
  (or rmsnorm) becomes residual_layernorm_forward(sum, out, a, b, w, b).
Which gelus fuse (tests/cuda/gelu_arrangements.model, whose comments say why):
forward m, gelu_1 and v but not gelu_3 (an op sits between it and its
linear); backward m and gelu_3 but not gelu_1 (its input feeds a second
linear) or v (its output feeds two). Under a checkmate plan that recomputes
some gelus without their linears, those gelus' forwards are not fused.
Recomputation must reproduce the forward's values, and the GELU epilogue
rounds differently from the separate kernel: for every op a fused call can
do, its FWD and RECOMPUTE instances are either all fused or all separate.
Configurations: tiny and gelu_arrangements at tp 1 and tp 2 with sequence
parallelism under every recompute policy, llama (rmsnorm), and the README's
gpt13b plan.
"""
import collections
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
ARRANGEMENTS = os.path.join(ROOT, "tests", "cuda", "gelu_arrangements.model")


def call_of(line):
    """(function, [arguments]) of a one-line call statement, or (None, [])."""
    m = re.match(r"\s*(lx_\w+)\((.*)\);\s*$", line)
    if not m:
        return None, []
    args, depth, current = [], 0, ""
    for ch in m.group(2):
        if ch == "," and depth == 0:
            args.append(current.strip())
            current = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        current += ch
    args.append(current.strip())
    return m.group(1), args


def require(cond, what):
    if not cond:
        raise ValueError(what)


def expect_call(line, name):
    function, args = call_of(line)
    if function != name:
        raise ValueError(f"expected a call of {name}, found: {line.strip()[:120]}")
    return args


def partner_after(fused, plain, f, p, name):
    """From fused[f] and plain[p], just after the first op's calls: the same
    prof_end, comment and prof_begin of the second op in both programs, then
    a note in the fused one where the plain one calls `name`; returns that
    call's arguments."""
    if fused[f : f + 3] != plain[p : p + 3]:
        raise ValueError(f"unexpected lines after a fused call: {fused[f].strip()[:80]}")
    if not re.search(r"done by the \w+ above", fused[f + 3]):
        raise ValueError(f"the op after a fused call is not marked as done by it: {fused[f + 3].strip()[:80]}")
    return expect_call(plain[p + 3], name)


def forward_site(fused, plain, i, j):
    """The forward fusion at fused[i] / plain[j]; returns the lines consumed."""
    fused_call = expect_call(fused[i + 1], "lx_linear_gelu_forward")
    linear = expect_call(plain[j], "lx_linear_forward")
    gelu = partner_after(fused, plain, i + 2, j + 1, "lx_gelu_forward")
    # linear_forward(ctx, out, in, w, bias, BT, C, OC); gelu_forward(ctx, out, in, n)
    # linear_gelu_forward(ctx, out, pre_gelu, in, w, bias, BT, C, OC)
    require(gelu[0] == linear[0], "forward fusion of a gelu in another context than the linear's")
    want = [linear[0], gelu[1], linear[1], *linear[2:]]
    require(gelu[2] == linear[1], "forward fusion of a gelu whose input is not the linear's output")
    require(fused_call == want, f"forward fusion operands {fused_call} differ from the separate calls' {want}")
    require(gelu[3] == f"(size_t)BT * {linear[7]}", f"forward fusion: gelu size {gelu[3]} is not BT x {linear[7]}")
    return 6, 5


def residual_norm_site(fused, plain, i, j):
    """The residual add + norm fusion at fused[i] / plain[j]."""
    kind = re.search(r"with the (\w+) below", fused[i]).group(1)
    fused_call = expect_call(fused[i + 1], f"lx_residual_{kind}_forward")
    add = expect_call(plain[j], "lx_add_forward")
    norm = partner_after(fused, plain, i + 2, j + 1, f"lx_{kind}_forward")
    # add_forward(ctx, out, a, b, n); layernorm_forward(ctx, out, in, w, b, rows, C) (rmsnorm: no b)
    # residual_layernorm_forward(ctx, sum, out, a, b, w, b, rows, C)
    require(norm[0] == add[0], "residual norm fusion of a norm in another context than the add's")
    require(norm[2] == add[1], "residual norm fusion of a norm whose input is not the add's output")
    want = [add[0], add[1], norm[1], add[2], add[3], *norm[3:]]
    require(fused_call == want, f"residual norm fusion operands {fused_call} differ from the separate calls' {want}")
    require(add[4] == f"(size_t){norm[-2]} * {norm[-1]}", f"residual norm fusion: add size {add[4]} is not rows x width")
    return 6, 5


def backward_site(fused, plain, i, j):
    """The backward fusion at fused[i] / plain[j]; returns the lines consumed."""
    weights = expect_call(fused[i], "lx_linear_backward")
    dgelu = expect_call(fused[i + 2], "lx_linear_dgelu_backward")
    linear = expect_call(plain[j], "lx_linear_backward")
    gelu = partner_after(fused, plain, i + 3, j + 1, "lx_gelu_backward")
    # linear_backward(ctx, din, dw, db, dout, in, w, BT, C, OC, mode)
    # gelu_backward(ctx, din, dout, in, n)
    # linear_dgelu_backward(ctx, dpre, dout, w, pre, BT, C, OC)
    require(gelu[0] == linear[0], "backward fusion of a gelu in another context than the linear's")
    require(gelu[2] == linear[1], "backward fusion of a gelu whose output gradient is not the linear's input gradient")
    require(weights == [linear[0], "NULL", *linear[2:]],
            f"backward fusion: weight-gradient call {weights} is not {linear} without its input gradient")
    want = [linear[0], gelu[1], linear[4], linear[6], gelu[3], *linear[7:10]]
    require(dgelu == want, f"backward fusion operands {dgelu} differ from the separate calls' {want}")
    return 7, 5, gelu[1]


def compare(fused_text, plain_text):
    """Walks both programs; returns the number of fused sites of each kind, or
    raises ValueError at the first unexplained difference."""
    fused, plain = fused_text.split("\n"), plain_text.split("\n")
    i = j = 0
    sites = {"forward": 0, "backward": 0, "norm": 0}
    unzeroed = collections.Counter()  # gradients the plain program zeroes and the fused one does not
    while i < len(fused) and j < len(plain):
        if fused[i] == plain[j]:
            i, j = i + 1, j + 1
            continue
        zeroed = re.match(r"\s*CUDA_CHECK\(cudaMemsetAsync\((.*?), 0, \d+, ctx->stream\)\);$", plain[j])
        if zeroed:  # explained only by a DGELU call below that writes that gradient
            unzeroed[zeroed.group(1)] += 1
            j += 1
            continue
        accessor = j + 1 < len(plain) and re.match(r"static \w+ \*(\w+)\(", plain[j + 1])
        if plain[j].startswith("/*") and accessor and not re.search(r"\b%s\(" % accessor.group(1), fused_text):
            # the accessor of a tensor only the separate calls use (a fused gelu's output gradient)
            j += 2
            while not plain[j - 1].rstrip().endswith("}"):
                j += 1
            continue
        if "cuBLASLt's GELU epilogue" in fused[i]:
            di, dj = forward_site(fused, plain, i, j)
            sites["forward"] += 1
        elif "one pass over each row writes the sum" in fused[i]:
            di, dj = residual_norm_site(fused, plain, i, j)
            sites["norm"] += 1
        elif call_of(fused[i])[0] == "lx_linear_backward" and "DGELU" in fused[i + 1]:
            di, dj, written = backward_site(fused, plain, i, j)
            unzeroed[written] -= unzeroed[written] > 0
            sites["backward"] += 1
        else:
            raise ValueError(f"unexplained difference:\n  fused: {fused[i][:120]}\n  plain: {plain[j][:120]}")
        i, j = i + di, j + dj
    if i != len(fused) or j != len(plain):
        raise ValueError("the programs end differently")
    if +unzeroed:
        raise ValueError(f"gradients the fused program does not zero and no DGELU call writes: {dict(+unzeroed)}")
    return sites


def fusion_by_instance(text):
    """For each op a fused call can do (by variable, kind and model-file line):
    whether its FWD and RECOMPUTE instances were done by the op before them."""
    seen = {}
    lines = text.split("\n")
    for n, line in enumerate(lines):
        m = re.match(r"\s*/\* (FWD|RECOMPUTE) (\w+) = (gelu|layernorm|rmsnorm)\(\.\.\.\)\s+(\S+) \*/", line)
        if m:
            fused = n + 2 < len(lines) and "done by the" in lines[n + 2]
            seen.setdefault((m.group(2), m.group(3), m.group(4)), set()).add(fused)
    return seen


def absorbed(text, direction, kind):
    """The variables of `kind` ops whose `direction` pass a fused call did."""
    names = set()
    lines = text.split("\n")
    for n, line in enumerate(lines):
        m = re.match(r"\s*/\* " + direction + r" (\w+) = " + kind + r"\(", line)
        if m and n + 2 < len(lines) and "done by the" in lines[n + 2]:
            names.add(m.group(1))
    return names


def recomputed_ops(text):
    """The variables the stage's recompute function recomputes."""
    body = re.search(r"static void recompute_block\(.*?\n}\n", text, re.S)
    return set(re.findall(r"/\* RECOMPUTE (\w+) = ", body.group(0))) if body else set()


def generate(model, args, out):
    r = subprocess.run([LYNXGEN, model, "-o", out, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"lynxgen {model} {' '.join(args)} failed: {r.stderr[-400:]}")


def stage_files(directory):
    return sorted(f for f in os.listdir(directory) if re.match(r"stage\d+\.cu$", f))


def check_configuration(tmp, model, args, expect=None, kinds=("forward", "backward", "norm")):
    name = f"{os.path.basename(model)} {' '.join(args)}"
    fused_dir, plain_dir = os.path.join(tmp, "fused"), os.path.join(tmp, "plain")
    for d in (fused_dir, plain_dir):
        shutil.rmtree(d, ignore_errors=True)
    # the step unrolled, so that every instance of an op is a line of its own
    generate(model, args + ["--unrolled-step"], fused_dir)
    generate(model, args + ["--unrolled-step", "--no-epilogue-fusion"], plain_dir)
    totals = {"forward": 0, "backward": 0, "norm": 0}
    mixed = []
    for stage in stage_files(fused_dir):
        with open(os.path.join(fused_dir, stage)) as f:
            fused_text = unwrapped(f.read())
        with open(os.path.join(plain_dir, stage)) as f:
            plain_text = unwrapped(f.read())
        try:
            sites = compare(fused_text, plain_text)
        except ValueError as e:
            check(False, f"{name}: {stage}: {e}")
            return
        for k in totals:
            totals[k] += sites[k]
        for (var, kind, where), fused_or_not in fusion_by_instance(fused_text).items():
            if len(fused_or_not) > 1:
                mixed.append(f"{stage} {kind} {var} ({where})")
        if expect and stage == "stage0.cu":
            for direction in ("FWD", "BWD"):
                got = absorbed(fused_text, direction, "gelu")
                if direction == "FWD" and "linear_of" in expect:
                    # a gelu recomputed without its linear, or kept while its linear is recomputed, runs apart
                    recomputed = recomputed_ops(fused_text)
                    apart = {g for g, linear in expect["linear_of"].items()
                             if (g in recomputed) != (linear in recomputed)}
                    check(apart, f"{name}: some gelu's recompute decision differs from its linear's ({sorted(apart)})")
                    expect = dict(expect, FWD=expect["FWD"] - apart)
                check(got == expect[direction], f"{name}: {direction} fused gelus {sorted(got)}, expected {sorted(expect[direction])}")
    check(all(totals[k] > 0 for k in kinds),
          f"{name}: every difference from the unfused program is a fusion with the replaced calls' operands "
          f"({totals['forward']} linear + gelu, {totals['backward']} linear + gelu backward, "
          f"{totals['norm']} add + norm sites)")
    check(not mixed, f"{name}: every fusable op's forward and recompute instances are all fused or all separate"
          + (f" (mixed: {', '.join(mixed)})" if mixed else ""))
    return totals


def main():
    policies = ["none", "full", "selective", "checkmate", "lynx-heu"]
    arrangements = {"FWD": {"m", "gelu_1", "v"}, "BWD": {"m", "gelu_3"}}
    # the linear in front of each gelu of gelu_arrangements.model
    linear_of = {"m": "linear_2", "gelu_1": "u", "v": "linear_7", "gelu_3": "p"}
    with tempfile.TemporaryDirectory() as tmp:
        check_configuration(tmp, ARRANGEMENTS, [], arrangements)
        # checkmate under 12 MB recomputes some gelus without their linears
        check_configuration(tmp, ARRANGEMENTS, ["--policy", "checkmate", "--gpu-memory", "0.012", "--allow-oom-plan"],
                            dict(arrangements, linear_of=linear_of))
        check_configuration(tmp, ARRANGEMENTS, ["--tp", "2", "--sequence-parallel", "--gpu-memory", "0.002", "--allow-oom-plan",
                                                "--policy", "lynx-heu"], arrangements)
        for policy in policies:
            check_configuration(tmp, os.path.join(ROOT, "examples", "tiny.model"), ["--policy", policy,
                                                                                     "--gpu-memory", "0.0015", "--allow-oom-plan"])
            check_configuration(tmp, os.path.join(ROOT, "examples", "tiny.model"),
                                ["--tp", "2", "--dp", "2", "--sequence-parallel", "--policy", policy,
                                 "--gpu-memory", "0.0015", "--allow-oom-plan"])
        check_configuration(tmp, os.path.join(ROOT, "examples", "gpt13b.model"), ["--policy", "lynx-heu"])
        # no gelu in llama's swiglu MLP: only its adds and rmsnorms fuse
        check_configuration(tmp, os.path.join(ROOT, "examples", "llama.model"),
                            ["--policy", "selective", "--global-batch", "16"],
                            kinds=("norm",))
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
