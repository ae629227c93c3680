"""The emitted CPU programs, trained end to end (issue: emitted per-stage programs).

Each check builds a small GPT with lynxgen --target cpu, runs it through its
run.sh (mpirun, tp x dp ranks per stage) on byte-level shards of Debian's fortunes,
and compares against references derived here, independently of lynxgen:

- the loss falls well below the unigram entropy of the training bytes;
- every parameter tensor's gradient matches central finite differences of the
  loss (double-precision build, --gradcheck), for pp = 1 and pp = 2, and for the
  MLP with silu (an op that is only its operand-table row and its kernels);
- the per-step losses are bitwise equal for every recompute policy, the Lynx
  ones included with memory squeezed so that recomputation runs in windows on
  the recompute stream (recomputing
  runs the same kernels on the same inputs, dropout masks are a pure function
  of seed, step, micro-batch, layer and op), and equal across pp = 1, 2, 4 up
  to the bound CROSS_PP_BOUND (see there for why not bitwise);
- tensor and data parallelism: every tp x pp x dp in {1, 2}^3 gives the
  losses of tp = pp = dp = 1 within CROSS_PARALLEL_BOUND, for every recompute
  policy; so does sequence parallelism, with smaller stashed activations in
  plan.txt; ZeRO-1 gives those of plain data parallelism with a 1/dp
  optimizer state in plan.txt; the gradients of a 2 x 2 x 2 ZeRO-1 run with
  sequence parallelism match finite differences, and its arena is used
  exactly as planned;
- the arena of every stage is written exactly to the extents of the static
  memory plan, with memory the plan calls dead poisoned (make check);
- an llm.c GPT-2 checkpoint written here loads and saves back byte-identical.
"""
import json
import math
import os
import struct
import sys
from collections import Counter

from tap import check, exit_status
from training_metrics import GPT_MODEL as MODEL, LYNXGEN, ROOT, fortunes_shards, generate, losses, run, train

# pp = 1 accumulates the tied embedding's gradient from the LM head and the
# embedding micro-batch by micro-batch into one buffer; pp > 1 sums each on its
# own stage and adds the two sums. Float addition is not associative, so the
# step-1 gradients differ in the last bits (~1e-7 relative) and the difference
# grows slowly with training; over the few steps run here it stays far below
# this bound, while any real error (a wrong buffer, a missed micro-batch)
# changes the loss by 1e-2 or more.
CROSS_PP_BOUND = 1e-5

# Tensor parallelism sums a row-parallel product's partial sums across ranks,
# and data parallelism sums the replicas' gradients, in orders that differ
# from one process computing everything: the same last-bits effect as above,
# and the same bound separates it from real errors (a wrong shard, a missed
# all-reduce or a misplaced dropout mask changes the loss by 1e-3 or more).
CROSS_PARALLEL_BOUND = 1e-5



def unigram_entropy(shard):
    with open(shard, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        tokens = struct.unpack("<%dH" % header[2], f.read(2 * header[2]))
    counts = Counter(tokens)
    n = len(tokens)
    return -sum(c / n * math.log(c / n) for c in counts.values())


def write_gpt2_checkpoint(path, seq, vocab, layers, heads, channels, padded):
    """llm.c's format: 256 int32 header, then fp32 parameters in its order."""
    C, L = channels, layers
    count = padded * C + seq * C + L * (2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C) + 2 * C
    header = [20240326, 3, seq, vocab, layers, heads, channels, padded] + [0] * 248
    values = [((i * 2654435761) % 1000003) / 1000003.0 - 0.5 for i in range(count)]
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%df" % count, *values))


def relative_difference(a, b):
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))


def arena_mib(plan_txt, part):
    """The first stage's MiB of `part` ("optimizer", "stashed activations") from plan.txt's arena line."""
    with open(plan_txt) as f:
        for line in f:
            if line.strip().startswith("arena"):
                return float(line.split(part + " ")[1].split(" MiB")[0])
    return None


def tensor_and_data_parallel(work, model, reference):
    """Every tp x pp x dp in {1, 2}^3 against the single-rank losses."""
    if reference is None:
        check(False, "tp/dp: the tp = pp = dp = 1 reference run exists")
        return
    # 1.5 MiB GPUs: the planned policies recompute, some of it in windows (a what-if: not all fit)
    squeeze = ("--gpu-memory", "0.0015", "--allow-oom-plan")
    cases = []
    for tp in (1, 2):
        for pp in (1, 2):
            for dp in (1, 2):
                every_policy = (tp, pp, dp) == (2, 2, 2)
                for policy in POLICIES if every_policy else ("none", "lynx-heu"):
                    if (tp, pp, dp) != (1, 1, 1):
                        cases.append((tp, pp, dp, policy))
    # a what-if under which lynx-heu splits an op token-wise (its first rows offloaded, the others
    # recomputed): GPipe on 1.52 MiB GPUs, a gelu of 20 us each way, the attention of 5 us forward
    # and 10 us backward (pinned, so that the cost model's attention does not move the choice), a host
    # link of 0.9 GB/s
    token_split = os.path.join(work, "token-split.profile")
    with open(token_split, "w") as f:
        f.write("op gelu 64 128 128 fp32 0.02 0.02\n"
                "op attention 64 96 32 fp32 0.005 0.01 seq=32 heads=2 impl=materialized\nhost 0.9\n")
    split_plan = ("--schedule", "gpipe", "--gpu-memory", "0.00152", "--allow-oom-plan", "--profile", token_split)
    # a what-if under which lynx-heu cuts the attention's recompute by kv heads: a forward of 100 us
    # against tensor-parallel all-reduces of about 80 us (40 us a step), on 1.5 MiB GPUs
    head_split = os.path.join(work, "head-split.profile")
    with open(head_split, "w") as f:
        f.write("op attention 64 96 32 fp32 0.1 0.15 seq=32 heads=2 impl=materialized\nlink nvlink3 235 40\n")
    heads_plan = ("--gpu-memory", "0.0015", "--allow-oom-plan", "--profile", head_split)
    cases += [(2, 2, 2, "none", "--sequence-parallel"), (2, 2, 1, "lynx-heu", "--sequence-parallel"),
              (2, 2, 2, "lynx-heu", "--no-offload"), (2, 2, 2, "lynx-heu", *split_plan),
              (2, 2, 2, "lynx-heu", *heads_plan)]
    profiles = {token_split: "--token-split", head_split: "--head-pieces"}
    at_222 = {}  # tp=pp=dp=2 losses per policy (no sequence parallelism)
    for tp, pp, dp, policy, *sp in cases:
        args = ("--tp", str(tp), "--pp", str(pp), "--dp", str(dp), "--policy", policy, *sp)
        args += squeeze if policy not in ("none", "full", "selective") and "--gpu-memory" not in sp else ()
        shown = [profiles[f] for f in sp if f in profiles] or list(sp)  # not the profile's temporary path
        name = "par-t%dp%dd%d-%s%s" % (tp, pp, dp, policy, "".join(f.replace("--sequence-parallel", "-sp")
                                                                     .replace("--no-offload", "-no-offload")
                                                                     .replace("--token-split", "-token-split")
                                                                     .replace("--head-pieces", "-head-pieces")
                                                                     for f in shown))
        program = generate(work, name, model, *args, quick=True)
        r, metrics = train(program, work, "--steps", "4") if program else (None, None)
        if r is None or r.returncode != 0:
            check(False, "tp=%d pp=%d dp=%d %s trains" % (tp, pp, dp, policy))
            if r is not None:
                print(r.stdout[-2000:] + r.stderr[-2000:])
            continue
        if (tp, pp, dp) == (2, 2, 2) and "--sequence-parallel" not in sp:
            at_222[policy + " ".join([""] + shown)] = losses(metrics)
        worst = relative_difference(losses(metrics), reference)
        check(worst <= CROSS_PARALLEL_BOUND, "tp=%d pp=%d dp=%d %s%s: losses equal tp=pp=dp=1's within %.0e (worst %.2e)"
              % (tp, pp, dp, policy, " ".join([""] + shown), CROSS_PARALLEL_BOUND, worst))
    # what the squeezed plans decide must not change a bit of what the program computes; lynx-heu's
    # plan offloads, and without offload spreads some layer instances' recompute over several
    # all-reduce windows
    lynx = ("--tp", "2", "--pp", "2", "--dp", "2", "--policy", "lynx-heu", *squeeze)
    plan = json.loads(run([LYNXGEN, model, "--plan", "--json", "--target", "cpu", *lynx], work).stdout or "{}")
    offloaded = sum(len(st.get("offloaded_ops", [])) for st in plan.get("stages", []))
    check(offloaded > 0, "tp=2 pp=2 dp=2 lynx-heu with 1.5 MiB GPUs offloads %d ops' tensors" % offloaded)
    plan = json.loads(run([LYNXGEN, model, "--plan", "--json", "--target", "cpu", *lynx, "--no-offload"],
                          work).stdout or "{}")
    split = sum(st.get("split_instances", 0) for st in plan.get("stages", []))
    check(split > 0, "tp=2 pp=2 dp=2 lynx-heu --no-offload with 1.5 MiB GPUs splits %d layer instances' in-window "
          "recompute" % split)
    plan = json.loads(run([LYNXGEN, model, "--plan", "--json", "--target", "cpu", "--tp", "2", "--pp", "2", "--dp",
                           "2", "--policy", "lynx-heu", *split_plan], work).stdout or "{}")
    splits = [s["op"] for st in plan.get("stages", []) for s in st.get("token_split_ops", [])]
    check(splits, "tp=2 pp=2 dp=2 lynx-heu, GPipe on 1.52 MiB GPUs under the profile, splits ops token-wise (%s)"
          % splits)
    plan = json.loads(run([LYNXGEN, model, "--plan", "--json", "--target", "cpu", "--tp", "2", "--pp", "2", "--dp",
                           "2", "--policy", "lynx-heu", *heads_plan], work).stdout or "{}")
    cut = [s["kv_pieces"] for st in plan.get("stages", []) for s in st.get("head_split_ops", [])]
    check(cut, "tp=2 pp=2 dp=2 lynx-heu on 1.5 MiB GPUs under the profile cuts the attention's recompute into %s "
          "pieces of its kv heads" % cut)
    for policy in list(POLICIES[1:]) + ["lynx-heu --no-offload", "lynx-heu --token-split", "lynx-heu --head-pieces"]:
        check(policy in at_222 and at_222[policy] == at_222.get("none"),
              "tp=2 pp=2 dp=2 %s gives bitwise the losses of none" % policy)
    plain, sp = os.path.join(work, "par-t2p2d2-none"), os.path.join(work, "par-t2p2d2-none-sp")
    if os.path.exists(os.path.join(sp, "plan.txt")):
        before, after = arena_mib(os.path.join(plain, "plan.txt"), "stashed activations"), arena_mib(
            os.path.join(sp, "plan.txt"), "stashed activations")
        check(after < before, "sequence parallelism stashes less per rank (%s MiB instead of %s MiB)" % (after, before))
    zero = generate(work, "par-zero", model, "--tp", "2", "--pp", "2", "--dp", "2", "--zero", quick=True)
    r, metrics = train(zero, work, "--steps", "4") if zero else (None, None)
    if r is not None and r.returncode == 0 and os.path.exists(os.path.join(plain, "metrics.jsonl")):
        worst = relative_difference(losses(metrics), losses(os.path.join(plain, "metrics.jsonl")))
        check(worst <= CROSS_PARALLEL_BOUND,
              "ZeRO-1 (tp=2 pp=2 dp=2): losses equal plain data parallelism's within %.0e (worst %.2e)" % (
                  CROSS_PARALLEL_BOUND, worst))
        before = arena_mib(os.path.join(plain, "plan.txt"), "optimizer")
        after = arena_mib(os.path.join(zero, "plan.txt"), "optimizer")
        check(before and after and abs(after - before / 2) <= 0.01 * before and "ZeRO-1" in open(
            os.path.join(zero, "plan.txt")).read(),
              "ZeRO-1 with dp=2: plan.txt shows half the optimizer state (%s MiB instead of %s MiB)" % (after, before))
    else:
        check(False, "ZeRO-1 (tp=2 pp=2 dp=2) trains")
    everything = ("--tp", "2", "--pp", "2", "--dp", "2", "--zero", "--sequence-parallel")
    grad = generate(work, "grad-zero", model, *everything, target="gradcheck")
    r, _ = train(grad, work, "--gradcheck", "--gradcheck-samples", "2", variant="-gradcheck") if grad else (None, None)
    lines = [l for l in (r.stdout if r else "").splitlines() if "worst relative error" in l]
    check(r is not None and r.returncode == 0 and len(lines) == 8,
          "tp=2 pp=2 dp=2 ZeRO-1 sequence-parallel: every parameter tensor's gradient (each shard, each replica) "
          "matches finite differences (%s)" % (lines[0].split(";")[-1].strip() if lines else "no result"))
    program = generate(work, "mem-zero-sp", model, *everything, "--policy", "lynx-heu", *squeeze, target="check")
    r, _ = train(program, work, "--steps", "2", variant="-check") if program else (None, None)
    stages = [l for l in (r.stdout if r else "").splitlines() if l.startswith("memory: stage")]
    check(r is not None and r.returncode == 0 and len(stages) == 8 and all("as planned" in l for l in stages),
          "tp=2 pp=2 dp=2 ZeRO-1 sequence-parallel lynx-heu: every rank's arena is used exactly to the planned "
          "extents, poison never read")


POLICIES = ("none", "full", "selective", "checkmate", "lynx-heu", "lynx-opt")

LLAMA_MODEL = os.path.join(ROOT, "tests", "equivalence", "llama.model")


def llama_lynx(work):
    """A Llama (RMSNorm, RoPE, SwiGLU, grouped-query attention) at tp 2 x pp 2 x
    dp 2 on 1.5 MiB GPUs: lynx-heu offloads and recomputes, without offload
    recomputes in windows, and under a what-if (GPipe, 1.6 MiB GPUs, a slow
    swiglu, windows 50x slower, a 2 GB/s host link) splits an op token-wise;
    each trains bitwise like keeping everything (1F1B). The same Llama with
    the materialised attention, whose recompute lynx-heu cuts by kv heads
    under another what-if, trains bitwise like it too."""
    model = os.path.join(work, "llama-lynx.model")
    with open(LLAMA_MODEL) as f, open(model, "w") as out:
        out.write(f.read().replace(".layers = 2,", ".layers = 4,"))
    plan = ("--tp", "2", "--pp", "2", "--dp", "2")
    squeeze = ("--gpu-memory", "0.0015", "--allow-oom-plan")
    token_split = os.path.join(work, "llama-token-split.profile")
    with open(token_split, "w") as f:
        f.write("op swiglu 128 128 64 fp32 0.05 0.05\ninterference 50\nhost 2\n")
    variants = [("none", ("--policy", "none")), ("lynx-heu", ("--policy", "lynx-heu", *squeeze)),
                ("lynx-heu --no-offload", ("--policy", "lynx-heu", *squeeze, "--no-offload")),
                ("lynx-heu token-wise", ("--policy", "lynx-heu", "--schedule", "gpipe", "--gpu-memory", "0.0016",
                                         "--allow-oom-plan", "--profile", token_split))]
    train_variants(work, model, plan, variants)
    # with the materialised attention (grouped queries: 8 heads, 4 kv heads, 2 of them a rank), whose
    # recompute lynx-heu cuts by kv heads under a what-if (a forward of 100 us, all-reduces of 80 us)
    heads_model = os.path.join(work, "llama-heads.model")
    with open(model) as f, open(heads_model, "w") as out:
        out.write(f.read().replace(".heads = 4,", ".heads = 8,").replace(".kv_heads = 2,", ".kv_heads = 4,")
                  .replace("(4 + 2 * 2) * 16), 4, 2)", "(8 + 2 * 4) * 8), 8, 4)")
                  .replace("flash_attention(qkv, 4, 2)", "attention(qkv, 8, 4)"))
    head_split = os.path.join(work, "llama-head-split.profile")
    with open(head_split, "w") as f:
        f.write("op attention 128 64 32 fp32 0.1 0.15 seq=64 heads=4 impl=materialized\nlink nvlink3 235 40\n")
    train_variants(work, heads_model, plan, [
        ("none", ("--policy", "none")),
        ("lynx-heu head pieces", ("--policy", "lynx-heu", "--gpu-memory", "0.002", "--allow-oom-plan",
                                  "--no-offload", "--profile", head_split))])


def train_variants(work, model, plan, variants):
    """Each variant's plan of `model` trains bitwise like the first's."""
    name = os.path.basename(model)[:-len(".model")]
    runs = {}
    for label, args in variants:
        text = run([LYNXGEN, model, "--plan", "--target", "cpu", *plan, *args], work).stdout
        if label == "lynx-heu":
            check("offload to host memory" in text and ("recompute on demand" in text or "in a window" in text),
                  "llama tp=2 pp=2 dp=2 lynx-heu with 1.5 MiB GPUs offloads and recomputes")
        if label.endswith("token-wise"):
            check("token-wise: rows [0, " in text, "llama tp=2 pp=2 dp=2 lynx-heu under the profile splits an op "
                  "token-wise")
        if label.endswith("--no-offload"):
            check("in a window" in text, "llama tp=2 pp=2 dp=2 lynx-heu --no-offload recomputes in windows")
        if label.endswith("head pieces"):
            check("in 2 pieces of its kv heads" in text, "%s tp=2 pp=2 dp=2 lynx-heu under the profile cuts the "
                  "attention's recompute into 2 pieces of its kv heads" % name)
        program = generate(work, name + "-" + label.replace(" ", "").replace("--", "-"), model, *plan, *args,
                           quick=True)
        r, metrics = train(program, work, "--steps", "4") if program else (None, None)
        if r is not None and r.returncode == 0:
            runs[label] = losses(metrics)
    for label, _ in variants[1:]:
        check(label in runs and variants[0][0] in runs and runs[label] == runs[variants[0][0]],
              "%s tp=2 pp=2 dp=2 %s gives bitwise the losses of %s" % (name, label, variants[0][0]))


def embedding_ties(work, gpt_model):
    """GPT and Llama, tied and untied embeddings, at pp 1, 2 and 4 and at
    tp 2 x pp 2 x dp 2: each trains (an untied table once made the first
    stage wait forever for the last stage's copy), the other plans give pp =
    1's losses (a Llama's prologue, the embedding alone, once had its tensor-
    parallel all-reduce issued twice), and untying changes them (the head has
    weights of its own)."""
    with open(gpt_model) as f:
        gpt = f.read()
    with open(LLAMA_MODEL) as f:
        llama = f.read().replace(".layers = 2,", ".layers = 4,")
    plans = [("pp=1", ["--pp", "1"]), ("pp=2", ["--pp", "2"]), ("pp=4", ["--pp", "4"]),
             ("tp=2 pp=2 dp=2", ["--tp", "2", "--pp", "2", "--dp", "2"])]
    for family, text in (("gpt", gpt), ("llama", llama)):
        by_tie = {}
        for tied in (1, 0):
            model = os.path.join(work, "%s-tied%d.model" % (family, tied))
            with open(model, "w") as f:
                f.write(text.replace(".tied_embeddings = 1", ".tied_embeddings = %d" % tied))
            name = "%s %s" % (family, "tied" if tied else "untied")
            for plan, args in plans:
                label = plan.replace(" ", "").replace("=", "")
                program = generate(work, "tie-%s%d-%s" % (family, tied, label), model, *args, quick=True)
                r, metrics = train(program, work, "--steps", "3", timeout=120) if program else (None, None)
                if r is None or r.returncode != 0:
                    check(False, "%s %s trains 3 steps (%s)" % (name, plan, "timed out" if program else "no build"))
                    continue
                if plan == "pp=1":
                    by_tie[tied] = losses(metrics)
                    check(len(by_tie[tied]) == 3, "%s pp=1 trains 3 steps" % name)
                elif tied in by_tie:
                    got = losses(metrics)
                    worst = relative_difference(got, by_tie[tied])
                    bound = CROSS_PP_BOUND if plan.startswith("pp") else CROSS_PARALLEL_BOUND
                    check(len(got) == 3 and worst <= bound, "%s %s: losses equal pp=1's within %.0e "
                          "(worst %.2e)" % (name, plan, bound, worst))
        if len(by_tie) == 2:
            check(by_tie[0] != by_tie[1], "%s: untied embeddings train other weights than tied ones (%s vs %s)" % (
                family, by_tie[0][-1], by_tie[1][-1]))


def main():
    work = fortunes_shards("lynx-train-")
    if work is None:
        return
    model = os.path.join(work, "train.model")
    with open(model, "w") as f:
        f.write(MODEL.format(dropout="0.1", lr="3e-3", vocab=256))

    # Losses: every policy bitwise, every depth within the bound.
    by_pp = {}
    for pp in (1, 2, 4):
        runs = {}
        for policy in ("none", "full", "selective"):
            program = generate(work, "pp%d-%s" % (pp, policy), model, "--pp", str(pp), "--policy", policy)
            if program is None:
                check(False, "pp=%d %s generates and builds" % (pp, policy))
                continue
            r, metrics = train(program, work, "--steps", "6")
            ok = r.returncode == 0
            check(ok, "pp=%d %s trains 6 steps" % (pp, policy))
            if ok:
                runs[policy] = losses(metrics)
            else:
                print(r.stdout[-2000:] + r.stderr[-2000:])
        if "none" in runs:
            by_pp[pp] = runs["none"]
            for policy in ("full", "selective"):
                if policy in runs:
                    check(runs[policy] == runs["none"],
                          "pp=%d: %s recompute gives bitwise the losses of none %s" % (pp, policy, runs["none"]))
    # Lynx: GPUs of 3.2 MiB (--gpu-memory) push recomputation into the pipeline's
    # waiting windows (without offload), or offload what ops save to host memory
    # and prefetch it back; the program must still compute exactly the same. (At
    # 3 MiB the windows, measured again once the other stage hides its recompute,
    # are too short for any op.)
    for policy in ("lynx-heu", "lynx-opt"):
        for offload in (False, True):
            args = ("--pp", "2", "--policy", policy, "--gpu-memory", "0.0032", "--allow-oom-plan")
            args += () if offload else ("--no-offload",)
            plan = run([LYNXGEN, model, "--plan", "--target", "cpu", *args], work).stdout
            what = "offload to host memory" if offload else "in a window"
            check(what in plan, "pp=2 %s with 3.2 MiB GPUs: plan.txt has '%s' decisions" % (policy, what))
            program = generate(work, "pp2-%s%s" % (policy, "-offload" if offload else ""), model, *args)
            r, metrics = train(program, work, "--steps", "6") if program else (None, None)
            ok = r is not None and r.returncode == 0 and 2 in by_pp
            check(ok and losses(metrics) == by_pp[2], "pp=2 %s%s gives bitwise the losses of none" % (
                policy, " with offload" if offload else ""))
    for pp in (2, 4):
        if 1 in by_pp and pp in by_pp:
            worst = max(abs(a - b) / abs(b) for a, b in zip(by_pp[pp], by_pp[1]))
            check(worst <= CROSS_PP_BOUND,
                  "pp=%d losses equal pp=1's within %.0e (worst relative difference %.2e)" % (pp, CROSS_PP_BOUND, worst))

    tensor_and_data_parallel(work, model, by_pp.get(1))
    llama_lynx(work)
    embedding_ties(work, model)

    # Gradients against central finite differences, double precision.
    for pp in (1, 2):
        program = generate(work, "grad-pp%d" % pp, model, "--pp", str(pp), target="gradcheck")
        r, _ = train(program, work, "--gradcheck", variant="-gradcheck") if program else (None, None)
        ok = r is not None and r.returncode == 0
        lines = [l for l in (r.stdout if r else "").splitlines() if "worst relative error" in l]
        check(ok and lines, "pp=%d: every parameter tensor's gradient matches finite differences (%s)" % (
            pp, lines[0].split(";")[-1].strip() if lines else "no result"))
        if not ok and r is not None:
            print(r.stdout[-3000:] + r.stderr[-2000:])

    # An element-wise op that is only its row of the operand table and its
    # kernels (silu) trains with the gradients finite differences give.
    silu_model = os.path.join(work, "silu.model")
    with open(silu_model, "w") as f:
        f.write(MODEL.format(dropout="0.1", lr="3e-3", vocab=256).replace("gelu(", "silu("))
    program = generate(work, "grad-silu", silu_model, target="gradcheck")
    r, _ = train(program, work, "--gradcheck", variant="-gradcheck") if program else (None, None)
    lines = [l for l in (r.stdout if r else "").splitlines() if "worst relative error" in l]
    check(r is not None and r.returncode == 0 and lines,
          "silu MLP: every parameter tensor's gradient matches finite differences (%s)" % (
              lines[0].split(";")[-1].strip() if lines else "no result"))

    # The memory plan, measured: poisoned dead memory, extents as planned.
    for policy in ("none", "full", "selective", "lynx-heu"):
        squeeze = ("--gpu-memory", "0.003", "--allow-oom-plan") if policy.startswith("lynx") else ()
        program = generate(work, "mem-%s" % policy, model, "--pp", "2", "--policy", policy, *squeeze, target="check")
        r, _ = train(program, work, "--steps", "3", variant="-check") if program else (None, None)
        out = r.stdout if r else ""
        stages = [l for l in out.splitlines() if l.startswith("memory: stage")]
        ok = r is not None and r.returncode == 0 and len(stages) == 2 and all("as planned" in l for l in stages)
        check(ok, "pp=2 %s: each stage's arena is used exactly to the planned extents, poison never read" % policy)
        if not ok:
            print(out[-3000:] + (r.stderr[-2000:] if r else ""))

    # GPipe over an uneven split (4 layers on 3 stages: 2, 1, 1) trains like 1F1B.
    program = generate(work, "gpipe-pp3", model, "--pp", "3", "--schedule", "gpipe")
    r, metrics = train(program, work, "--steps", "6") if program else (None, None)
    if r is not None and r.returncode == 0 and 1 in by_pp:
        worst = max(abs(a - b) / abs(b) for a, b in zip(losses(metrics), by_pp[1]))
        check(worst <= CROSS_PP_BOUND, "gpipe, pp=3 (layers 2+1+1): losses equal pp=1's within %.0e (worst %.2e)" % (
            CROSS_PP_BOUND, worst))
    else:
        check(False, "gpipe, pp=3 (layers 2+1+1) trains")

    # A vocabulary that needs padding (200 -> 256 columns): the padded logits and
    # their gradients must be planned and written like the rest (poison check).
    padded = os.path.join(work, "padded.model")
    with open(padded, "w") as f:
        f.write(MODEL.format(dropout="0.1", lr="3e-3", vocab=200))
    program = generate(work, "mem-padded", padded, "--pp", "2", target="check")
    r, metrics = train(program, work, "--steps", "3", variant="-check") if program else (None, None)
    out = r.stdout if r else ""
    ok = r is not None and r.returncode == 0 and out.count("as planned") == 2
    check(ok and all(math.isfinite(x) for x in losses(metrics)),
          "vocabulary 200 (padded to 256): finite losses, arena extents as planned, poison never read")

    # Training: well below the unigram entropy of the data, with validation.
    entropy = unigram_entropy(os.path.join(work, "data", "train_000000.bin"))
    program = generate(work, "converge", model, "--pp", "2")
    r, metrics = train(program, work, "--steps", "150", "--val-data", os.path.join(work, "data/val_*.bin"),
                       "--eval-interval", "50", "--val-batches", "2") if program else (None, None)
    if r is not None and r.returncode == 0:
        tail = losses(metrics)[-10:]
        final = sum(tail) / len(tail)
        check(final < entropy - 0.5,
              "after 150 steps the loss %.3f is well below the unigram entropy %.3f nats of the data" % (final, entropy))
        with open(metrics) as f:
            rows = [json.loads(line) for line in f]
        val_steps = [row["step"] for row in rows if "val_loss" in row]
        check(val_steps == [50, 100, 150] and all(math.isfinite(row["val_loss"]) for row in rows if "val_loss" in row),
              "validation loss every 50 steps in metrics.jsonl (at steps %s)" % val_steps)
        keys = {"step", "loss", "lr", "grad_norm", "ms", "tokens_per_s"}
        check(all(keys <= set(row) for row in rows), "every metrics.jsonl line has %s" % sorted(keys))
    else:
        check(False, "the convergence run completes")

    # llm.c checkpoint: load and save back, byte-identical (pp = 2: each stage its slice).
    with open(model, "w") as f:
        f.write(MODEL.format(dropout="0.0", lr="3e-3", vocab=256))
    program = generate(work, "ckpt", model, "--pp", "2")
    source, saved = os.path.join(work, "in.bin"), os.path.join(work, "out.bin")
    write_gpt2_checkpoint(source, 32, 256, 4, 4, 64, 256)
    r, _ = train(program, work, "--init", source, "--export-llmc", saved, "--steps", "0") if program else (None, None)
    same = r is not None and r.returncode == 0 and open(source, "rb").read() == open(saved, "rb").read()
    check(same, "an llm.c GPT-2 checkpoint loads and saves back byte-identical")
    if not same and r is not None:
        print(r.stdout[-2000:] + r.stderr[-2000:])
    # Tensor parallelism: each rank reads its rows (column-parallel weights, the
    # vocabulary shards) or its column block of every row (row-parallel) from
    # the file; the first step's loss equals the tp = 1 program's from the same
    # file (the reading is right), and the export is the file again (so is the
    # writing).
    tp2 = generate(work, "ckpt-tp2", model, "--pp", "2", "--tp", "2")
    tp2_saved = os.path.join(work, "out-tp2.bin")
    r, _ = train(tp2, work, "--init", source, "--export-llmc", tp2_saved, "--steps", "0") if tp2 else (None, None)
    check(r is not None and r.returncode == 0 and open(tp2_saved, "rb").read() == open(source, "rb").read(),
          "tp=2 pp=2: an llm.c GPT-2 checkpoint loads and saves back byte-identical")
    runs = [train(p, work, "--init", source, "--steps", "2") if p else (None, None) for p in (program, tp2)]
    if all(r is not None and r.returncode == 0 for r, _ in runs):
        one, two = (losses(metrics) for _, metrics in runs)
        worst = relative_difference(two, one)
        check(len(one) == len(two) == 2 and worst <= CROSS_PARALLEL_BOUND,
              "tp=2 from an llm.c checkpoint: losses equal tp=1's from it within %.0e (worst %.2e)" % (
                  CROSS_PARALLEL_BOUND, worst))
    else:
        check(False, "tp=1 and tp=2 train from an llm.c checkpoint")
    # llm.c's GPT-2 releases have a context of 1024 positions: a file with more
    # position rows than the model's sequence loads its first rows, and every
    # tensor after them from its place in the longer file. Built here from the
    # file above: twice the rows, the extra ones 7.0; exported back, it must
    # be that file again.
    C, seq, padded = 64, 32, 256
    with open(source, "rb") as f:
        original = f.read()
    wpe_end = 1024 + 4 * (padded + seq) * C
    longer = os.path.join(work, "gpt2-longer.bin")
    with open(longer, "wb") as f:
        f.write(original[:8] + struct.pack("<i", 2 * seq) + original[12:wpe_end])
        f.write(struct.pack("<%df" % (seq * C), *([7.0] * (seq * C))) + original[wpe_end:])
    r, _ = train(program, work, "--init", longer, "--export-llmc", saved, "--steps", "0") if program else (None, None)
    check(r is not None and r.returncode == 0 and open(saved, "rb").read() == original,
          "an llm.c checkpoint of twice the model's context loads (its first position rows, the tensors after "
          "them moved) and exports as the model's")
    with open(longer, "r+b") as f:  # a shorter context than the model's cannot fit
        f.seek(2 * 4)
        f.write(struct.pack("<i", seq // 2))
    r, _ = train(program, work, "--init", longer, "--export-llmc", saved, "--steps", "0") if program else (None, None)
    check(r is not None and r.returncode != 0 and "max_seq_len is 16 in the file, expected 32" in r.stdout + r.stderr,
          "an llm.c checkpoint of a shorter context than the model's is refused, naming max_seq_len")
    with open(source, "r+b") as f:  # a header that does not match the model
        f.seek(4 * 4)
        f.write(struct.pack("<i", 5))
    r, _ = train(program, work, "--init", source, "--export-llmc", saved, "--steps", "0")
    check(r.returncode != 0 and "layers" in r.stdout + r.stderr,
          "a checkpoint whose header does not match the model is refused, naming the field")


main()
sys.exit(exit_status())
