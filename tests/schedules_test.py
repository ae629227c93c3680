"""Pipeline schedules beyond 1F1B, trained on the CPU target (issue: schedules).

Interleaved 1F1B (Narayanan et al., SC 2021) gives each stage V chunks of
layers and runs the micro-batches through them in Megatron's order. Each
layer still sees micro-batches 0, 1, ... in order in its forwards and its
backwards, and adds their weight gradients into the same fp32 buffer in that
order, so its per-step losses must be bitwise 1F1B's too. Checks: at pp = 2
(4 layers, chunks of 2) and pp = 4 (8 layers, chunks of 1), for the GPT and
the Llama, with none, full and lynx-heu; at pp = 4 with Lynx recomputing in
the windows it finds (a GPT of 8 layers, 4 MiB GPUs, 8 micro-batches); at
tp 2 x pp 2 x dp 2 with ZeRO-1 and sequence parallelism; and each stage's
arena is used exactly to the planned extents (make check), with its chunks'
pipeline buffers and the layers of all its chunks in its stash slots.

ZB-H1 (Qi et al. 2024, zero bubble) splits the backward of a stage's block
linears into B (the input gradient, on the critical path) and W (the weight
gradient), and runs W `weight_lag` micro-batches late. It computes the same
sums as 1F1B, in the same order: each weight gradient is the same products of
the same inputs and output gradients, added into the same fp32 buffer one
micro-batch after the other, and the W passes run in micro-batch order. So
the per-step losses must be bitwise 1F1B's; any difference is an error (a
gradient read from another micro-batch's slot, a W pass run twice or
skipped), not rounding.

Checks, for a GPT (layernorm, gelu, learned positions, dropout) and a Llama
(rmsnorm, rope, grouped-query flash attention, swiglu), at pp = 2 and 4, with
the recompute policies none, full and lynx-heu (3 MiB GPUs, so that Lynx
recomputes in windows; 4 MiB at pp = 4, whose models have 8 layers, so that
interleaved 1F1B has two chunks per stage there too):

- the generated programs are ZB-H1's: W passes on every stage but the first
  (whose lag is 0: its backwards stay whole), except under full recompute,
  which drops every linear's input that a W pass would read;
- 6 steps of ZB-H1 give bitwise 1F1B's per-step losses;
- so do 4 steps at tp 2 x pp 2 x dp 2 with ZeRO-1 (the GPT; W passes of
  column- and row-parallel linears, buckets reduced after the last W), and
  with sequence parallelism too, where each W pass gathers the whole tensor
  it reads again from the shard kept for it (a column-parallel linear's
  input, a row-parallel one's output gradient), and its arena is used
  exactly as planned;
- ZB-H1's arena is used exactly to the planned extents with dead memory
  poisoned (make check), where W reads output gradients kept in stash slots.

PipeDream-2BW (Narayanan et al. 2021) is not the same training: a step
computes with the weights before the last update. Its reference is
tests/gpt_reference.py, a GPT-2 trained in float64 numpy from the published
model and optimizer, here with the delayed update W(t+1) = W(t) -
AdamW(gradient at W(t-1)), and both start from weights drawn here (--init).
The programs compute in fp32, the reference in float64; over 5 steps their
losses agree to about 1e-7 relative (fp32 rounding), so 1e-5 bounds them,
while the delay itself changes step 2's loss by about 3e-2 relative. Checks:

- the reference is right where lynxgen is known to be: the 1F1B program's
  losses match its synchronous variant (delay 0);
- 2BW at pp = 2 (none), pp = 4 (full, and lynx-heu recomputing in
  windows) and tp 2 x pp 2 x dp 2 with ZeRO-1 and sequence parallelism
  matches the delayed reference, and not the synchronous one;
- its programs run the next step's first forwards in this step's drain
  (`if (ahead)`), and its plan.txt says the training is not synchronous;
- its gradients match central finite differences of the loss (--gradcheck);
- its arena, with the second weight version, is used exactly as planned.
"""
import os
import re
import sys

from tap import check, exit_status

import gpt_reference
from training_metrics import fortunes_shards, generate, losses, train

GPT = """#include <lynx.h>
#define V 256
#define H 64
static const struct lx_model model = { .vocab = V, .seq_len = 32, .layers = 4, .hidden = H, .heads = 4,
  .dropout = 0.1, .tied_embeddings = 1 };
static const struct lx_cluster cluster = { .gpu = GPU_A100_80GB, .gpus_per_node = 8 };
static const struct lx_parallel parallel = { .tp = 1, .pp = 1, .dp = 1, .micro_batch = 2, .global_batch = 8 };
static const struct lx_training training = { .steps = 10, .lr = 3e-3, .min_lr = 3e-4, .warmup_steps = 5,
  .lr_schedule = LR_COSINE, .weight_decay = 0.0, .grad_clip = 1.0, .seed = 7, .dtype = DTYPE_FP32 };
tensor prologue(tensor tokens) {
  return dropout(add(embedding(tokens, V, H), position_embedding(tokens, H)));
}
tensor block(tensor x) {
  tensor a = attention(linear(layernorm(x), 3 * H), 4, 4);
  x = add(x, dropout(linear(a, H)));
  tensor m = linear(gelu(linear(layernorm(x), 4 * H)), H);
  return add(x, dropout(m));
}
tensor epilogue(tensor x, tensor targets) {
  return cross_entropy(lm_head(layernorm(x), V), targets);
}
"""

LLAMA = """#include <lynx.h>
#define V 256
#define H 64
#define HEADS 4
#define KV 2
#define FFN 160
static const struct lx_model model = { .vocab = V, .seq_len = 32, .layers = 4, .hidden = H, .heads = HEADS,
  .kv_heads = KV, .ffn_hidden = FFN, .dropout = 0.0, .tied_embeddings = 0 };
static const struct lx_cluster cluster = { .gpu = GPU_H100_80GB, .gpus_per_node = 8 };
static const struct lx_parallel parallel = { .tp = 1, .pp = 1, .dp = 1, .micro_batch = 2, .global_batch = 8 };
static const struct lx_training training = { .steps = 10, .lr = 3e-3, .min_lr = 3e-4, .warmup_steps = 5,
  .lr_schedule = LR_COSINE, .weight_decay = 0.1, .grad_clip = 1.0, .seed = 11, .dtype = DTYPE_FP32 };
tensor prologue(tensor tokens) {
  return embedding(tokens, V, H);
}
tensor block(tensor x) {
  tensor qkv = rope(linear_nobias(rmsnorm(x), (HEADS + 2 * KV) * (H / HEADS)), HEADS, KV);
  x = add(x, linear_nobias(flash_attention(qkv, HEADS, KV), H));
  tensor h = linear_nobias(swiglu(linear_nobias(rmsnorm(x), 2 * FFN)), H);
  return add(x, h);
}
tensor epilogue(tensor x, tensor targets) {
  return cross_entropy(lm_head(rmsnorm(x), V), targets);
}
"""

# 2BW against the numpy reference: no dropout (the reference has none: the
# dropout() calls at probability 0 are their inputs, left out of the IR), a
# constant learning rate and no clipping (nothing the reference would have
# to mirror besides AdamW itself).
GPT_2BW = """#include <lynx.h>
#define V 256
#define H 32
static const struct lx_model model = { .vocab = V, .seq_len = 32, .layers = 4, .hidden = H, .heads = 2,
  .dropout = 0.0, .tied_embeddings = 1 };
static const struct lx_cluster cluster = { .gpu = GPU_A100_80GB, .gpus_per_node = 8 };
static const struct lx_parallel parallel = { .tp = 1, .pp = 1, .dp = 1, .micro_batch = 2, .global_batch = 8 };
static const struct lx_training training = { .steps = 5, .lr = 3e-3, .min_lr = 3e-3, .warmup_steps = 0,
  .lr_schedule = LR_CONSTANT, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.0, .grad_clip = 0.0,
  .seed = 7, .dtype = DTYPE_FP32 };
tensor prologue(tensor tokens) {
  return dropout(add(embedding(tokens, V, H), position_embedding(tokens, H)));
}
tensor block(tensor x) {
  tensor a = attention(linear(layernorm(x), 3 * H), 2, 2);
  x = add(x, dropout(linear(a, H)));
  tensor m = linear(gelu(linear(layernorm(x), 4 * H)), H);
  return add(x, m);
}
tensor epilogue(tensor x, tensor targets) {
  return cross_entropy(lm_head(layernorm(x), V), targets);
}
"""
REFERENCE_BOUND = 1e-5  # fp32 programs against float64 numpy (see the docstring)

POLICIES = {
    "none": ("--policy", "none"),
    "full": ("--policy", "full"),
    "lynx-heu": ("--policy", "lynx-heu", "--gpu-memory", "0.003", "--allow-oom-plan"),
}


def main():
    work = fortunes_shards("lynx-schedules-")
    if work is None:
        return
    for name, text in (("gpt", GPT), ("llama", LLAMA)):
        for pp in (2, 4):
            model = os.path.join(work, "%s-%d.model" % (name, 2 * pp))  # interleaved: 2 chunks per stage
            with open(model, "w") as f:
                f.write(text.replace(".layers = 4", ".layers = %d" % (2 * pp)))
            for policy, args in POLICIES.items():
                if pp == 4 and policy == "lynx-heu":  # twice the layers a stage: 4 MiB GPUs, still windowed
                    args = tuple("0.004" if a == "0.003" else a for a in args)
                layout = ("--pp", str(pp), *args)
                label = "%s pp=%d %s" % (name, pp, policy)
                reference = generate(work, "%s-pp%d-%s-1f1b" % (name, pp, policy), model, *layout, "--schedule", "1f1b",
                                     quick=True)
                zb = generate(work, "%s-pp%d-%s-zb" % (name, pp, policy), model, *layout, "--schedule", "zb-h1",
                              quick=True)
                if reference is None or zb is None:
                    check(False, "%s: 1F1B and ZB-H1 generate and build" % label)
                    continue
                with open(os.path.join(zb, "stage%d.c" % (pp - 1))) as f:
                    last_stage = f.read()
                with open(os.path.join(zb, "stage0.c")) as f:
                    first_stage = f.read()
                if policy == "full":
                    check("weights_block(" not in last_stage + first_stage,
                          "%s: no W pass (full recompute drops the linears' inputs)" % label)
                else:
                    check("weights_block(" in last_stage and "weights_block(" not in first_stage,
                          "%s: ZB-H1's last stage runs W passes, its first stage whole backwards" % label)
                r1, m1 = train(reference, work, "--steps", "6")
                r2, m2 = train(zb, work, "--steps", "6")
                if r1.returncode != 0 or r2.returncode != 0:
                    check(False, "%s: 1F1B and ZB-H1 train 6 steps" % label)
                    print((r1.stdout + r1.stderr)[-2000:] + (r2.stdout + r2.stderr)[-2000:])
                    continue
                a, b = losses(m1), losses(m2)
                check(len(a) == 6 and a == b, "%s: ZB-H1 gives bitwise 1F1B's losses %s" % (label, b))
                interleaved(work, label, model, layout, a)
    model = os.path.join(work, "gpt-4.model")
    windowed_interleaved(work)
    for label, extra in (("ZeRO-1", ()), ("ZeRO-1 sequence-parallel", ("--sequence-parallel",))):
        layout = ("--tp", "2", "--pp", "2", "--dp", "2", "--zero", *extra)
        programs = {s: generate(work, "%s-%s" % (label.replace(" ", "-"), s), model, *layout, "--schedule", s,
                                quick=True) for s in ("1f1b", "zb-h1", "interleaved")}
        runs = {s: train(p, work, "--steps", "4") if p else (None, None) for s, p in programs.items()}
        ok = all(r is not None and r.returncode == 0 for r, _ in runs.values())
        got = {s: losses(m) if ok else None for s, (_, m) in runs.items()}
        deferred = False
        if ok:
            with open(os.path.join(programs["zb-h1"], "plan.txt")) as f:  # stage 1's line (stage 0's lag is 0)
                deferred = "W passes   the weight gradients of 4 linears per layer" in f.read()
        check(ok and got["1f1b"] == got["zb-h1"] and len(got["1f1b"]) == 4 and deferred,
              "gpt tp=2 pp=2 dp=2 %s: ZB-H1 (%s) gives bitwise 1F1B's losses %s" % (
                  label, "W passes" if deferred else "no W pass", got["zb-h1"]))
        check(ok and got["1f1b"] == got["interleaved"],
              "gpt tp=2 pp=2 dp=2 %s: interleaved 1F1B gives bitwise 1F1B's losses %s" % (label, got["interleaved"]))
    # The memory plan, measured, where W reads what it keeps in its pools.
    sp = ("--tp", "2", "--pp", "2", "--dp", "2", "--zero", "--sequence-parallel")
    for label, layout, policy, stages_of in (("pp=4 none", ("--pp", "4"), "none", 4),
                                             ("pp=4 lynx-heu", ("--pp", "4"), "lynx-heu", 4),
                                             ("tp=2 pp=2 dp=2 ZeRO-1 sequence-parallel", sp, "none", 2)):
        program = generate(work, "mem-zb-%s" % label.replace(" ", "-").replace("=", ""), model, *layout,
                           "--schedule", "zb-h1", *POLICIES[policy], target="check", quick=True)
        r, _ = train(program, work, "--steps", "3", variant="-check") if program else (None, None)
        out = r.stdout if r else ""
        stages = [l for l in out.splitlines() if l.startswith("memory: stage")]
        ranks = stages_of * (4 if layout == sp else 1)
        ok = r is not None and r.returncode == 0 and len(stages) == ranks and all("as planned" in l for l in stages)
        check(ok, "ZB-H1 %s: each stage's arena is used exactly to the planned extents, poison never read" % label)
        if not ok:
            print(out[-3000:] + (r.stderr[-2000:] if r else ""))
    interleaved_memory(work)
    pipedream_2bw(work)


def interleaved(work, label, model, layout, one_f_one_b):
    """Interleaved 1F1B (2 chunks per stage) against 1F1B's losses of the same layout."""
    program = generate(work, label.replace(" ", "-").replace("=", "") + "-interleaved", model, *layout,
                       "--schedule", "interleaved", quick=True)
    r, m = train(program, work, "--steps", "6") if program else (None, None)
    if r is None or r.returncode != 0:
        check(False, "%s: interleaved 1F1B generates, builds and trains 6 steps" % label)
        print((r.stdout + r.stderr)[-2000:] if r else "")
        return
    with open(os.path.join(program, "plan.txt")) as f:
        plan = f.read()
    check(re.search(r"^stage 0: prologue \+ layers [0-9-]+, [0-9-]+,", plan, re.M) is not None,
          "%s: stage 0 holds two chunks of layers (plan.txt)" % label)
    got = losses(m)
    check(len(got) == 6 and got == one_f_one_b, "%s: interleaved 1F1B gives bitwise 1F1B's losses %s" % (label, got))


SQUEEZED = ("--pp", "4", "--policy", "lynx-heu", "--gpu-memory", "0.004", "--allow-oom-plan", "--global-batch", "16")
WINDOWED = SQUEEZED + ("--no-offload",)


def windowed_interleaved(work):
    """Lynx's windows under interleaved 1F1B: recompute on the recompute stream, same losses;
    with offload, what ops save goes to host memory and back, same losses again."""
    model = os.path.join(work, "gpt-8.model")
    programs = {s: generate(work, "windowed-" + s, model, *WINDOWED, "--schedule", s, quick=True)
                for s in ("1f1b", "interleaved")}
    programs["interleaved offload"] = generate(work, "offload-interleaved", model, *SQUEEZED, "--schedule",
                                               "interleaved", quick=True)
    runs = {s: train(p, work, "--steps", "4") if p else (None, None) for s, p in programs.items()}
    ok = all(r is not None and r.returncode == 0 for r, _ in runs.values())
    hidden = []
    if ok:
        with open(os.path.join(programs["interleaved"], "plan.txt")) as f:
            hidden = [float(x.split(" ms hidden")[0].split(", ")[-1]) for x in f.read().splitlines()
                      if " ms hidden in windows" in x]
    check(ok and any(h > 0 for h in hidden), "gpt pp=4 lynx-heu interleaved: recompute hidden in windows %s" % hidden)
    got = {s: losses(m) if ok else None for s, (_, m) in runs.items()}
    check(ok and len(got["1f1b"]) == 4 and got["1f1b"] == got["interleaved"],
          "gpt pp=4 lynx-heu in windows: interleaved 1F1B gives bitwise 1F1B's losses %s" % got["interleaved"])
    offloads = False
    if programs["interleaved offload"]:
        with open(os.path.join(programs["interleaved offload"], "plan.txt")) as f:
            offloads = "offload to host memory" in f.read()
    check(ok and offloads and got["interleaved offload"] == got["1f1b"],
          "gpt pp=4 lynx-heu interleaved with offload (plan.txt: %s): bitwise 1F1B's losses" % (
              "offloads" if offloads else "no offload"))


def interleaved_memory(work):
    model = os.path.join(work, "gpt-8.model")
    for label, layout, ranks in (("pp=2 V=4 none", ("--pp", "2", "--virtual-stages", "4"), 2),
                                 ("pp=4 lynx-heu in windows", WINDOWED, 4)):
        program = generate(work, "mem-il-%d" % ranks, model, *layout, "--schedule", "interleaved", target="check",
                           quick=True)
        r, _ = train(program, work, "--steps", "3", variant="-check") if program else (None, None)
        out = r.stdout if r else ""
        stages = [l for l in out.splitlines() if l.startswith("memory: stage")]
        ok = r is not None and r.returncode == 0 and len(stages) == ranks and all("as planned" in l for l in stages)
        check(ok, "interleaved %s: each stage's arena is used exactly to the planned extents, poison never read"
              % label)
        if not ok:
            print(out[-3000:] + (r.stderr[-2000:] if r else ""))


def relative_difference(a, b):
    return max(abs(x - y) / abs(y) for x, y in zip(a, b)) if len(a) == len(b) and a else float("inf")


def pipedream_2bw(work):
    model = os.path.join(work, "gpt-2bw.model")
    with open(model, "w") as f:
        f.write(GPT_2BW)
    weights = gpt_reference.random_weights(32, 256, 4, 32, 256, seed=1)
    init = os.path.join(work, "gpt-2bw-init.bin")
    gpt_reference.write_checkpoint(init, weights, 32, 256, 4, 2, 32, 256)
    data = gpt_reference.windows(os.path.join(work, "data", "train_*.bin"), 2, 32)
    reference = {delay: gpt_reference.train(weights, data, 5, 4, 2, 256, 3e-3, 0.9, 0.95, 1e-8, delay=delay)
                 for delay in (0, 1)}
    check(relative_difference(reference[1], reference[0]) > 1000 * REFERENCE_BOUND,
          "the delayed update changes the losses far beyond the bound: %s vs %s" % (reference[1], reference[0]))
    zero_sp = ("--tp", "2", "--dp", "2", "--zero", "--sequence-parallel")
    cases = (("1f1b", 2, "none", (), 0), ("2bw", 2, "none", (), 1), ("2bw", 4, "full", (), 1),
             ("2bw", 4, "lynx-heu", (), 1), ("2bw", 2, "none", zero_sp, 1))
    # the exact cases: step 1 is synchronous training's; step 2 takes the loss of its batch at the
    # initial weights, whose gradient is its update's
    step2_at_w0 = sum(gpt_reference.loss_and_gradients(weights, *data[4 + j], 2, 256)[0] for j in range(4)) / 4
    first = {}
    for schedule, pp, policy, layout, delay in cases:
        label = "gpt %s pp=%d %s%s" % (schedule, pp, policy, " tp=2 dp=2 ZeRO-1 sequence-parallel" if layout else "")
        program = generate(work, "2bw-ref-%s-pp%d-%s%s" % (schedule, pp, policy, "-tp2dp2" if layout else ""), model,
                           "--pp", str(pp), *layout, "--schedule", schedule, *POLICIES[policy], quick=True)
        r, metrics = train(program, work, "--init", init) if program else (None, None)
        if r is None or r.returncode != 0:
            check(False, "%s: generates, builds and trains from --init" % label)
            print((r.stdout + r.stderr)[-2000:] if r else "")
            continue
        got = losses(metrics)
        first[label] = got[0]
        off = relative_difference(got, reference[delay])
        check(off < REFERENCE_BOUND, "%s: the losses %s match the numpy reference with %s (%.1e relative)" % (
            label, got, "the delayed update" if delay else "synchronous updates", off))
        if schedule != "2bw":
            continue
        check(relative_difference(got, reference[0]) > 1000 * REFERENCE_BOUND,
              "%s: and not the synchronous reference" % label)
        same_layout = "gpt 1f1b pp=%d %s" % (pp, policy)  # the same sums in the same order: bitwise
        step1 = got[0] == first[same_layout] if same_layout in first else \
            abs(got[0] - reference[0][0]) < REFERENCE_BOUND * reference[0][0]
        check(step1 and abs(got[1] - step2_at_w0) < REFERENCE_BOUND * step2_at_w0,
              "%s: step 1's loss is synchronous training's (%s), step 2's that of its batch at the initial "
              "weights (%.8f)" % (label, got[0], step2_at_w0))
        with open(os.path.join(program, "stage0.c")) as f:
            ahead = "if (ahead) {" in f.read()
        with open(os.path.join(program, "plan.txt")) as f:
            plan = f.read()
        check(ahead and "not synchronous training" in plan,
              "%s: stage 0 runs the next step's forwards ahead; plan.txt says it is not synchronous training" % label)
    # the backward takes its gradients at the weights its forward used (the previous version): central
    # differences of the forward-only pass (the live weights, equal to them before the first step) agree
    program = generate(work, "grad-2bw", model, "--pp", "2", "--schedule", "2bw", target="gradcheck")
    r, _ = train(program, work, "--gradcheck", variant="-gradcheck") if program else (None, None)
    check(r is not None and r.returncode == 0 and " 0 failed" in r.stdout,
          "2BW pp=2: every parameter's gradient matches central finite differences of the loss (--gradcheck)")
    program = generate(work, "mem-2bw", model, "--pp", "4", "--schedule", "2bw", *POLICIES["lynx-heu"],
                       target="check", quick=True)
    r, _ = train(program, work, "--steps", "3", variant="-check") if program else (None, None)
    out = r.stdout if r else ""
    stages = [l for l in out.splitlines() if l.startswith("memory: stage")]
    ok = r is not None and r.returncode == 0 and len(stages) == 4 and all("as planned" in l for l in stages)
    check(ok, "2BW pp=4 lynx-heu: each stage's arena, both weight versions included, is used exactly as planned")
    if not ok:
        print(out[-3000:] + (r.stderr[-2000:] if r else ""))


main()
sys.exit(exit_status())
