#!/usr/bin/env python3
"""No string a model file or its name carries can inject anything into what
lynxgen writes (issue 19; the rules are in ir/escape.h).

The model file is examples/tiny.model, renamed and with hostile data paths:

- its name holds every hazard of every output language at once: a quote that
  would end a C string literal followed by a call of system(), a star that
  could end a comment, a trigraph (`??=`; a file name has no `/`, so no `*/`
  and no `??/`), a newline followed by `#error`, `$(...)` and backquotes for a shell, a
  backslash, a `&<` for XML, U+FFFE and U+FFFF (well-formed UTF-8 that XML
  forbids) and a byte that is not UTF-8;
- train_data and val_data hold the same C and shell hazards, with a comment
  end and `??/`, which splices lines in C11 (a C string in the model file can
  hold anything through escapes; control characters are refused, below).

For the CPU and the CUDA target: the stage programs compile with warnings as
errors (the CPU build is C11, where trigraphs are live; the CUDA stages are
compiled as host code, as their Makefile does, without building the kernels);
the string macros, compiled into a small program written here, decode to
exactly the bytes of the name and the paths; the CPU program runs (--help);
no file named PWNED appears anywhere; run.sh and run-slurm.sh parse (sh -n) and
do not hold the name; the Makefile parses (make -n); ir.json, trace.json and the
--plan --json output parse, with the name as the model file (the non-UTF-8 byte
as U+FFFD); schedule.svg and memory.svg are well-formed XML (U+FFFE, U+FFFF
and the stray byte as U+FFFD); manifest.txt and plan.txt keep one entry per
line.

A data path with a control character (a newline written as \\n in the model
file, or a NUL as \\0, which a C string would end at without a word) is
refused with a located error: it could never be a file a user means.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

from tap import check, exit_status

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LYNXGEN = os.environ.get("LYNXGEN", os.path.join(ROOT, "bin", "lynxgen"))

HOSTILE_NAME = (b'x"); system("touch PWNED"); puts("** int pwned; ??= \n'
                b'#error injected $(touch PWNED) `touch PWNED` \\ &< \xef\xbf\xbe\xef\xbf\xbf \xff.model')
# C source text of a string literal in the model file, and the bytes it means
# (the model file is C11, where `??=` would be a trigraph already: `?\?=` is not).
HOSTILE_PATH_SOURCE = r'd\"); system(\"touch PWNED\"); /* */ ?\?= ?\?/ $(touch PWNED) `touch PWNED` \\x'
HOSTILE_PATH = 'd"); system("touch PWNED"); /* */ ??= ??/ $(touch PWNED) `touch PWNED` \\x'


def hostile_model(work, name, train_source):
    with open(os.path.join(ROOT, "examples", "tiny.model")) as f:
        text = f.read()
    text, n = re.subn(r'(\.(train|val)_data = )"[^"]*"', lambda m: m.group(1) + '"%s"' % train_source, text)
    assert n == 2, "examples/tiny.model names no train_data and val_data to replace"
    path = os.path.join(work.encode(), name)
    with open(path, "w") as f:
        f.write(text)
    return path


def run(cmd, cwd, **kw):
    return subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kw)


def pwned_anywhere(work):
    return [os.path.join(d, f) for d, _, files in os.walk(work) for f in files if f in ("PWNED", b"PWNED")]


def decoded_macros(out, source, macros, work):
    """Compile the #define lines of `macros` from `source` into a program that
    prints each macro's bytes; return them as a list (None on failure)."""
    lines = [l for l in open(os.path.join(out, source), "rb").read().split(b"\n")
             if any(l.startswith(b"#define " + m.encode() + b" ") for m in macros)]
    if len(lines) != len(macros):
        return None
    prog = os.path.join(work, "decode.c")
    with open(prog, "wb") as f:
        f.write(b"#include <stdio.h>\n" + b"\n".join(lines) + b"\nint main(void) {\n")
        for m in macros:
            f.write(b"  fputs(%s, stdout);\n  putchar(0);\n" % m.encode())
        f.write(b"  return 0;\n}\n")
    exe = os.path.join(work, "decode")
    if run(["cc", "-std=c11", "-Wall", "-Werror", "-o", exe, prog], work).returncode != 0:
        return None
    return run([exe], work).stdout.split(b"\0")[:-1]


def generate(work, model, target):
    """lynxgen -o WORK/TARGET; the directory, or None when it failed."""
    out = os.path.join(work, target)
    r = run([LYNXGEN, model, "--target", target, "-o", out], work)
    if not check(r.returncode == 0, "%s: lynxgen accepts the hostile name and paths" % target):
        print(r.stdout.decode(errors="replace"))
        return None
    return out


def check_cpu(work, model):
    out = generate(work, model, "cpu")
    if not out:
        return
    r = run(["make", "-j2"], out)
    check(r.returncode == 0, "cpu: the stage programs build (C11, trigraphs live, -Werror)")
    if r.returncode == 0:
        r = run(["./run.sh", "--help"], out, timeout=120)
        check(b"--steps" in r.stdout, "cpu: the program runs (run.sh --help)")
    got = decoded_macros(out, "stage0.c", ["TRAINING_TRAIN_DATA", "TRAINING_VAL_DATA"], work)
    check(got == [HOSTILE_PATH.encode()] * 2,
          "cpu: TRAINING_TRAIN_DATA and TRAINING_VAL_DATA are the paths, byte for byte")
    check_scripts_and_reports(out, "cpu", model)


def check_cuda(work, model):
    out = generate(work, model, "cuda")
    if not out:
        return
    got = decoded_macros(out, "stage0.cu", ["MODEL_FILE"], work)
    check(got == [os.path.basename(model)], "cuda: MODEL_FILE is the model file's name, byte for byte")
    if shutil.which("nvcc") or os.path.exists("/usr/local/cuda/bin/nvcc"):
        r = run(["make", "-j2", "stage0.o", "stage1.o"], out)
        check(r.returncode == 0, "cuda: the stages compile as host code with warnings as errors")
        if r.returncode:
            print(r.stdout.decode(errors="replace")[-3000:])
    else:
        check(True, "skipped: no CUDA toolkit to compile the CUDA stages")
    r = run(["sh", "-n", "run-slurm.sh"], out)
    check(r.returncode == 0, "cuda: run-slurm.sh parses")
    check_scripts_and_reports(out, "cuda", model)


def check_scripts_and_reports(out, target, model):
    name = os.path.basename(model)
    r = run(["sh", "-n", "run.sh"], out)
    check(r.returncode == 0 and name not in open(os.path.join(out, "run.sh"), "rb").read(),
          "%s: run.sh parses and does not hold the name" % target)
    check(run(["make", "-n"], out).returncode == 0, "%s: the Makefile parses (make -n)" % target)
    for js in ("ir.json", "trace.json"):
        try:
            with open(os.path.join(out, js), encoding="utf-8") as f:
                doc = json.load(f)
            ok = True
        except (ValueError, OSError):
            ok, doc = False, None
        check(ok, "%s: %s is UTF-8 JSON" % (target, js))
        if js == "ir.json" and ok:
            check(doc.get("model_file") == name.decode(errors="replace"),
                  "%s: ir.json's model_file is the name (a stray byte as U+FFFD)" % target)
    for svg in ("schedule.svg", "memory.svg"):
        try:
            ET.parse(os.path.join(out, svg))
            ok = True
        except ET.ParseError:
            ok = False
        check(ok, "%s: %s is well-formed XML" % (target, svg))
    manifest = open(os.path.join(out, "manifest.txt"), "rb").read().split(b"\n")
    entries = [l for l in manifest[1:] if l]  # after the one comment line that heads it
    check(all(l.startswith((b"input ", b"output ")) for l in entries) and
          len(entries) == 1 + len([f for f in os.listdir(out) if f != "manifest.txt" and not f.startswith(".")
                                   and os.path.isfile(os.path.join(out, f)) and not is_build_product(f)]),
          "%s: manifest.txt has one line per file" % target)
    plan = open(os.path.join(out, "plan.txt"), "rb").read()
    check(b"\n#error" not in plan and plan.startswith(b"lynxgen plan for ") and
          plan.split(b"\n")[1].startswith(b"model "), "%s: plan.txt names the model on one line" % target)


def is_build_product(f):
    return f.startswith("stage") and not f.endswith((".c", ".cu")) or f.endswith(".o") or f in ("decode", "decode.c")


def check_plan_json(work, model):
    r = subprocess.run([LYNXGEN, model, "--plan", "--json"], cwd=work, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    try:
        doc = json.loads(r.stdout.decode("utf-8"))
        ok = doc.get("model_file") == os.path.basename(model).decode(errors="replace")
    except ValueError:
        ok = False
    check(r.returncode == 0 and ok, "--plan --json parses and names the model file")


def check_control_character(work):
    for what, source, byte in (("a newline", r"data/train\n#error injected", "0x0a at byte 11"),
                               ("a NUL", r"data/train\0/../../etc/passwd", "0x00 at byte 11")):
        model = hostile_model(work, b"control.model", source)
        r = run([LYNXGEN, model, "--plan"], work)
        text = r.stdout.decode(errors="replace")
        check(r.returncode == 1 and re.search(r"control\.model:\d+:\d+: error: field '\.train_data' holds control "
                                              r"character " + byte, text) is not None,
              "a data path with %s is refused, located at its field" % what)


def main():
    work = tempfile.mkdtemp(prefix="lx-inject.")
    try:
        model = hostile_model(work, HOSTILE_NAME, HOSTILE_PATH_SOURCE)
        check_cpu(work, model)
        check_cuda(work, model)
        check_plan_json(work, model)
        check_control_character(work)
        check(not pwned_anywhere(work) and not os.path.exists(os.path.join(ROOT, "PWNED")),
              "no PWNED file was created by lynxgen, the builds or the runs")
    finally:
        shutil.rmtree(work)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
