#!/usr/bin/env python3
"""trace.json, schedule.svg and memory.svg, as lynxgen -o DIR writes them.

For small GPT models written here (the block of examples/tiny.model; the number
of layers, the plan and the recompute policy vary), with the expected
instruction counts derived below from the model and the plan alone:

- trace.json parses as JSON; one process per stage named "stage N (layers a-b)",
  one thread per stream named compute, recompute, send, recv, tp, dp
- per stage, the FWD, BWD, BWD_WEIGHT, RECOMPUTE, SEND_*, RECV_*, ALLREDUCE_TP,
  ALLREDUCE_DP and OPTIMIZER_STEP complete events number exactly what the schedule
  must contain
- every event lies inside [0, iteration time] (2BW: inside the steps drawn); no two
  events of one stream overlap
- the order of forwards, backwards and W passes on each compute stream is the
  schedule's (GPipe: all F then all B; 1F1B: p - s - 1 warm-up forwards, then F/B
  pairs; ZB-H1: 1F1B with micro-batch i's W after the B of i + s, the last s in the
  drain; 2BW: four steps back to back, 1F1B without a drain, each step's forwards
  followed by the next step's first p - s - 1, each event naming its step;
  interleaved: Megatron's order over the chunks, each event naming its chunk, each
  chunk's passes in micro-batch order, the later chunks drawn in lighter shades)
- every event names its kind, micro-batch, layer and op in "args"
- the same run twice gives byte-identical files
- schedule.svg is SVG 1.1 with one row per stage, a legend naming what it draws, a
  title with iteration time, bubble and MFU; with tp 1 each run of one kind and
  micro-batch on a compute stream is one box (with no recompute: one forward and one
  backward box per micro-batch; W passes in boxes of their own, which the legend
  names), with the micro-batch numbers inside
- memory.svg is SVG 1.1 with one bar per stage, a legend and a capacity line
- examples/gpt13b.model: tens of thousands of events in trace.json, a schedule.svg
  under 1 MB with far fewer boxes than instructions
- --trace-events N on 256 micro-batches: the events written are the uncapped trace's
  (--trace-events 0) that start before otherData.omitted.from_us or after to_us, at
  most N, about N / 2 on each side; every one left out starts between the two, and
  otherData.omitted.events counts them; the optimizer step is kept; a global instant
  event marks each cut; under the default cap a small plan's trace is the uncapped one,
  byte for byte; --trace-events -1 is a usage error
- lynx-heu under memory pressure (--gpu-memory): the recomputed ops are plan.txt's
  decision list (so many RECOMPUTE events per stage); every RECOMPUTE names where it
  runs: on the recompute stream in a window (index and kind), else on demand; the
  in-window ones are plan.txt's "in a window" ops, as many as `--json` says layer
  instances got windows; each starts inside its window's event on the stage's
  "windows" track, no earlier than the window opens, and ends before the first
  backward of its layer and micro-batch; the windows track's instance counts add up
  to `--json`'s; schedule.svg outlines the windows that recompute (no more boxes than
  windows used, each on its stage's compute lane inside a window's interval) and the
  legend names them only when it draws them
- lynx-heu that offloads (2.5 MiB GPUs, tp 2): per stage an OFFLOAD on the offload stream
  and a PREFETCH on the prefetch stream per offloaded op (plan.txt's "offload" decisions),
  layer and micro-batch; each OFFLOAD starts after the forward of its op ends, each PREFETCH
  ends before the first backward of its layer and micro-batch starts; the legend of
  schedule.svg names the copies
- lynx-heu that splits an op token-wise (tests/profiles/tiny-token-split.profile, GPipe,
  tp 2): the split op (plan.txt's "token-wise: rows [0, k/8)" decision) is offloaded and
  recomputed per layer and micro-batch, its copies say they move rows [0/8, k/8) and its
  RECOMPUTE events rows [k/8, 8/8), and each of those ends before its layer's backward
- lynx-heu that cuts the attention's recompute by kv heads (tests/profiles/tiny-head-pieces.profile,
  tp 2): plan.txt's decision says into how many pieces; the RECOMPUTE events of that op name
  their pieces ("kv_pieces" [first, end) of P, or none: all of them), the pieces of each layer
  instance cover [0, P) once, and each ends before its layer's backward
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from fractions import Fraction

from tap import check, exit_status

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LYNXGEN = os.path.join(ROOT, "bin", "lynxgen")
SVG = "{http://www.w3.org/2000/svg}"
STREAMS = ["compute", "recompute", "send", "recv", "tp", "dp", "offload", "prefetch"]
WINDOW_KINDS = {"tp-forward", "tp-backward", "activation", "gradient", "warm-up", "cool-down", "other"}


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
STEPS_2BW = 4  # steps a 2BW trace draws: the first fills the pipeline, the last drains it
LINEARS = 4  # ZB-H1 defers their weight gradients (W passes) where their inputs are kept
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
# row-parallel linears. selective: the attention core (its softmax probabilities
# are dropped; its input, qkv, is kept). full: every op of the layer but
# the last add, whose output is the next layer's input (the checkpoint, kept
# anyway) and which no op of the layer saves for its backward, and but the MLP's
# second linear (row-parallel) and its dropout, whose outputs only that add
# reads (a dropout keeps nothing: its backward draws the mask again); the
# attention branch's dropout and linear run again for the first add, whose
# output the second layernorm keeps.
RECOMPUTED_PER_LAYER = {"none": 0, "selective": 1, "full": BLOCK_OPS - 3}
RECOMPUTED_ROW_PARALLEL = {"none": 0, "selective": 0, "full": 1}
ROW_PARALLEL_OPS = ("linear_1", "linear_3")  # the block's second linears: an all-reduce after each


def stage_layers(layers, pp, chunks=1):
    """Megatron-LM's even split: the first layers % pp stages take one more.
    Interleaved 1F1B splits the layers so over pp x chunks model chunks, and
    stage s holds chunks s, s + pp, ...: (its first layer, its layers)."""
    base, extra = divmod(layers, pp * chunks)
    out, first = [], 0
    for c in range(pp * chunks):
        n = base + (c < extra)
        out.append((first, n))
        first += n
    return [(out[s][0], sum(out[v * pp + s][1] for v in range(chunks))) for s in range(pp)]


def chunks_of(case):
    return case.get("chunks", 1) if case["schedule"] == "interleaved" else 1


def steps_drawn(case):
    """2BW's steps overlap: the trace draws STEPS_2BW of them back to back."""
    return STEPS_2BW if case["schedule"] == "2bw" else 1


def expected_counts(case, recomputed=None, offloaded=None, row_parallel=None):
    """Instructions of each kind per stage, from the model and the plan alone
    (for a searched policy, with the ops plan.txt says each stage recomputes);
    2BW's steps drawn each hold every micro-batch of theirs once."""
    pp, tp, dp, layers = case["pp"], case["tp"], case["dp"], case["layers"]
    m = case["global_batch"] // (case["micro_batch"] * dp)
    counts = []
    v = chunks_of(case)
    for s, (_, n) in enumerate(stage_layers(layers, pp, v)):
        first, last = s == 0, s == pp - 1
        ops = n * BLOCK_OPS + first * PROLOGUE_OPS + last * EPILOGUE_OPS
        per_layer = TP_PER_LAYER + (row_parallel[s] if row_parallel else RECOMPUTED_ROW_PARALLEL.get(case["policy"], 0))
        tp_ops = n * per_layer + first * TP_PROLOGUE + last * TP_EPILOGUE if tp > 1 else 0
        counts.append({
            "FWD": m * ops,
            "BWD": m * ops,
            "RECOMPUTE": m * n * (recomputed[s] if recomputed else RECOMPUTED_PER_LAYER[case["policy"]]),
            # interleaved: every chunk but the last stage's last sends on, every chunk but the first's receives
            "SEND_ACT": m * (v - last),
            "RECV_GRAD": m * (v - last),
            "RECV_ACT": m * (v - first),
            "SEND_GRAD": m * (v - first),
            "ALLREDUCE_TP": m * tp_ops,
            # one bucket per graph instance, the tied table (and the last stage's copy) apart
            "ALLREDUCE_DP": n + 2 * first + (2 if pp > 1 else 1) * last if dp > 1 else 0,
            "OPTIMIZER_STEP": 1,
            # zero bubble: stage s > 0 runs a W pass per linear, layer and micro-batch (none: every input kept)
            "BWD_WEIGHT": m * n * LINEARS if case["schedule"] == "zb-h1" and s > 0 else 0,
            # offload: one copy each way per offloaded op, layer and micro-batch
            "OFFLOAD": m * n * offloaded[s] if offloaded else 0,
            "PREFETCH": m * n * offloaded[s] if offloaded else 0,
        })
    counts = [{kind: n * steps_drawn(case) for kind, n in c.items()} for c in counts]
    return m, counts


def interleaved_order(pp, chunks, s, m):
    """Megatron-LM's interleaved 1F1B (Narayanan et al., SC 2021), as its
    schedules.py runs it: virtual micro-batch k is micro-batch
    (k // (pp chunks)) pp + k % pp of chunk (k // pp) % chunks, backwards
    from the last chunk; stage s runs 2 (pp - s - 1) + (chunks - 1) pp
    forwards first (all of them where m == pp), then one forward and one
    backward in turn, then the remaining backwards. (F|B, chunk, mb)."""
    total = m * chunks

    def virtual(k, kind):
        chunk = k % (pp * chunks) // pp
        return (kind, chunk if kind == "F" else chunks - 1 - chunk, k // (pp * chunks) * pp + k % pp)

    warmup = total if m == pp else min(2 * (pp - s - 1) + (chunks - 1) * pp, total)
    order = [virtual(k, "F") for k in range(warmup)]
    for k in range(total - warmup):
        order += [virtual(warmup + k, "F"), virtual(k, "B")]
    return order + [virtual(k, "B") for k in range(total - warmup, total)]


def expected_order(schedule, pp, s, m):
    """The (F|B|W, micro-batch) sequence of stage s's compute stream. ZB-H1
    (Qi et al. 2024): 1F1B whose stage s runs micro-batch i's W pass after
    the B of i + s, and the last s in the drain. 2BW (Narayanan et al. 2021),
    as (F|B, step, micro-batch) over the steps drawn: 1F1B's warm-up once,
    then F and B alternating without a drain, each step's forwards followed by
    the next step's first pp - s - 1, except in the last step drawn."""
    if schedule == "2bw":
        warmup = pp - s - 1
        order = [("F", 0, j) for j in range(warmup)]
        for k in range(STEPS_2BW):
            for i in range(m):
                n = k * m + warmup + i
                if n < (k + 1) * m or k < STEPS_2BW - 1:
                    order.append(("F", n // m, n % m))
                order.append(("B", k, i))
        return order
    if schedule == "gpipe":
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    warmup = min(pp - s - 1, m)
    lag = s if schedule == "zb-h1" else 0
    backward = []
    for i in range(m):
        backward.append(("B", i))
        if lag and i - lag >= 0:
            backward.append(("W", i - lag))
    backward += [("W", i) for i in range(max(m - lag, 0), m)] if lag else []
    order = [("F", i) for i in range(warmup)]
    for i in range(m - warmup):  # each forward of the steady state precedes the next backward and its W
        order.append(("F", warmup + i))
        while backward and backward[0][0] == "W":
            order.append(backward.pop(0))
        order.append(backward.pop(0))
        while backward and backward[0][0] == "W":
            order.append(backward.pop(0))
    return order + backward


def run_lynxgen(model_path, out_dir, args):
    r = subprocess.run([LYNXGEN, model_path, "-o", out_dir, *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
    return r.returncode == 0


def plan_args(case):
    return ["--pp", str(case["pp"]), "--tp", str(case["tp"]), "--dp", str(case["dp"]),
            "--micro-batch", str(case["micro_batch"]), "--global-batch", str(case["global_batch"]),
            "--schedule", case["schedule"], "--policy", case["policy"], *case.get("extra", [])]


def planned(case):
    """Policies whose decisions come from a search (read back from plan.txt)."""
    return case["policy"] in ("checkmate", "lynx-heu", "lynx-opt")


# "    fc_0    linear    1.25 MiB  keep   (tiny.model:12)": the decision after the saved size
DECISION = re.compile(r"\d (?:B|[KMGTP]iB)  (.*)   \(")


def read_decisions(out_dir):
    """plan.txt's decision table: per stage, op name -> decision text."""
    stages, current = [], None
    with open(os.path.join(out_dir, "plan.txt")) as f:
        for line in f:
            if line.startswith("stage "):
                current = {}
                stages.append(current)
            elif current is not None and line.startswith("    ") and DECISION.search(line):
                op = line.split()[0]
                current[op] = DECISION.search(line).group(1).strip()
    return stages


def plan_json(model_path, case):
    r = subprocess.run([LYNXGEN, model_path, "--plan", "--json", *plan_args(case)], capture_output=True, text=True)
    return json.loads(r.stdout) if r.returncode == 0 else None


# ---- trace.json ---------------------------------------------------------------

def chunk_names(layers, pp, chunks, s):
    """Interleaved: stage s's chunks, "0-1, 4-5" ("0, 2" for chunks of one layer)."""
    split = stage_layers(layers, pp * chunks)
    return ", ".join(f"{f}-{f + n - 1}" if n > 1 else f"{f}" for f, n in split[s::pp])


def check_metadata(name, events, pp, layers, windowed=(), chunks=1):
    procs = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    want = {}
    for s, (first, n) in enumerate(stage_layers(layers, pp)):
        want[s] = f"stage {s} (layers {first}-{first + n - 1})" if n > 1 else f"stage {s} (layer {first})"
        if chunks > 1:
            want[s] = f"stage {s} (layers {chunk_names(layers, pp, chunks, s)})"
    check(procs == want, f"{name}: one process per stage, named by its layers ({procs})")
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e["name"] == "thread_name"}
    want_threads = {(s, k): STREAMS[k] for s in range(pp) for k in range(len(STREAMS))}
    want_threads.update({(s, len(STREAMS)): "windows" for s in windowed})
    check(threads == want_threads, f"{name}: one thread per stream, named {', '.join(STREAMS)}"
          f"{', and a windows track on stages ' + str(list(windowed)) if windowed else ''}")


def kv_pieces_of(decision):
    """How many pieces of its kv heads plan.txt's decision cuts an op's recompute into (1: whole)."""
    m = re.search(r"in (\d+) pieces of its kv heads", decision)
    return int(m.group(1)) if m else 1


def piece_share(args):
    """The part of its op a compute event runs: a head-split op's recompute, its pieces' share."""
    m = re.fullmatch(r"\[(\d+), (\d+)\) of (\d+)", args.get("kv_pieces", "[0, 1) of 1"))
    return Fraction(int(m.group(2)) - int(m.group(1)), int(m.group(3)))


def check_counts(name, spans, pp, counts):
    for s in range(pp):
        got = {}
        for e in spans:
            if e["pid"] == s and e["args"]["kind"] != "WINDOW":
                got[e["args"]["kind"]] = got.get(e["args"]["kind"], 0) + piece_share(e["args"])
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


PASSES = {"FWD": "F", "BWD": "B", "BWD_WEIGHT": "W"}


def check_order(name, spans, case, pp, m):
    for s in range(pp):
        compute = [e for e in spans if e["pid"] == s and e["tid"] == 0 and e["args"]["kind"] in PASSES]
        compute.sort(key=lambda e: e["ts"])  # stable: ties keep the file's (program) order
        seq = []
        for e in compute:
            step = (PASSES[e["args"]["kind"]], e["args"]["mb"])
            if case["schedule"] == "2bw":
                step = (step[0], e["args"]["step"], step[1])
            if case["schedule"] == "interleaved":
                step = (step[0], e["args"]["chunk"], step[1])
            if not seq or seq[-1] != step:
                seq.append(step)
        if case["schedule"] == "interleaved":
            want = interleaved_order(pp, chunks_of(case), s, m)
            # what any correct order has: each chunk's forwards and backwards in micro-batch order, and a
            # micro-batch's backward of a chunk after its forward
            for c in range(chunks_of(case)):
                for kind in "FB":
                    mbs = [x[2] for x in seq if x[0] == kind and x[1] == c]
                    check(mbs == list(range(m)), f"{name}: stage {s} chunk {c}: {kind} in micro-batch order")
                check(all(seq.index(("F", c, i)) < seq.index(("B", c, i)) for i in range(m) if ("B", c, i) in seq),
                      f"{name}: stage {s} chunk {c}: each backward after its forward")
        else:
            want = expected_order(case["schedule"], pp, s, m)
        check(seq == want, f"{name}: stage {s} runs its forwards and backwards in {case['schedule']} order")


def check_args(name, spans):
    bad = []
    for e in spans:
        a, kind = e["args"], e["args"]["kind"]
        if kind == "WINDOW":
            if not (e["cat"] == "window" and e["name"] == f"window {a['window']} ({a['window_kind']})"
                    and a["window_kind"] in WINDOW_KINDS and e["tid"] == len(STREAMS)):
                bad.append(e["name"])
            continue
        ok = e["name"].startswith(kind) and e["cat"] in ("forward", "backward", "weights", "recompute", "p2p",
                                                          "collective", "optimizer", "host copy")
        if kind in ("OFFLOAD", "PREFETCH"):  # on their own streams, a host copy of one op's tensors
            ok = ok and e["cat"] == "host copy" and e["tid"] == STREAMS.index(kind.lower())
            ok = ok and a["graph"] == "block" and "layer" in a and f"mb{a['mb']}" in e["name"]
        if kind == "RECOMPUTE":  # where it runs: a window on the recompute stream, else on demand
            ok = ok and a["placement"] == ("window" if e["tid"] == 1 else "on demand")
            ok = ok and (("window" in a) == (e["tid"] == 1)) and a.get("window_kind", "tp-forward") in WINDOW_KINDS
        if kind in ("FWD", "BWD", "BWD_WEIGHT", "RECOMPUTE", "ALLREDUCE_TP"):
            ok = ok and "mb" in a and "op" in a and a["graph"] in ("prologue", "block", "epilogue")
            ok = ok and (("layer" in a) == (a["graph"] == "block"))
            ok = ok and f"mb{a['mb']}" in e["name"] and a["op"] in e["name"]
        if kind.startswith(("SEND", "RECV")):
            ok = ok and "mb" in a and "peer" in a
        if not ok:
            bad.append(e["name"])
    check(not bad, f"{name}: every event names its kind, micro-batch, layer and op ({bad[:3]})")


def drawn_us(trace):
    """What the trace spans: one iteration, or (2BW) the steps drawn."""
    return trace["otherData"].get("span_us", trace["otherData"]["iteration_time_us"])


def check_trace(name, out_dir, case, plan=None):
    with open(os.path.join(out_dir, "trace.json")) as f:
        trace = json.load(f)
    events = trace["traceEvents"]
    pp = case["pp"]
    recomputed = offloaded = row_parallel = None
    if planned(case):
        row_parallel = [sum(op in ROW_PARALLEL_OPS and d.startswith(("recompute", "token-wise")) for op, d in st.items())
                        for st in read_decisions(out_dir)]
        # a token-wise split is both: its first rows offloaded, the others recomputed
        recomputed = [sum(d.startswith(("recompute", "token-wise")) for d in st.values())
                      for st in read_decisions(out_dir)]
        offloaded = [sum(d.startswith(("offload", "token-wise")) for d in st.values())
                     for st in read_decisions(out_dir)]
    m, counts = expected_counts(case, recomputed, offloaded, row_parallel)
    windowed = [st["stage"] for st in plan["stages"] if st["windows_found"]] if plan else []
    check_metadata(name, events, pp, case["layers"], windowed, chunks_of(case))
    spans = [e for e in events if e.get("ph") == "X"]
    check_counts(name, spans, pp, counts)
    check_timing(name, spans, drawn_us(trace))
    check_order(name, spans, case, pp, m)
    check_args(name, spans)
    return trace


def check_offload(name, spans):
    """Each copy out after its forward, each copy back before its backward."""
    eps = 0.002
    copies = [e for e in spans if e["args"]["kind"] in ("OFFLOAD", "PREFETCH")]
    check(copies, f"{name}: the trace shows the offload copies ({len(copies)})")
    late = []
    for e in copies:
        a = e["args"]
        if a["kind"] == "OFFLOAD":
            fwd = [f for f in spans if f["pid"] == e["pid"] and f["args"]["kind"] == "FWD"
                   and f["args"].get("layer") == a["layer"] and f["args"]["op"] == a["op"]
                   and f["args"]["mb"] == a["mb"]]
            if len(fwd) != 1 or fwd[0]["ts"] + fwd[0]["dur"] > e["ts"] + eps:
                late.append(e["name"])
        else:
            bwd = [b["ts"] for b in spans if b["pid"] == e["pid"] and b["args"]["kind"] == "BWD"
                   and b["args"].get("layer") == a["layer"] and b["args"]["mb"] == a["mb"]]
            if not bwd or e["ts"] + e["dur"] > min(bwd) + eps:
                late.append(e["name"])
    check(not late, f"{name}: every OFFLOAD starts after its forward, every PREFETCH ends before its "
          f"layer's backward ({late[:3]})")


def check_windows(name, out_dir, spans, plan, case):
    """The in-window recompute against plan.txt, --json and the timeline."""
    eps = 0.002
    decisions = read_decisions(out_dir)
    windows = {(e["pid"], e["args"]["window"]): e for e in spans if e["args"]["kind"] == "WINDOW"}
    first_bwd = {}
    for e in spans:
        a = e["args"]
        if e["tid"] == 0 and a["kind"] == "BWD" and a.get("graph") == "block":
            key = (e["pid"], a["layer"], a["mb"])
            first_bwd[key] = min(first_bwd.get(key, e["ts"]), e["ts"])
    in_window_total, split_total = 0, [0]
    for st in plan["stages"]:
        s = st["stage"]
        from_plan = sorted(op for op, d in decisions[s].items() if d.startswith("recompute in a window"))
        check(sorted(st["window_ops"]) == from_plan,
              f"{name}: stage {s}: --json's window ops are plan.txt's ({st['window_ops']} vs {from_plan})")
        placed = [e for e in spans if e["pid"] == s and e["args"]["kind"] == "RECOMPUTE" and e["tid"] == 1]
        in_window_total += len(placed)
        # a head-split op's pieces may take a window each
        pieces = sum(kv_pieces_of(decisions[s][op]) for op in from_plan)
        check(len(placed) == st["windowed_ops"] <= st["windowed_instances"] * pieces
              and {e["args"]["op"] for e in placed} <= set(from_plan),
              f"{name}: stage {s}: {len(placed)} RECOMPUTE events in windows, as --json's windowed_ops "
              f"({st['windowed_ops']}), at most {st['windowed_instances']} instances x the {pieces} "
              f"in-window ops (or their pieces) of plan.txt")
        parts = {}
        for e in placed:
            parts.setdefault((e["args"]["layer"], e["args"]["mb"]), set()).add(e["args"]["window"])
        spread = sum(len(w) > 1 for w in parts.values())
        check(sum(len(w) for w in parts.values()) == st["window_parts"] and spread <= st["split_instances"]
              and len(parts) == st["windowed_instances"],
              f"{name}: stage {s}: {len(parts)} instances in {sum(len(w) for w in parts.values())} "
              f"(instance, window) parts, {spread} over several windows, as --json says")
        split_total[0] += spread
        late, early, unnamed = [], [], []
        for e in placed:
            a = e["args"]
            w = windows.get((s, a["window"]))
            if w is None or w["args"]["window_kind"] != a["window_kind"]:
                unnamed.append(e["name"])
                continue
            if e["ts"] < w["ts"] - eps or e["ts"] > w["ts"] + w["dur"] + eps:
                early.append(e["name"])
            if e["ts"] + e["dur"] > first_bwd.get((s, a["layer"], a["mb"]), -1) + eps:
                late.append(e["name"])
        check(not unnamed, f"{name}: stage {s}: every in-window recompute names a window of the windows track "
              f"({unnamed[:2]})")
        check(not early, f"{name}: stage {s}: every in-window recompute starts inside its window ({early[:2]})")
        check(not late, f"{name}: stage {s}: every in-window recompute ends before its layer's backward ({late[:2]})")
        mine = [w for (p, _), w in windows.items() if p == s]
        used = [w for w in mine if w["args"]["instances"] > 0]
        check(sum(w["args"]["instances"] for w in mine) == st["window_parts"] and len(used) == st["windows_used"]
              and len(mine) <= st["windows_found"],
              f"{name}: stage {s}: the windows track has {len(used)} windows used by "
              f"{sum(w['args']['instances'] for w in mine)} instance parts, as --json says")
    if not case.get("offload"):  # offload took the place of recompute there
        check(in_window_total > 0, f"{name}: some recompute runs in windows ({in_window_total} events)")
    if case.get("split"):
        check(split_total[0] > 0, f"{name}: some layer instance recomputes in several windows ({split_total[0]})")


def check_svg_windows(name, root, spans, plan):
    """Outlined windows: on their stage's compute lane, only where a window recomputes."""
    legend = [g for g in root.iter(SVG + "g") if g.get("id") == "legend"]
    words = texts(legend[0]) if legend else []
    drawn = {int(g.get("id").split("-")[1]): [r for r in g.iter(SVG + "rect") if r.get("class") == "win"]
             for g in groups(root, "windows")}
    total = sum(len(r) for r in drawn.values())
    check(("recompute window" in words) == (total > 0),
          f"{name}: the legend names recompute windows exactly when it draws some ({total} drawn)")
    if plan is None:
        check(total == 0, f"{name}: no windows drawn for a fixed policy")
        return
    lanes = {int(g.get("id").split("-")[1]): float(next(g.iter(SVG + "rect")).get("y")) for g in groups(root, "stage")}
    for st in plan["stages"]:
        s, rects = st["stage"], drawn.get(st["stage"], [])
        check((len(rects) > 0) == (st["windows_used"] > 0) and len(rects) <= st["windows_used"],
              f"{name}: stage {s}: {len(rects)} window outlines for {st['windows_used']} windows used")
        check(all(float(r.get("y")) == lanes[s] for r in rects), f"{name}: stage {s}: outlines on its compute lane")


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


def check_schedule_svg(name, out_dir, case, m, runs, spans, plan=None):
    root = parse_svg(name, os.path.join(out_dir, "schedule.svg"))
    if root is None:
        return
    check_svg_windows(name, root, spans, plan)
    pp = case["pp"]
    rows = groups(root, "stage")
    check(len(rows) == pp and all(f"stage {s}" in texts(g) for s, g in enumerate(rows)),
          f"{name}: schedule.svg has one row per stage, labelled")
    title = " ".join(texts(root)[:2])
    check("iteration" in title and "bubble" in title and "MFU" in title,
          f"{name}: the title gives iteration time, bubble and MFU ({title!r})")
    legend = [g for g in root.iter(SVG + "g") if g.get("id") == "legend"]
    words = texts(legend[0]) if legend else []
    recomputes = case["policy"] != "none" and not case.get("offload")
    want = {"forward", "backward", "idle (bubble)"} | ({"recompute"} if recomputes else set())
    want |= {"weight gradients (W)"} if case["schedule"] == "zb-h1" else set()
    want |= {"next step's forward (2BW)"} if case["schedule"] == "2bw" else set()
    want |= {"chunk %d" % v for v in range(1, chunks_of(case))}
    want |= {"offload / prefetch"} if case.get("offload") else set()
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
        want = {"fwd": runs[s].get("FWD", 0), "bwd": runs[s].get("BWD", 0), "rec": runs[s].get("RECOMPUTE", 0),
                "wgt": runs[s].get("BWD_WEIGHT", 0)}
        got = {c: classes.count(c) for c in want}
        check(got == want, f"{name}: stage {s} draws one box per run of a kind and micro-batch ({got} vs {want})")
        if case["policy"] == "none":
            n = m * steps_drawn(case) * chunks_of(case)
            check(got["fwd"] == n and got["bwd"] == n,
                  f"{name}: stage {s}: one forward, one backward box per micro-batch (of {steps_drawn(case)} steps)"
                  f" and chunk")


def compute_runs(spans, pp, iteration_us):
    """Per stage: how many runs of consecutive instructions of one kind and
    micro-batch the compute stream has, by kind, plus the recompute stream's
    runs, where in-window recomputes of one micro-batch merge only when no
    visible gap (half a pixel of the 1226-pixel plot) parts them."""
    runs = []
    us_per_px = iteration_us / (1400 - 150 - 24)
    for s in range(pp):
        counts = {}
        for tid in (0, 1):
            lane = sorted((e for e in spans if e["pid"] == s and e["tid"] == tid), key=lambda e: e["ts"])
            last, end = None, None
            for e in lane:
                step = (e["args"]["kind"], e["args"].get("mb"))
                if step != last or (tid == 1 and (e["ts"] - end) / us_per_px >= 0.5):
                    counts[step[0]] = counts.get(step[0], 0) + 1
                last, end = step, max(end or 0, e["ts"] + e["dur"])
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

def check_token_split(name, out_dir, spans):
    """The split ops' copies and recomputes name their rows; the recompute ends before the backward."""
    splits = {}
    for s, st in enumerate(read_decisions(out_dir)):
        for op, d in st.items():
            m = re.match(r"token-wise: rows \[0, (\d)/8\)", d)
            if m:
                splits[(s, op)] = int(m.group(1))
    check(splits, f"{name}: plan.txt splits an op token-wise ({splits})")
    wrong, late, seen = [], [], 0
    for e in spans:
        a = e["args"]
        k = splits.get((e["pid"], a.get("op")))
        if k is None or a["kind"] not in ("OFFLOAD", "PREFETCH", "RECOMPUTE"):
            continue
        seen += 1
        want = f"[{k}/8, 8/8)" if a["kind"] == "RECOMPUTE" else f"[0/8, {k}/8)"
        if a.get("rows") != want:
            wrong.append((e["name"], a.get("rows"), want))
        if a["kind"] == "RECOMPUTE":
            bwd = [b["ts"] for b in spans if b["pid"] == e["pid"] and b["args"]["kind"] == "BWD"
                   and b["args"].get("layer") == a["layer"] and b["args"]["mb"] == a["mb"]]
            if not bwd or e["ts"] + e["dur"] > min(bwd) + 0.002:
                late.append(e["name"])
    check(seen and not wrong, f"{name}: the split ops' {seen} copies and recomputes name their rows ({wrong[:2]})")
    check(not late, f"{name}: each recompute of a split op's rows ends before its layer's backward ({late[:3]})")


def check_head_pieces(name, out_dir, spans):
    """A head-split op's recomputes name their kv-head pieces, which cover each of its layer instances
    once, and end before the backward."""
    cut = {(s, op): kv_pieces_of(d) for s, st in enumerate(read_decisions(out_dir)) for op, d in st.items()
           if kv_pieces_of(d) > 1}
    check(cut, f"{name}: plan.txt cuts an op's recompute into pieces of its kv heads ({cut})")
    covered, events, wrong = {}, {}, []
    for e in spans:
        a = e["args"]
        pieces = cut.get((e["pid"], a.get("op")))
        if pieces is None or a["kind"] != "RECOMPUTE":
            continue
        m = re.fullmatch(r"\[(\d+), (\d+)\) of (\d+)", a.get("kv_pieces", f"[0, {pieces}) of {pieces}"))
        bwd = [b["ts"] for b in spans if b["pid"] == e["pid"] and b["args"]["kind"] == "BWD"
               and b["args"].get("layer") == a["layer"] and b["args"]["mb"] == a["mb"]]
        if not m or int(m.group(3)) != pieces or not bwd or e["ts"] + e["dur"] > min(bwd) + 0.002:
            wrong.append((e["name"], a.get("kv_pieces")))
            continue
        key = (e["pid"], a["op"], a["layer"], a["mb"])
        covered.setdefault(key, []).extend(range(int(m.group(1)), int(m.group(2))))
        events[key] = events.get(key, 0) + 1
    once = all(sorted(p) == list(range(cut[(k[0], k[1])])) for k, p in covered.items())
    spread = sum(n > 1 for n in events.values())
    check(covered and once and spread, f"{name}: the pieces of each of {len(covered)} layer instances' recompute "
          f"cover its kv heads once; {spread} instances run them in several recomputes")
    check(not wrong, f"{name}: each piece names its kv heads and ends before its layer's backward ({wrong[:3]})")


CASES = [
    # examples/tiny.model's own plan
    dict(layers=4, pp=2, tp=1, dp=1, micro_batch=2, global_batch=8, schedule="1f1b", policy="none"),
    # uneven stages, GPipe, tensor and data parallelism, full recompute
    dict(layers=5, pp=3, tp=2, dp=2, micro_batch=1, global_batch=12, schedule="gpipe", policy="full"),
    # deep 1F1B with selective recompute and one layer per stage
    dict(layers=4, pp=4, tp=1, dp=1, micro_batch=1, global_batch=6, schedule="1f1b", policy="selective"),
    # Lynx on GPUs of 3 MiB: recompute in the pipeline's windows and on demand
    # (without offload, which would take the place of most recompute on GPUs this small)
    dict(layers=4, pp=2, tp=1, dp=1, micro_batch=2, global_batch=8, schedule="1f1b", policy="lynx-heu",
         extra=["--gpu-memory", "0.003", "--no-offload"]),
    # (at 3 MiB a cool-down window shrinks once the later stages hide their recompute: the plan
    # measures the windows again and places less there, so each recompute still starts in its window)
    dict(layers=6, pp=3, tp=1, dp=1, micro_batch=1, global_batch=6, schedule="1f1b", policy="lynx-heu",
         extra=["--gpu-memory", "0.003", "--no-offload"]),
    # ... at tp 2, where an instance's in-window ops spread over several all-reduce windows
    dict(layers=4, pp=2, tp=2, dp=1, micro_batch=2, global_batch=8, schedule="1f1b", policy="lynx-heu",
         extra=["--gpu-memory", "0.0025", "--no-offload"], split=True),
    # Lynx with offload: copies to host memory after the forwards, back before the backwards
    dict(layers=4, pp=2, tp=2, dp=1, micro_batch=2, global_batch=8, schedule="1f1b", policy="lynx-heu",
         extra=["--gpu-memory", "0.0025"], offload=True),
    # ... and token-wise: part of the gelu's rows offloaded, the rest recomputed (a what-if profile)
    dict(layers=4, pp=2, tp=2, dp=1, micro_batch=2, global_batch=8, schedule="gpipe", policy="lynx-heu",
         extra=["--gpu-memory", "0.002", "--profile",
                os.path.join(ROOT, "tests", "profiles", "tiny-token-split.profile")], offload=True, token_split=True),
    # ... and the attention's recompute in pieces of its kv heads, each where a window has room (a what-if;
    # two micro-batches a replica, as the profile's comment has it)
    dict(layers=4, pp=2, tp=2, dp=2, micro_batch=2, global_batch=8, schedule="1f1b", policy="lynx-heu",
         extra=["--gpu-memory", "0.0021", "--no-offload", "--profile",
                os.path.join(ROOT, "tests", "profiles", "tiny-head-pieces.profile")], head_pieces=True),
    # zero bubble: W passes s micro-batches late on stage s, drawn apart from the backwards
    dict(layers=4, pp=4, tp=1, dp=1, micro_batch=1, global_batch=7, schedule="zb-h1", policy="none"),
    # PipeDream-2BW: steps that overlap, drawn back to back, the next step's first forwards in the drain
    dict(layers=4, pp=4, tp=1, dp=1, micro_batch=1, global_batch=6, schedule="2bw", policy="none"),
    # interleaved 1F1B: chunks of two layers, the later chunk in a lighter shade, sends around the ring
    dict(layers=8, pp=2, tp=1, dp=1, micro_batch=1, global_batch=4, schedule="interleaved", policy="none",
         chunks=2, extra=["--virtual-stages", "2"]),
    dict(layers=6, pp=2, tp=1, dp=1, micro_batch=1, global_batch=6, schedule="interleaved", policy="full",
         chunks=3, extra=["--virtual-stages", "3"]),
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
    plan = plan_json(model, case) if case["policy"].startswith("lynx") else None
    trace = check_trace(name, out, case, plan)
    spans = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    if plan is not None:
        check_windows(name, out, spans, plan, case)
    if case.get("offload"):
        check_offload(name, spans)
    if case.get("token_split"):
        check_token_split(name, out, spans)
    if case.get("head_pieces"):
        check_head_pieces(name, out, spans)
    m, _ = expected_counts(case, [0] * case["pp"])
    runs = compute_runs(spans, case["pp"], drawn_us(trace))
    check_schedule_svg(name, out, case, m, runs, spans, plan)
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


def trace_of(out):
    with open(os.path.join(out, "trace.json")) as f:
        return json.load(f)


def event_key(e):
    return (e["name"], e["pid"], e["tid"], e["ts"], e["dur"])


def run_capped(tmp):
    """256 micro-batches, written whole and capped at CAP instruction events."""
    CAP = 1000
    model = os.path.join(tmp, "capped.model")
    with open(model, "w") as f:
        f.write(MODEL.replace("LAYERS", "4"))
    case = dict(layers=4, pp=2, tp=1, dp=1, micro_batch=1, global_batch=256, schedule="1f1b", policy="none")
    runs = {}
    for label, extra in (("whole", ["--trace-events", "0"]), ("capped", ["--trace-events", str(CAP)]),
                         ("default", [])):
        runs[label] = os.path.join(tmp, f"capped-{label}")
        if not check(run_lynxgen(model, runs[label], plan_args(case) + extra), f"capped: lynxgen -o {extra} exits 0"):
            return
    whole, capped = trace_of(runs["whole"]), trace_of(runs["capped"])
    full = [e for e in whole["traceEvents"] if e["ph"] == "X"]
    kept = [e for e in capped["traceEvents"] if e["ph"] == "X"]
    omitted = capped["otherData"].get("omitted")
    check("omitted" not in whole["otherData"] and omitted is not None,
          f"capped: otherData.omitted only where events were left out ({omitted})")
    if omitted is None:
        return
    lo, hi, eps = omitted["from_us"], omitted["to_us"], 0.002
    full_keys = {event_key(e) for e in full}
    check(all(event_key(e) in full_keys for e in kept), "capped: every event written is the uncapped trace's")
    left_out = [e for e in full if event_key(e) not in {event_key(k) for k in kept}]
    check(all(e["ts"] < lo + eps or e["ts"] > hi - eps for e in kept) and
          all(lo - eps <= e["ts"] <= hi + eps for e in left_out),
          f"capped: those written start before {lo} us or after {hi} us, those left out between")
    before = sum(e["ts"] < lo for e in kept)
    check(len(kept) <= CAP and before <= CAP // 2 and len(kept) - before <= CAP // 2 and
          before > 0.9 * CAP // 2 and len(kept) - before > 0.9 * CAP // 2,
          f"capped: at most {CAP} events, at most half on each side ({before} before, {len(kept) - before} after)")
    check(omitted["events"] == len(full) - len(kept) == len(left_out) and len(full) > 10 * CAP,
          f"capped: otherData says {omitted['events']} left out of {len(full)}")
    check(any(e["args"]["kind"] == "OPTIMIZER_STEP" for e in kept), "capped: the optimizer step is kept")
    cuts = sorted(e["ts"] for e in capped["traceEvents"] if e["ph"] == "i" and e.get("s") == "g")
    check(cuts == [lo, hi], f"capped: a global instant event at each cut ({cuts})")
    same = open(os.path.join(runs["whole"], "trace.json"), "rb").read() == \
        open(os.path.join(runs["default"], "trace.json"), "rb").read()
    check(same, f"capped: {len(full)} events are under the default cap: the default trace is the whole one")
    r = subprocess.run([LYNXGEN, model, "-o", os.path.join(tmp, "capped-bad"), "--trace-events", "-1"],
                       capture_output=True, text=True)
    check(r.returncode == 2 and "--trace-events" in r.stderr, f"capped: --trace-events -1 is a usage error ({r.stderr.strip()})")


def main():
    tmp = tempfile.mkdtemp(prefix="lynxgen-trace-")
    try:
        for i, case in enumerate(CASES):
            run_case(tmp, i, case)
        run_large(tmp)
        run_capped(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
