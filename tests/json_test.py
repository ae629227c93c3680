#!/usr/bin/env python3
"""Every JSON lynxgen writes carries the strings of a model file exactly
(issue 19; ir/json.h): --dump-ir, --plan --json, and the ir.json and
trace.json of -o DIR.

The model file is examples/tiny.model under hostile names: a quote, a
backslash, control characters (tab, newline, 0x01, 0x1f, DEL), text beyond
ASCII (two-, three- and four-byte UTF-8, U+2028, which ends a line in
JavaScript) and a byte that is not UTF-8; and a name of 250 bytes, most of
them two-byte characters, longer than any fixed buffer a writer might cut it
to. Its train_data and val_data hold a quote, a backslash and the same
non-ASCII text (control characters are refused in data paths,
tests/injection_test.py).

Each document must parse as strict JSON (no raw control character in a
string, no NaN or Infinity, valid UTF-8) and give back each string as
Python decodes the bytes: exactly, with each stray byte as U+FFFD. The
expected strings are the test's own inputs, never lynxgen's output. The same
input gives byte-identical files twice.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

from tap import check, exit_status

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LYNXGEN = os.path.join(ROOT, "bin", "lynxgen")

NAMES = {
    "quotes and controls": b'q"uo\\te \t\n\x01\x1f\x7f \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xe2\x80\xa8 \xff.model',
    "250 bytes": b'\xc3\xa9' * 100 + b'"\\' + b'x' * 36 + b'\xf0\x9f\x98\x80' * 1 + b'.model',
}
# C source of the data paths' string literal, and the text it means.
PATH_SOURCE = r'd\"a\\ta/\u00e9\u20ac\U0001F600_*.bin'
PATH_TEXT = 'd"a\\ta/\u00e9\u20ac\U0001F600_*.bin'


def decoded(raw):
    """What a JSON string of these bytes must hold: stray bytes as U+FFFD."""
    return raw.decode("utf-8", errors="replace")


def no_constant(name):
    raise ValueError("%s is not JSON" % name)


def strict_json(raw):
    """The document, or None: UTF-8, no control character in a string, no NaN."""
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=no_constant)
    except (UnicodeDecodeError, ValueError) as e:
        print("    %s" % e)
        return None


def write_model(work, name):
    with open(os.path.join(ROOT, "examples", "tiny.model")) as f:
        text = f.read()
    text, n = re.subn(r'(\.(train|val)_data = )"[^"]*"', lambda m: m.group(1) + '"%s"' % PATH_SOURCE, text)
    assert n == 2, "examples/tiny.model names no train_data and val_data to replace"
    path = os.path.join(work.encode(), name)
    with open(path, "w") as f:
        f.write(text)
    return path


def lynxgen(work, *args):
    r = subprocess.run([LYNXGEN, *args], cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        print("    " + r.stderr.decode(errors="replace"))
    return r.stdout if r.returncode == 0 else None


def check_ir(label, what, raw, name):
    ir = strict_json(raw) if raw is not None else None
    if not check(ir is not None, "%s: %s is strict UTF-8 JSON" % (label, what)):
        return
    check(ir["model_file"] == decoded(name), "%s: %s's model_file is the name" % (label, what))
    srcs = [op["src"] for g in ir["graphs"].values() for op in g["ops"]] + [g["src"] for g in ir["graphs"].values()]
    check(all(s.startswith(decoded(name) + ":") for s in srcs),
          "%s: %s's every src is the name, a line and a column (%d)" % (label, what, len(srcs)))
    t = ir["training"]
    check(t["train_data"] == PATH_TEXT and t["val_data"] == PATH_TEXT,
          "%s: %s's train_data and val_data are the paths" % (label, what))


def check_trace(label, raw, name):
    trace = strict_json(raw)
    if not check(trace is not None, "%s: trace.json is strict UTF-8 JSON" % label):
        return
    stem = decoded(name[:-len(b".model")])
    check(trace["otherData"]["model"] == stem, "%s: trace.json's model is the name without .model" % label)
    check(len(trace["traceEvents"]) > 100, "%s: trace.json has its events" % label)


def check_name(work, label, name):
    model = write_model(work, name)
    check_ir(label, "--dump-ir", lynxgen(work, model, "--dump-ir"), name)
    plan = lynxgen(work, model, "--plan", "--json")
    doc = strict_json(plan) if plan is not None else None
    check(doc is not None and doc["model_file"] == decoded(name),
          "%s: --plan --json is strict UTF-8 JSON and its model_file is the name" % label)
    outs = []
    for run in ("a", "b"):
        out = os.path.join(work, "out-" + run)
        if lynxgen(work, model, "--target", "cpu", "-o", out) is None:
            check(False, "%s: lynxgen -o accepts the name" % label)
            return
        outs.append({f: open(os.path.join(out, f), "rb").read() for f in ("ir.json", "trace.json")})
    check_ir(label, "ir.json", outs[0]["ir.json"], name)
    check_trace(label, outs[0]["trace.json"], name)
    check(outs[0] == outs[1], "%s: ir.json and trace.json are byte-identical from the same input" % label)


def main():
    if not os.path.exists(LYNXGEN):
        check(False, "bin/lynxgen is built")
        return 1
    for label, name in NAMES.items():
        assert len(name) <= 255, "a file name holds at most 255 bytes"
        with tempfile.TemporaryDirectory() as work:
            check_name(work, label, name)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
