"""Mini-sequences (MsT, Luo et al. 2024): the LM head, its loss and the MLPs in M pieces.

The emitted CPU programs of a small GPT are trained with --mini-sequences M
and compared with the same plan run whole (M = 1), which never cuts the rows:

- per-step losses equal M = 1's within LOSS_BOUND, for M in {2, 4, 8} at
  pp = 2 (where the norm in front of each MLP and of the LM head runs in the
  pieces too), for M = 4 at tp = 2 (the vocabulary-parallel loss) and at tp = 2 x pp = 2 with
  sequence parallelism (what a run of pieces gathers, gathered once for all);
  under full and lynx-heu recomputation, zero bubble, interleaved 1F1B and 2BW;
  and for a Llama's SwiGLU MLP;
- every parameter's gradient matches central finite differences of the loss
  with M = 4 (double-precision build);
- the arena of every stage is used exactly to its planned extents, poison
  never read (make check), so the logits really exist one piece at a time;
- left open, the plan search picks pieces where they make the fastest plan
  that fits;
- --explain's longest sequence per recompute policy and piece count is the
  boundary the plan draws for a model file of that length;
- the plan's peak memory of the last stage drops by the closed form derived
  below (the vocabulary is large enough that the loss's backward stays the
  stage's peak up to M = 8), and lynxgen refuses an M that cannot cut the
  sequence, or a model whose loss reads no LM head.
"""
import json
import os
import re

from tap import check, exit_status
from training_metrics import GPT_MODEL, LYNXGEN, ROOT, fortunes_shards, generate, losses, run, train

# Cutting the rows changes only the order in which the LM head's weight
# gradient sums the rows (piece by piece, the pieces added up) and how the
# loss adds the pieces' shares; both are last-bits effects (~1e-8 relative
# over a few steps), while a wrong piece offset, a piece missed or a gradient
# zeroed between pieces moves the loss by 1e-3 or more.
LOSS_BOUND = 1e-6

VOCAB, SEQ, MICRO_BATCH = 2048, 32, 2  # GPT_MODEL's sequence and micro-batch


LAYOUTS = {
    "pp2": ("--pp", "2"),
    "tp2": ("--tp", "2"),
    "tp2-pp2-sp": ("--tp", "2", "--pp", "2", "--sequence-parallel"),
}


def relative_difference(a, b):
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))


def trained_losses(work, model, name, *args):
    program = generate(work, name, model, *args, quick=True)
    r, metrics = train(program, work, "--steps", "4") if program else (None, None)
    if r is None or r.returncode != 0:
        if r is not None:
            print(r.stdout[-2000:] + r.stderr[-2000:])
        return None
    return losses(metrics)


def equal_losses(work, model):
    for layout, args in LAYOUTS.items():
        whole = trained_losses(work, model, "whole-" + layout, *args)
        check(whole is not None, "%s, whole: trains 4 steps" % layout)
        for m in (2, 4, 8) if layout == "pp2" else (4,):
            pieces = trained_losses(work, model, "m%d-%s" % (m, layout), *args, "--mini-sequences", str(m))
            ok = whole is not None and pieces is not None
            worst = relative_difference(pieces, whole) if ok else float("inf")
            check(ok and worst <= LOSS_BOUND,
                  "%s, %d mini-sequences: losses equal the whole run's within %.0e (worst %.2e)" % (
                      layout, m, LOSS_BOUND, worst))


SQUEEZE = ("--gpu-memory", "0.003", "--allow-oom-plan")  # 3 MiB GPUs: the Lynx policies recompute in windows
POLICIES_AND_SCHEDULES = {
    "full": ("--pp", "2", "--policy", "full"),
    "lynx-heu": ("--pp", "2", "--policy", "lynx-heu", *SQUEEZE),
    "zb-h1": ("--pp", "2", "--schedule", "zb-h1"),
    "interleaved": ("--pp", "2", "--schedule", "interleaved"),
    "2bw": ("--pp", "2", "--schedule", "2bw"),
}


def policies_and_schedules(work, model):
    """Full recomputation runs the MLP's pieces again for the dropout after
    it; lynx-heu recomputes around them; zero bubble defers the other linears'
    weight gradients; interleaved and 2BW reorder the backwards: each trains
    as its whole run. Recompute policies and ZB-H1 train bitwise as 1F1B
    without recomputation (tests/cpu_training_test.py, schedules_test.py), so
    the pp2 whole run is their reference."""
    same_as_1f1b = trained_losses(work, model, "whole-pp2-1f1b", *LAYOUTS["pp2"])
    for name, args in POLICIES_AND_SCHEDULES.items():
        whole = same_as_1f1b if name in ("full", "lynx-heu", "zb-h1") else \
            trained_losses(work, model, "whole-" + name, *args)
        pieces = trained_losses(work, model, "m4-" + name, *args, "--mini-sequences", "4")
        ok = whole is not None and pieces is not None
        worst = relative_difference(pieces, whole) if ok else float("inf")
        check(ok and worst <= LOSS_BOUND, "pp2 %s, 4 mini-sequences: losses equal the whole run's within %.0e "
                                          "(worst %.2e)" % (name, LOSS_BOUND, worst))


def llama_losses(work):
    """A Llama (RMSNorm, RoPE, a SwiGLU MLP of one fused gate-and-up linear)
    at tp 2 x pp 2 with sequence parallelism: the SwiGLU MLP and the head in
    4 pieces train as whole."""
    model = os.path.join(ROOT, "tests", "equivalence", "llama.model")
    args = ("--tp", "2", "--pp", "2", "--sequence-parallel")
    whole = trained_losses(work, model, "llama-whole", *args)
    pieces = trained_losses(work, model, "llama-m4", *args, "--mini-sequences", "4")
    ok = whole is not None and pieces is not None
    worst = relative_difference(pieces, whole) if ok else float("inf")
    check(ok and worst <= LOSS_BOUND, "llama tp2-pp2-sp, 4 mini-sequences: losses equal the whole run's within "
                                      "%.0e (worst %.2e)" % (LOSS_BOUND, worst))


def gradients(work, model):
    program = generate(work, "grad-m4", model, "--pp", "2", "--mini-sequences", "4", target="gradcheck")
    r, _ = train(program, work, "--gradcheck", variant="-gradcheck") if program else (None, None)
    lines = [l for l in (r.stdout if r else "").splitlines() if "worst relative error" in l]
    check(r is not None and r.returncode == 0 and lines,
          "4 mini-sequences, pp=2: every parameter tensor's gradient matches finite differences (%s)" % (
              lines[0].split(";")[-1].strip() if lines else "no result"))


def arena_as_planned(work, model):
    cases = {"tp2-pp2-sp": LAYOUTS["tp2-pp2-sp"], "pp2 full": POLICIES_AND_SCHEDULES["full"],
             "pp2 lynx-heu": POLICIES_AND_SCHEDULES["lynx-heu"]}
    for layout, args in cases.items():
        program = generate(work, "mem-" + layout.replace(" ", "-"), model, *args, "--mini-sequences", "4",
                           target="check")
        r, _ = train(program, work, "--steps", "3", variant="-check") if program else (None, None)
        out = r.stdout if r else ""
        stages = [l for l in out.splitlines() if l.startswith("memory: stage")]
        ok = r is not None and r.returncode == 0 and stages and all("as planned" in l for l in stages)
        check(ok, "%s, 4 mini-sequences: every stage's arena is used exactly to the planned extents, poison never "
                  "read" % layout)
        if not ok:
            print(out[-3000:] + (r.stderr[-2000:] if r else ""))


def last_stage_peak(work, model, *args):
    r = run([LYNXGEN, model, "--plan", "--json", "--target", "cpu", *args], work)
    return json.loads(r.stdout)["stages"][-1]["peak_bytes"] if r.returncode == 0 else None


def peak_memory(work, model):
    """Whole, the last stage's peak is at the loss's backward: the stashed
    logits L = b s Vp / tp x 4 bytes (fp32) and their gradient, another L, and
    each of its layers' stashed MLP hidden, twice b s 4h / tp x 4 bytes (the
    second linear's input and the activation's). In M pieces nothing of them
    is stashed (the backward makes the pieces again), and the loss's backward
    holds one piece of the logits and its gradient: 2 L / M. The peak drops by
    2 L (1 - 1/M) + layers x 2 b s 4h / tp x 4. Without tensor parallelism the
    norm in front of each MLP and of the LM head runs in the pieces too: its
    output N = b s h x 4 bytes, which the matmul after it stashed, is not
    stashed either, and the backward holds one piece of it, N / M, beside the
    logits': the peak drops by (layers + 1) N - N / M more."""
    hidden = 64
    for tp, pp in ((1, 1), (1, 2), (2, 2)):
        args = ("--tp", str(tp), "--pp", str(pp))
        logits = MICRO_BATCH * SEQ * VOCAB // tp * 4  # VOCAB is a multiple of 128 tp: no padding
        mlp = (4 // pp) * 2 * MICRO_BATCH * SEQ * 4 * hidden // tp * 4  # 4 layers, the last stage's share
        norm = MICRO_BATCH * SEQ * hidden * 4 if tp == 1 else 0
        whole = last_stage_peak(work, model, *args)
        for m in (2, 4, 8):
            pieces = last_stage_peak(work, model, *args, "--mini-sequences", str(m))
            expected = 2 * logits - 2 * logits // m + mlp + (4 // pp + 1) * norm - norm // m
            ok = whole is not None and pieces is not None
            check(ok and whole - pieces == expected,
                  "tp=%d pp=%d, %d mini-sequences: the last stage's planned peak drops by 2 L (1 - 1/M) + its "
                  "layers' MLP hidden%s = %d bytes (%s)" % (tp, pp, m, " + (layers + 1) N - N / M" if norm else "",
                                                            expected, whole - pieces if ok else "no plan"))


def refusals(work, model):
    r = run([LYNXGEN, model, "--plan", "--mini-sequences", "3"], work)
    check(r.returncode == 1 and re.search(r"error: mini_sequences \(3\) does not divide seq_len \(32\)", r.stderr),
          "--mini-sequences 3 with seq_len 32 is refused, naming both numbers")
    bad = os.path.join(work, "no-head.model")
    with open(model) as f:
        text = f.read().replace("1F1B };", "1F1B, .mini_sequences = 2 };")
    with open(bad, "w") as f:
        f.write(text.replace("cross_entropy(lm_head(layernorm(x), V), targets)",
                             "cross_entropy(linear(layernorm(x), V), targets)"))
    r = run([LYNXGEN, bad, "--plan"], work)
    check(r.returncode == 1 and re.search(r"no-head\.model:\d+:\d+: error: mini_sequences \(2\) cuts the LM head",
                                          r.stderr),
          "mini_sequences in a model whose loss reads no lm_head() is refused where the field is written")


def longest_sequence(work, model):
    """--explain's table of the longest sequence that fits: pieces never
    shorten it, and each entry is the boundary lynxgen's plan itself draws:
    a model file of that length fits, one LX_SEQUENCE_STEP (256) longer does not."""
    memory = ("--gpu-memory", "0.08")
    r = run([LYNXGEN, model, "--plan", "--explain", *memory], work)
    rows = {}
    for line in r.stdout.splitlines():
        fields = line.split()
        if len(fields) == 4 and fields[0] in ("none", "selective", "full", "lynx-heu"):
            rows[fields[0]] = [int(x) if x.isdigit() else 0 for x in fields[1:]]
    check(r.returncode == 0 and len(rows) == 4, "--explain prints the longest sequence for 4 recompute policies")
    check(rows and all(row[0] <= row[1] <= row[2] for row in rows.values()),
          "in 4 and 16 pieces the longest sequence is never shorter than whole (%s)" % rows)
    with open(model) as f:
        text = f.read()
    for policy, column, pieces in (("full", 1, 4), ("none", 0, 1)):
        longest = rows.get(policy, [0, 0, 0])[column]
        verdicts = []
        for seq in (longest, longest + 256):
            path = os.path.join(work, "seq%d.model" % seq)
            with open(path, "w") as f:
                f.write(text.replace(".seq_len = 32,", ".seq_len = %d," % seq))
            plan = run([LYNXGEN, path, "--plan", "--policy", policy, "--mini-sequences", str(pieces), *memory], work)
            verdicts.append(plan.returncode == 0 or "does not fit" not in plan.stderr)
        check(longest > 0 and verdicts == [True, False],
              "%s, %d piece(s): %d tokens fit, %d do not (the plan of a model file of each length)" % (
                  policy, pieces, longest, longest + 256))


def plan_json(work, model, *args):
    r = run([LYNXGEN, model, "--plan", "--json", *args], work)
    return json.loads(r.stdout) if r.returncode == 0 else None


def search_weighs_pieces(work):
    """With mini_sequences left open the plan search weighs 1 and 4 pieces
    (16 would leave pieces under 128 tokens) beside micro-batches and
    recompute policies: on 40 MiB GPUs it picks pieces, and its plan is the
    fastest that fits of all of them, each planned directly."""
    model = os.path.join(work, "open.model")
    with open(model, "w") as f:
        f.write(GPT_MODEL.format(vocab=8192, dropout="0.1", lr="3e-3")
                .replace(".seq_len = 32,", ".seq_len = 512,")
                .replace(".micro_batch = 2,", "")
                .replace("attention(linear", "flash_attention(linear"))
    memory = ("--gpu-memory", "0.04")
    chosen = plan_json(work, model, *memory)
    direct = []
    for micro_batch in (1, 2, 4, 8):
        for policy in ("none", "selective", "full", "lynx-heu"):
            for pieces in (1, 4):
                p = plan_json(work, model, *memory, "--allow-oom-plan", "--micro-batch", str(micro_batch),
                              "--policy", policy, "--mini-sequences", str(pieces))
                if p and all(st["fits"] for st in p["stages"]):
                    direct.append((p["iteration_s"], pieces, micro_batch, policy))
    best = min(direct) if direct else None
    ok = chosen is not None and best is not None
    check(ok and chosen["plan"]["mini_sequences"] == 4 and abs(chosen["iteration_s"] - best[0]) <= 1e-9 * best[0],
          "mini_sequences open, 40 MiB GPUs: the search picks %s pieces, the fastest of %d plans that fit %s" % (
              chosen and chosen["plan"]["mini_sequences"], len(direct), best))


def main():
    work = fortunes_shards("lynx-mini-sequences-")
    if work is None:
        return
    model = os.path.join(work, "train.model")
    with open(model, "w") as f:
        f.write(GPT_MODEL.format(vocab=VOCAB, dropout="0.1", lr="3e-3"))
    refusals(work, model)
    peak_memory(work, model)
    longest_sequence(work, model)
    search_weighs_pieces(work)
    equal_losses(work, model)
    policies_and_schedules(work, model)
    llama_losses(work)
    gradients(work, model)
    arena_as_planned(work, model)


if __name__ == "__main__":
    main()
    exit_status()
