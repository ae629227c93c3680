#!/usr/bin/env python3
"""trace.json, schedule.svg and memory.svg, as lynxgen -o DIR writes them.

For small GPT models written here (the block of examples/tiny.model; the number
of layers, the plan and the recompute policy vary), with the expected
instruction counts derived below from the model and the plan alone:

- trace.json parses as JSON; one process per stage named "stage N (layers a-b)",
  one thread per stream named compute, recompute, send, recv, tp, dp
- per stage, the FWD, BWD, RECOMPUTE, SEND_*, RECV_*, ALLREDUCE_TP, ALLREDUCE_DP and
  OPTIMIZER_STEP complete events number exactly what the schedule must contain
- every event lies inside [0, iteration time]; no two events of one stream overlap
- the order of forwards and backwards on each compute stream is the schedule's
  (GPipe: all F then all B; 1F1B: p - s - 1 warm-up forwards, then F/B pairs)
- every event names its kind, micro-batch, layer and op in "args"
- the same run twice gives byte-identical files
- schedule.svg is SVG 1.1 with one row per stage, a legend naming what it draws, a
  title with iteration time, bubble and MFU; with tp 1 each run of one kind and
  micro-batch on a compute stream is one box (with no recompute: one forward and one
  backward box per micro-batch), with the micro-batch numbers inside
- memory.svg is SVG 1.1 with one bar per stage, a legend and a capacity line
- examples/gpt13b.model: tens of thousands of events in trace.json, a schedule.svg
  under 1 MB with far fewer boxes than instructions
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LYNXGEN = os.path.join(ROOT, "bin", "lynxgen")
SVG = "{http://www.w3.org/2000/svg}"
STREAMS = ["compute", "recompute", "send", "recv", "tp", "dp"]
failures = 0


def check(cond, what):
    global failures
    print(("ok - " if cond else "not ok - ") + what)
    failures += not cond
    return cond


# The model: examples/tiny.model's graphs with a variable number of layers, on
# two nodes of eight GPUs so that every plan below fits.
MODEL = """#include <lynx.h>
static const struct lx_model model = {
    .vocab = 256, .seq_len = 64, .layers = LAYERS, .hidden = 64, .heads = 4,
    .dropout = 0.1, .tied_embeddings = 1,
};
static const struct lx_cluster cluster = {.gpu = GPU_A100_80GB, .nodes = 2, .gpus_per_node = 8};
static const struct lx_parallel parallel = {
    .tp = 1, .pp = 2, .dp = 1, .micro_batch = 2, .global_batch = 8, .schedule = SCHEDULE_1F1B,
};
static const struct lx_training training = {
    .steps = 10, .lr = 1e-3, .min_lr = 1e-4, .warmup_steps = 1, .lr_schedule = LR_COSINE,
    .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.0, .grad_clip = 1.0,
    .seed = 1, .dtype = DTYPE_FP32,
};
tensor prologue(tensor tokens) {
  tensor x = embedding(tokens, 256, 64);
  x = add(x, position_embedding(tokens, 64));
  return dropout(x);
}
tensor block(tensor x) {
  tensor h = layernorm(x);
  tensor qkv = linear(h, 3 * 64);
  tensor a = attention(qkv, 4, 4);
  a = dropout(linear(a, 64));
  x = add(x, a);
  h = layernorm(x);
  h = gelu(linear(h, 4 * 64));
  h = dropout(linear(h, 64));
  return add(x, h);
}
tensor epilogue(tensor x, tensor targets) {
  tensor logits = lm_head(layernorm(x), 256);
  return cross_entropy(logits, targets);
}
"""

# Ops of each graph, counted from the model text above (graph inputs excluded).
PROLOGUE_OPS = 4  # embedding, position_embedding, add, dropout
BLOCK_OPS = 12  # 2 layernorm, 4 linear, attention, gelu, 2 dropout, 2 add
EPILOGUE_OPS = 3  # layernorm, lm_head, cross_entropy

# Megatron-LM tensor parallelism, with tp > 1: a layer's forward all-reduces the
# outputs of its two row-parallel linears (attention projection, MLP down
# projection); its backward all-reduces the input gradients of its two
# column-parallel linears (qkv, MLP up projection). The vocabulary-parallel
# embedding all-reduces its output; the vocabulary-parallel head all-reduces
# its input gradient. A recomputed row-parallel linear all-reduces again.
TP_PER_LAYER = 2 + 2
TP_PROLOGUE = 1
TP_EPILOGUE = 1

# Ops that run again before each layer's backward, and how many of them are
# row-parallel linears. selective: the attention core (its softmax and dropout
# mask are dropped; its input, qkv, is kept). full: every op of the layer but
# the last add, whose output is the next layer's input (the checkpoint, kept
# anyway) and which no op of the layer saves for its backward.
RECOMPUTED_PER_LAYER = {"none": 0, "selective": 1, "full": BLOCK_OPS - 1}
RECOMPUTED_ROW_PARALLEL = {"none": 0, "selective": 0, "full": 2}


def stage_layers(layers, pp):
    """Megatron-LM's even split: the first layers % pp stages take one more."""
    base, extra = divmod(layers, pp)
    out, first = [], 0
    for s in range(pp):
        n = base + (s < extra)
        out.append((first, n))
        first += n
    return out


def expected_counts(case):
    """Instructions of each kind per stage, from the model and the plan alone."""
    pp, tp, dp, layers = case["pp"], case["tp"], case["dp"], case["layers"]
    m = case["global_batch"] // (case["micro_batch"] * dp)
    counts = []
    for s, (_, n) in enumerate(stage_layers(layers, pp)):
        first, last = s == 0, s == pp - 1
        ops = n * BLOCK_OPS + first * PROLOGUE_OPS + last * EPILOGUE_OPS
        per_layer = TP_PER_LAYER + RECOMPUTED_ROW_PARALLEL[case["policy"]]
        tp_ops = n * per_layer + first * TP_PROLOGUE + last * TP_EPILOGUE if tp > 1 else 0
        counts.append({
            "FWD": m * ops,
            "BWD": m * ops,
            "RECOMPUTE": m * n * RECOMPUTED_PER_LAYER[case["policy"]],
            "SEND_ACT": 0 if last else m,
            "RECV_GRAD": 0 if last else m,
            "RECV_ACT": 0 if first else m,
            "SEND_GRAD": 0 if first else m,
            "ALLREDUCE_TP": m * tp_ops,
            # one bucket per graph instance, the tied table (and the last stage's copy) apart
            "ALLREDUCE_DP": n + 2 * first + (2 if pp > 1 else 1) * last if dp > 1 else 0,
            "OPTIMIZER_STEP": 1,
        })
    return m, counts


def expected_order(schedule, pp, s, m):
    """The (F|B, micro-batch) sequence of stage s's compute stream."""
    if schedule == "gpipe":
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    warmup = min(pp - s - 1, m)
    order = [("F", i) for i in range(warmup)]
    for i in range(m - warmup):
        order += [("F", warmup + i), ("B", i)]
    return order + [("B", i) for i in range(m - warmup, m)]


def run_lynxgen(model_path, out_dir, args):
    r = subprocess.run([LYNXGEN, model_path, "-o", out_dir, *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
    return r.returncode == 0


def plan_args(case):
    return ["--pp", str(case["pp"]), "--tp", str(case["tp"]), "--dp", str(case["dp"]),
            "--micro-batch", str(case["micro_batch"]), "--global-batch", str(case["global_batch"]),
            "--schedule", case["schedule"], "--policy", case["policy"]]


# ---- trace.json ---------------------------------------------------------------

def check_metadata(name, events, pp, layers):
    procs = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    want = {}
    for s, (first, n) in enumerate(stage_layers(layers, pp)):
        want[s] = f"stage {s} (layers {first}-{first + n - 1})" if n > 1 else f"stage {s} (layer {first})"
    check(procs == want, f"{name}: one process per stage, named by its layers ({procs})")
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e["name"] == "thread_name"}
    want_threads = {(s, k): STREAMS[k] for s in range(pp) for k in range(len(STREAMS))}
    check(threads == want_threads, f"{name}: one thread per stream, named {', '.join(STREAMS)}")


def check_counts(name, spans, pp, counts):
    for s in range(pp):
        got = {}
        for e in spans:
            if e["pid"] == s:
                got[e["args"]["kind"]] = got.get(e["args"]["kind"], 0) + 1
        want = {k: v for k, v in counts[s].items() if v}
        check(got == want, f"{name}: stage {s} has the expected instructions ({got} vs {want})")


def check_timing(name, spans, iteration_us):
    eps = 0.002  # microseconds: three decimals, rounded twice
    inside = all(e["ts"] >= 0 and e["dur"] >= 0 and e["ts"] + e["dur"] <= iteration_us + eps for e in spans)
    check(iteration_us > 0 and inside, f"{name}: every event inside [0, {iteration_us} us]")
    overlaps = 0
    lanes = {}
    for e in spans:
        lanes.setdefault((e["pid"], e["tid"]), []).append(e)
    for lane in lanes.values():
        lane.sort(key=lambda e: e["ts"])
        overlaps += sum(b["ts"] < a["ts"] + a["dur"] - eps for a, b in zip(lane, lane[1:]))
    check(overlaps == 0, f"{name}: no two events of one stream overlap ({overlaps} do)")


def check_order(name, spans, case, pp, m):
    for s in range(pp):
        compute = [e for e in spans if e["pid"] == s and e["tid"] == 0 and e["args"]["kind"] in ("FWD", "BWD")]
        compute.sort(key=lambda e: e["ts"])  # stable: ties keep the file's (program) order
        seq = []
        for e in compute:
            step = (e["args"]["kind"][0], e["args"]["mb"])
            if not seq or seq[-1] != step:
                seq.append(step)
        want = expected_order(case["schedule"], pp, s, m)
        check(seq == want, f"{name}: stage {s} runs its forwards and backwards in {case['schedule']} order")


def check_args(name, spans):
    bad = []
    for e in spans:
        a, kind = e["args"], e["args"]["kind"]
        ok = e["name"].startswith(kind) and e["cat"] in ("forward", "backward", "recompute", "p2p", "collective",
                                                          "optimizer")
        if kind in ("FWD", "BWD", "RECOMPUTE", "ALLREDUCE_TP"):
            ok = ok and "mb" in a and "op" in a and a["graph"] in ("prologue", "block", "epilogue")
            ok = ok and (("layer" in a) == (a["graph"] == "block"))
            ok = ok and f"mb{a['mb']}" in e["name"] and a["op"] in e["name"]
        if kind.startswith(("SEND", "RECV")):
            ok = ok and "mb" in a and "peer" in a
        if not ok:
            bad.append(e["name"])
    check(not bad, f"{name}: every event names its kind, micro-batch, layer and op ({bad[:3]})")


def check_trace(name, out_dir, case):
    with open(os.path.join(out_dir, "trace.json")) as f:
        trace = json.load(f)
    events = trace["traceEvents"]
    pp = case["pp"]
    m, counts = expected_counts(case)
    check_metadata(name, events, pp, case["layers"])
    spans = [e for e in events if e.get("ph") == "X"]
    check_counts(name, spans, pp, counts)
    check_timing(name, spans, trace["otherData"]["iteration_time_us"])
    check_order(name, spans, case, pp, m)
    check_args(name, spans)
    return trace


# ---- the SVGs -------------------------------------------------------------------

def parse_svg(name, path):
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        check(False, f"{name}: {os.path.basename(path)} is well-formed XML ({e})")
        return None
    check(root.tag == SVG + "svg" and root.get("version") == "1.1",
          f"{name}: {os.path.basename(path)} is an SVG 1.1 document in the SVG namespace")
    return root


def texts(node):
    return ["".join(t.itertext()) for t in node.iter(SVG + "text")]


def groups(root, cls):
    return [g for g in root.iter(SVG + "g") if g.get("class") == cls]


def check_schedule_svg(name, out_dir, case, m, runs):
    root = parse_svg(name, os.path.join(out_dir, "schedule.svg"))
    if root is None:
        return
    pp = case["pp"]
    rows = groups(root, "stage")
    check(len(rows) == pp and all(f"stage {s}" in texts(g) for s, g in enumerate(rows)),
          f"{name}: schedule.svg has one row per stage, labelled")
    title = " ".join(texts(root)[:2])
    check("iteration" in title and "bubble" in title and "MFU" in title,
          f"{name}: the title gives iteration time, bubble and MFU ({title!r})")
    legend = [g for g in root.iter(SVG + "g") if g.get("id") == "legend"]
    words = texts(legend[0]) if legend else []
    want = {"forward", "backward", "idle (bubble)"} | ({"recompute"} if case["policy"] != "none" else set())
    check(want <= set(words), f"{name}: the legend names {sorted(want)} ({words})")
    boxes = groups(root, "boxes")
    labels = [t for g in boxes for t in texts(g)]
    check(all(t == "opt" or (t.isdigit() and int(t) < m) for t in labels) and labels,
          f"{name}: boxes are labelled with micro-batch numbers")
    if case["tp"] != 1:
        return
    # Without tensor parallelism nothing interrupts a run of one kind and
    # micro-batch on the compute stream, so each run is exactly one box: one
    # per micro-batch for the forward, and for the backward too where nothing
    # is recomputed in the middle of it.
    for s, g in enumerate(boxes):
        classes = [r.get("class", "").split()[0] for r in g.iter(SVG + "rect")]
        want = {"fwd": runs[s].get("FWD", 0), "bwd": runs[s].get("BWD", 0), "rec": runs[s].get("RECOMPUTE", 0)}
        got = {c: classes.count(c) for c in want}
        check(got == want, f"{name}: stage {s} draws one box per run of a kind and micro-batch ({got} vs {want})")
        if case["policy"] == "none":
            check(got["fwd"] == m and got["bwd"] == m, f"{name}: stage {s}: one forward, one backward box per micro-batch")


def compute_runs(spans, pp):
    """Per stage: how many runs of consecutive instructions of one kind and
    micro-batch the compute stream has, by kind."""
    runs = []
    for s in range(pp):
        compute = sorted((e for e in spans if e["pid"] == s and e["tid"] == 0), key=lambda e: e["ts"])
        counts, last = {}, None
        for e in compute:
            step = (e["args"]["kind"], e["args"].get("mb"))
            if step != last:
                counts[step[0]] = counts.get(step[0], 0) + 1
            last = step
        runs.append(counts)
    return runs


def check_memory_svg(name, out_dir, pp):
    root = parse_svg(name, os.path.join(out_dir, "memory.svg"))
    if root is None:
        return
    bars = groups(root, "bar")
    check(len(bars) == pp and all(b.get("id") == f"bar-{s}" for s, b in enumerate(bars)),
          f"{name}: memory.svg has one bar per stage")
    check(all(any("GiB" in t or "MiB" in t for t in texts(b)) for b in bars), f"{name}: every bar is labelled")
    legend = [g for g in root.iter(SVG + "g") if g.get("id") == "legend"]
    words = set(texts(legend[0])) if legend else set()
    want = {"weights", "gradients", "optimizer", "activations", "transient"}
    check(want <= words, f"{name}: memory.svg has a legend ({sorted(words)})")
    check(any(g.get("id") == "capacity" for g in root.iter(SVG + "g")), f"{name}: memory.svg draws the capacity")


# ---- the cases ------------------------------------------------------------------

CASES = [
    # examples/tiny.model's own plan
    dict(layers=4, pp=2, tp=1, dp=1, micro_batch=2, global_batch=8, schedule="1f1b", policy="none"),
    # uneven stages, GPipe, tensor and data parallelism, full recompute
    dict(layers=5, pp=3, tp=2, dp=2, micro_batch=1, global_batch=12, schedule="gpipe", policy="full"),
    # deep 1F1B with selective recompute and one layer per stage
    dict(layers=4, pp=4, tp=1, dp=1, micro_batch=1, global_batch=6, schedule="1f1b", policy="selective"),
]


def case_name(c):
    return f"L{c['layers']} pp{c['pp']} tp{c['tp']} dp{c['dp']} m{c['global_batch'] // (c['micro_batch'] * c['dp'])} " \
           f"{c['schedule']} {c['policy']}"


def run_case(tmp, i, case):
    name = case_name(case)
    model = os.path.join(tmp, f"case{i}.model")
    with open(model, "w") as f:
        f.write(MODEL.replace("LAYERS", str(case["layers"])))
    out, again = os.path.join(tmp, f"out{i}"), os.path.join(tmp, f"again{i}")
    if not check(run_lynxgen(model, out, plan_args(case)), f"{name}: lynxgen -o exits 0"):
        return
    files = ["trace.json", "schedule.svg", "memory.svg"]
    if not check(all(os.path.exists(os.path.join(out, f)) for f in files), f"{name}: -o writes {', '.join(files)}"):
        return
    trace = check_trace(name, out, case)
    spans = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    m, _ = expected_counts(case)
    check_schedule_svg(name, out, case, m, compute_runs(spans, case["pp"]))
    check_memory_svg(name, out, case["pp"])
    run_lynxgen(model, again, plan_args(case))
    same = all(open(os.path.join(out, f), "rb").read() == open(os.path.join(again, f), "rb").read() for f in files)
    check(same, f"{name}: a second run writes the same bytes")


def run_large(tmp):
    """A whole model: the trace keeps every instruction, the SVG stays small."""
    model = os.path.join(ROOT, "examples", "gpt13b.model")
    out = os.path.join(tmp, "gpt13b")
    if not check(run_lynxgen(model, out, []), "gpt13b: lynxgen -o exits 0"):
        return
    with open(os.path.join(out, "trace.json")) as f:
        spans = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    size = os.path.getsize(os.path.join(out, "schedule.svg"))
    root = parse_svg("gpt13b", os.path.join(out, "schedule.svg"))
    rects = sum(1 for g in groups(root, "boxes") for _ in g.iter(SVG + "rect")) if root is not None else 0
    check(len(spans) > 20000, f"gpt13b: trace.json has every instruction ({len(spans)} events)")
    check(size < 1_000_000 and 0 < rects * 5 < len(spans),
          f"gpt13b: schedule.svg merges them ({rects} boxes, {size} bytes)")


def main():
    tmp = tempfile.mkdtemp(prefix="lynxgen-trace-")
    try:
        for i, case in enumerate(CASES):
            run_case(tmp, i, case)
        run_large(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"# {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
