#!/usr/bin/env python3
"""Fine-tuning with LoRA (Hu et al. 2021) and LoRA-FA (Zhang et al. 2023) on
the CPU target, held to what the papers define and to an independent
reference.

The model is a 4-layer GPT of hidden 32 whose four block linears carry
rank-4 adapters (alpha 8: scale 2). Its base weights are drawn here and
handed to the programs as an llm.c checkpoint (--init); the adapters start as
PEFT starts them, A random and B zero, so the first step's loss is the base
model's. Checks:

- the IR's numbers against closed forms: the adapters are the only trained
  parameters (16 r H per layer under LoRA, 9 r H under LoRA-FA, which
  freezes each A), the rest frozen; a LoRA linear keeps its input and
  u = x A^T (r wide), a LoRA-FA linear u alone, a frozen linear nothing; the
  plan's gradients and AdamW moments cover the trained parameters alone;
- the losses of 5 steps match tests/gpt_reference.py (float64 numpy, the
  adapters trained by AdamW there too) to 1e-5 relative, for LoRA at pp 1,
  pp 2, pp 2 x dp 2 with ZeRO-1, under ZB-H1, with the (frozen) LM head in
  mini-sequences, at tp 2 and at tp 2 x pp 2 x dp 2 with ZeRO-1 and sequence
  parallelism, and for LoRA-FA at pp 1, pp 2, with full recomputation, under
  interleaved 1F1B and at tp 2 with sequence parallelism and mini-sequences;
  under PipeDream-2BW (pp 2) with the reference's delayed update of the
  adapters (the frozen weights have no second version); the adapters the run
  ends with match the reference's;
- the training state holds the adapters alone (and their moments), and a
  run killed with -9 continues from it (the base from --init again) with the
  uninterrupted run's losses, bit for bit;
- the frozen weights are bitwise unchanged after training (the check
  build compares them with a copy taken at the start), and the arena is
  used exactly as planned;
- the gradients match central finite differences of the loss (--gradcheck),
  at pp 2 and at tp 2, where a column-parallel linear's A and a row-parallel
  one's B are whole on each rank and their gradients summed over the ranks;
- LoRA's dropout of the adapters' input (0.1): the losses match the
  reference, which draws the masks with the programs' own counter-based
  generator written again in numpy, at pp 1, at tp 2 x pp 2 with sequence
  parallelism (a row-parallel rank's columns of the mask) and for LoRA-FA
  under full recomputation (the recomputed forward draws the same mask); and
  --gradcheck;
- the exported weights are the merged model W + scale B A (a tp 2 program,
  resuming the same adapters, exports the same bytes), and the same GPT
  without adapters started from them evaluates to the adapted model's
  validation loss.

The reference takes A's initial values from the program (a LoRA run's A is
unchanged by its first step, where B = 0 makes its gradient zero, and the
LoRA-FA programs draw the same A from the same seed).
"""
import json
import os
import struct
import sys

import numpy as np

from tap import check, exit_status

import gpt_reference
from resume_test import command, kill_job, saved_step, start, wait_for_step
from training_metrics import LYNXGEN, fortunes_shards, generate, losses, losses_by_step, run, train

RANK, ALPHA = 4, 8
SCALE = ALPHA / RANK
H, LAYERS, SEQ, VOCAB, HEADS = 32, 4, 32, 256, 2
MICRO_BATCHES, STEPS, LR, SEED = 4, 5, 3e-3, 7
LORA_DROPOUT = 0.1
REFERENCE_BOUND = 1e-5  # fp32 programs against float64 numpy, as tests/schedules_test.py

MODEL = """#include <lynx.h>
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
  return add(embedding(tokens, V, H), position_embedding(tokens, H));
}
tensor block(tensor x) {
  tensor a = attention(%(qkv)s, 2, 2);
  x = add(x, %(attproj)s);
  tensor m = %(fcproj)s;
  return add(x, m);
}
tensor epilogue(tensor x, tensor targets) {
  return cross_entropy(lm_head(layernorm(x), V), targets);
}
"""
LINEARS = {"qkv": "linear(layernorm(x), 3 * H)", "attproj": "linear(a, H)", "fc": "linear(layernorm(x), 4 * H)"}
# the block's linears in program order: their op names, and the reference's names
OPS = (("linear_0", "qkv"), ("linear_1", "attproj"), ("linear_2", "fc"), ("linear_3", "fcproj"))


def model_text(adapted):
    wrap = (lambda s: "lora(%s, %d, %d)" % (s, RANK, ALPHA)) if adapted else (lambda s: s)
    return MODEL % {"qkv": wrap(LINEARS["qkv"]), "attproj": wrap(LINEARS["attproj"]),
                    "fcproj": wrap("linear(gelu(%s), H)" % wrap(LINEARS["fc"]))}


# ---- the training state (templates/common/lx_state.h) ------------------------------------

def read_state(path):
    """name -> (weights, m, v) of every tensor of a training state, as float64 (rows, cols)."""
    with open(path, "rb") as f:
        data = f.read()
    check(data[:8] == b"LYNXSTAT", "%s is a training state" % os.path.basename(path))
    data_parallel = struct.unpack_from("<i", data, 24)[0]
    at, first_data, tensors = 4096 + 8 * data_parallel, len(data), {}
    while at < first_data:
        name = data[at:at + 64].split(b"\0")[0].decode()
        rows, cols, offset = struct.unpack_from("<qqq", data, at + 64)
        if not name:
            break
        first_data = min(first_data, offset)
        n = rows * cols
        arrays = [np.frombuffer(data, "<f4", n, offset + 4 * n * k).reshape(rows, cols).astype(np.float64)
                  for k in range(3)]
        tensors[name] = tuple(arrays)
        at += 88
    return tensors


def adapters_of(state, fa_down=None):
    """The reference's adapters from a state: name -> (A (L, r, in), B (L, out, r)); LoRA-FA's
    states hold no A, which fa_down gives."""
    out = {}
    for op, name in OPS:
        down = [state["block layer %d %s.lora_a" % (l, op)][0] for l in range(LAYERS)] if fa_down is None else None
        up = [state["block layer %d %s.lora_b" % (l, op)][0] for l in range(LAYERS)]
        out[name] = (np.stack(down) if fa_down is None else fa_down[name][0], np.stack(up))
    return out


# ---- checks ---------------------------------------------------------------------------------

def ir_numbers(work, lora, plain):
    """The IR's parameters and saved bytes against closed forms."""
    def dump(model, *args):
        r = run([LYNXGEN, model, "--dump-ir", *args], work)
        return json.loads(r.stdout) if r.returncode == 0 else None
    full, adapted, frozen_a = dump(plain), dump(lora), dump(lora, "--lora-fa")
    if not (full and adapted and frozen_a):
        check(False, "--dump-ir of the three models")
        return
    b, elt = 2 * SEQ, 4  # rows of a micro-batch, fp32
    base = full["graphs"]["block"]["params_per_rank"]
    check(base == 12 * H * H + 13 * H, "the base block has 12 H^2 + 13 H parameters (%d)" % base)
    block, block_fa = adapted["graphs"]["block"], frozen_a["graphs"]["block"]
    check(block["params_per_rank"] == 16 * RANK * H and block["frozen_per_rank"] == base,
          "LoRA trains A (r x in) and B (out x r) of the four linears, 16 r H = %d per layer, and freezes the "
          "%d of the base (%d, %d)" % (16 * RANK * H, base, block["params_per_rank"], block["frozen_per_rank"]))
    check(block_fa["params_per_rank"] == 9 * RANK * H and block_fa["frozen_per_rank"] == base + 7 * RANK * H,
          "LoRA-FA trains the Bs alone, 9 r H = %d per layer, and freezes the As too (%d, %d)" % (
              9 * RANK * H, block_fa["params_per_rank"], block_fa["frozen_per_rank"]))
    check(adapted["graphs"]["prologue"]["params_per_rank"] == 0 and adapted["graphs"]["epilogue"]["params_per_rank"]
          == 0, "the embeddings and the final layernorm are frozen")
    # a LoRA linear keeps its input like a trained one, and u = x A^T besides; LoRA-FA keeps u alone
    inputs = b * (H + H + H + 4 * H) * elt
    downs = 4 * b * RANK * elt
    saved, saved_fa = block["activation_bytes"], block_fa["activation_bytes"]
    check(saved - full["graphs"]["block"]["activation_bytes"] == downs,
          "a LoRA layer keeps the four u = x A^T more than full training: 4 B T r bytes (%d)" % downs)
    check(saved - saved_fa == inputs,
          "a LoRA-FA layer keeps none of the four linears' inputs, 7 H B T bytes less than LoRA's (%d, %d)" % (
              inputs, saved - saved_fa))
    check(adapted.get("finetune", {}).get("lora_fa") is False and frozen_a["finetune"]["lora_fa"] is True,
          "ir.json says LoRA or LoRA-FA")
    sharded = dump(lora, "--tp", "2")
    # column-parallel qkv and fc: A whole, B's rows split; row-parallel attproj and fcproj: A's columns split, B whole
    per_rank = RANK * (H + 3 * H // 2) + RANK * (H // 2 + H) + RANK * (H + 4 * H // 2) + RANK * (4 * H // 2 + H)
    check(sharded and sharded["graphs"]["block"]["params_per_rank"] == per_rank == 10 * RANK * H,
          "at tp 2 a rank holds 10 r H adapter parameters per layer: B split as a column-parallel linear's "
          "rows, A as a row-parallel one's columns (%s)" % (sharded and sharded["graphs"]["block"]["params_per_rank"]))
    plan = run([LYNXGEN, lora, "--plan", "--json"], work)
    stage = json.loads(plan.stdout)["stages"][0] if plan.returncode == 0 else {}
    trained = LAYERS * 16 * RANK * H
    check(stage.get("grads_bytes") == 4 * trained and stage.get("optimizer_bytes") == 8 * trained,
          "the plan's gradients and AdamW moments are the adapters' alone (%s, %s bytes)" % (
              stage.get("grads_bytes"), stage.get("optimizer_bytes")))


def losses_match(work, label, program, want, *args):
    """The program (None: it did not build) trains with args; its losses must be want's to REFERENCE_BOUND."""
    r, metrics = train(program, work, *args) if program else (None, None)
    if r is None or r.returncode != 0:
        check(False, "%s: generates, builds and trains from --init" % label)
        print((r.stdout + r.stderr)[-2000:] if r else "")
        return
    got = losses(metrics)
    off = max(abs(x - y) / y for x, y in zip(got, want)) if len(got) == len(want) else float("inf")
    check(off < REFERENCE_BOUND, "%s: the losses %s match the numpy reference %s (%.1e relative)" % (
        label, ["%.6f" % x for x in got], ["%.6f" % x for x in want], off))


def block_op_indices(work, model):
    """The index of each adapted linear among the block's ops: its dropout's random stream."""
    r = run([LYNXGEN, model, "--dump-ir"], work)
    ops = [op["name"] for op in json.loads(r.stdout)["graphs"]["block"]["ops"]] if r.returncode == 0 else []
    return {name: ops.index(op) for op, name in OPS if op in ops}


def with_dropout(work, lora, init, data, start):
    """LoRA's dropout (p = 0.1) of the adapters' input: the programs draw the masks the
    reference draws from the same seed, at every layout, and the recomputed forwards again."""
    model = os.path.join(work, "lora-dropout.model")
    with open(lora) as f, open(model, "w") as out:
        out.write(f.read().replace(".seed = 7,", ".seed = 7, .lora_dropout = %g," % LORA_DROPOUT))
    ops = block_op_indices(work, model)
    reference = {fa: gpt_reference.lora_train(init_weights(), start, data, STEPS, MICRO_BATCHES, HEADS, VOCAB, LR, 0.9,
                                              0.95, 1e-8, SCALE, fa=fa, dropout=(LORA_DROPOUT, SEED, ops))[0]
                 for fa in (False, True)}
    undropped = gpt_reference.lora_train(init_weights(), start, data, STEPS, MICRO_BATCHES, HEADS, VOCAB, LR, 0.9, 0.95,
                                         1e-8, SCALE)[0]
    check(len(ops) == 4 and abs(reference[False][-1] - undropped[-1]) > 10 * REFERENCE_BOUND * undropped[-1],
          "the dropout changes the reference's last loss by more than 10 times the bound (%.8f against %.8f)" % (
              reference[False][-1], undropped[-1]))
    cases = (("LoRA dropout 0.1 pp=1", (), False), ("LoRA dropout 0.1 tp=2 pp=2 sequence-parallel",
                                                     ("--tp", "2", "--pp", "2", "--sequence-parallel"), False),
             ("LoRA-FA dropout 0.1 pp=2 full recompute", ("--pp", "2", "--lora-fa", "--policy", "full"), True))
    for label, layout, fa in cases:
        program = generate(work, "-".join(["dropout"] + [a.strip("-") for a in layout]), model, *layout, quick=True)
        losses_match(work, label, program, reference[fa], "--init", init)
    program = generate(work, "dropout-grad", model, "--pp", "2", target="gradcheck")
    r, _ = train(program, work, "--gradcheck", variant="-gradcheck") if program else (None, None)
    check(r is not None and r.returncode == 0 and " 0 failed" in r.stdout,
          "LoRA dropout 0.1 pp=2: the gradients match central finite differences of the loss (--gradcheck)")


def against_reference(work, lora, init, data):
    """Every layout's losses against the numpy reference; returns the pp=1 LoRA program, its final
    state and the adapters the runs start from."""
    first = generate(work, "lora-pp1", lora, quick=True)
    state1 = os.path.join(work, "lora-step1.state")
    r, _ = train(first, work, "--init", init, "--steps", "1", "--save", state1) if first else (None, None)
    if r is None or r.returncode != 0:
        check(False, "the LoRA program trains a step from --init")
        print((r.stdout + r.stderr)[-2000:] if r else "")
        return None, None, None
    state = read_state(state1)
    expected = sorted("block layer %d %s.lora_%s" % (l, op, ab) for l in range(LAYERS) for op, _ in OPS
                      for ab in "ab")
    check(sorted(state) == expected, "the training state holds the %d adapters alone: %s" % (
        len(expected), sorted(state)[:3]))
    start = {name: (a, np.zeros_like(b)) for name, (a, b) in adapters_of(state).items()}
    reference = {fa: gpt_reference.lora_train(init_weights(), start, data, STEPS, MICRO_BATCHES, HEADS, VOCAB, LR,
                                              0.9, 0.95, 1e-8, SCALE, fa=fa) for fa in (False, True)}
    delayed = gpt_reference.lora_train(init_weights(), start, data, STEPS, MICRO_BATCHES, HEADS, VOCAB, LR, 0.9, 0.95,
                                       1e-8, SCALE, delay=1)[0]
    base_loss = sum(gpt_reference.loss_and_gradients(init_weights(), *data[j], HEADS, VOCAB)[0]
                    for j in range(MICRO_BATCHES)) / MICRO_BATCHES
    check(abs(reference[False][0][0] - base_loss) < 1e-12,
          "the reference's first loss is the base model's: B starts at zero (%.10f)" % base_loss)
    cases = (("LoRA pp=1", (), False), ("LoRA pp=2", ("--pp", "2"), False),
             ("LoRA pp=2 dp=2 ZeRO-1", ("--pp", "2", "--dp", "2", "--zero"), False),
             ("LoRA pp=2 zb-h1", ("--pp", "2", "--schedule", "zb-h1"), False),
             ("LoRA pp=2, the LM head in 4 mini-sequences", ("--pp", "2", "--mini-sequences", "4"), False),
             ("LoRA-FA pp=1", ("--lora-fa",), True), ("LoRA-FA pp=2", ("--pp", "2", "--lora-fa"), True),
             ("LoRA-FA pp=2 full recompute", ("--pp", "2", "--lora-fa", "--policy", "full"), True),
             ("LoRA-FA pp=2 interleaved", ("--pp", "2", "--lora-fa", "--schedule", "interleaved"), True),
             ("LoRA tp=2", ("--tp", "2"), False),
             ("LoRA tp=2 pp=2 dp=2 ZeRO-1 sequence-parallel",
              ("--tp", "2", "--pp", "2", "--dp", "2", "--zero", "--sequence-parallel"), False),
             ("LoRA-FA tp=2 sequence-parallel, the LM head in 4 mini-sequences",
              ("--tp", "2", "--sequence-parallel", "--mini-sequences", "4", "--lora-fa"), True))
    program = generate(work, "lora-2bw", lora, "--pp", "2", "--schedule", "2bw", quick=True)
    losses_match(work, "LoRA pp=2 PipeDream-2BW (the reference's delayed update of the adapters)", program, delayed,
                 "--init", init)
    final = os.path.join(work, "lora-final.state")
    for label, layout, fa in cases:
        name = "-".join(["lora"] + [a.strip("-") for a in layout])
        program = first if not layout else generate(work, name, lora, *layout, quick=True)
        losses_match(work, label, program, reference[fa][0], "--init", init, *(() if layout else ("--save", final)))
    # AdamW's first updates are about lr whatever a gradient's size, so the fp32 rounding of the
    # smallest gradients shows in the adapters more than in the losses: 1e-3 of their largest element
    trained = adapters_of(read_state(final))
    worst = max(np.abs(trained[n][k] - reference[False][1][n][k]).max() / np.abs(reference[False][1][n][k]).max()
                for n in trained for k in (0, 1))
    check(worst < 1e-3, "LoRA pp=1 ends with the reference's adapters (%.1e of their largest element)" % worst)
    return first, final, start


def init_weights():
    return gpt_reference.random_weights(SEQ, VOCAB, LAYERS, H, VOCAB, seed=1)


def frozen_bitwise(work, lora, init):
    program = generate(work, "lora-check", lora, "--pp", "2", target="check", quick=True)
    r, _ = train(program, work, "--init", init, "--steps", "3", variant="-check") if program else (None, None)
    out = r.stdout if r else ""
    frozen = [l for l in out.splitlines() if l.startswith("frozen: stage")]
    memory = [l for l in out.splitlines() if l.startswith("memory: stage")]
    check(r is not None and r.returncode == 0 and len(frozen) == 2 and all("bitwise unchanged" in l for l in frozen),
          "after 3 steps every frozen weight of both stages is bitwise what --init loaded: %s" % frozen)
    check(len(memory) == 2 and all("as planned" in l for l in memory),
          "both stages use their arenas exactly to the planned extents, poison never read")
    if r is None or r.returncode != 0:
        print((out + (r.stderr if r else ""))[-2000:])


def gradients(work, lora):
    for label, extra in (("LoRA pp=2", ("--pp", "2")), ("LoRA-FA pp=2", ("--pp", "2", "--lora-fa")),
                         ("LoRA tp=2", ("--tp", "2"))):
        program = generate(work, "lora-grad%s" % "".join(extra), lora, *extra, target="gradcheck")
        r, _ = train(program, work, "--gradcheck", variant="-gradcheck") if program else (None, None)
        check(r is not None and r.returncode == 0 and " 0 failed" in r.stdout,
              "%s: the adapters' gradients match central finite differences of the loss (--gradcheck)" % label)
        if r is None or r.returncode != 0:
            print((r.stdout + r.stderr)[-2000:] if r else "")


def kill_and_resume(work, program, init):
    """kill -9 of a fine-tuning run after its third checkpoint; --init (the base) with --resume
    (the adapters) continues it with the uninterrupted run's losses, bit for bit."""
    steps, every = 100, 4
    whole, killed = os.path.join(program, "whole.jsonl"), os.path.join(program, "killed.jsonl")
    ckpt = os.path.join(work, "adapters.state")
    r = run(command(program, work, whole, "--init", init, steps=steps), work)
    want = losses_by_step(whole)
    job = start(program, work, killed, "--init", init, "--save", ckpt, "--checkpoint-every", str(every), steps=steps)
    reached = wait_for_step(job, killed, 3 * every + 1)
    gone = kill_job(job, program)
    at = saved_step(ckpt)
    check(r.returncode == 0 and reached and gone and at is not None and every <= at < steps,
          "kill -9 of a fine-tuning job after step %d leaves the adapters' state of step %s" % (
              max(losses_by_step(killed), default=0), at))
    r = run(command(program, work, killed, "--init", init, "--resume", ckpt, "--save", ckpt, "--checkpoint-every",
                    str(every), steps=steps), work)
    check(r.returncode == 0 and losses_by_step(killed) == want and len(want) == steps,
          "resumed from step %s with --init and --resume, the %d losses equal the uninterrupted run's bitwise" % (
              at, steps))


def read_llmc(path):
    with open(path, "rb") as f:
        f.read(1024)
        flat = np.frombuffer(f.read(), "<f4").astype(np.float64)
    out, at = {}, 0
    for name, shape in gpt_reference.shapes(SEQ, LAYERS, H, VOCAB):
        n = int(np.prod(shape))
        out[name] = flat[at:at + n].reshape(shape)
        at += n
    return out


def merging(work, lora_program, plain, init, state, val):
    """--export-llmc writes W + scale B A, under tp 2 too; the plain GPT from that file evaluates as the
    adapted model."""
    merged = os.path.join(work, "merged.bin")
    r, _ = train(lora_program, work, "--init", init, "--resume", state, "--steps", "0", "--val-data", val,
                 "--export-llmc", merged)
    if r.returncode != 0:
        check(False, "the LoRA program evaluates --init with --resume and exports the merged weights")
        print((r.stdout + r.stderr)[-2000:])
        return
    adapted_loss = float(r.stdout.split("validation loss ")[1].split()[0])
    base, adapters, got = init_weights(), adapters_of(read_state(state)), read_llmc(merged)
    worst = 0.0
    for name, (down, up) in adapters.items():
        want = base[name + "w"] + SCALE * np.einsum("lor,lri->loi", up, down)
        worst = max(worst, np.abs(got[name + "w"] - want).max())
    adapted = {name + "w" for name in adapters}
    untouched = all(np.array_equal(got[n], base[n]) for n in base if n not in adapted)
    check(worst < 1e-6 and untouched, "the exported llm.c file holds W + scale B A for each adapted weight "
          "(max error %.1e) and the other weights as --init gave them" % worst)
    sharded = os.path.join(work, "merged-tp2.bin")
    r, _ = train(os.path.join(work, "lora-tp-2"), work, "--init", init, "--resume", state, "--steps", "0",
                 "--export-llmc", sharded)
    same = r.returncode == 0 and open(sharded, "rb").read() == open(merged, "rb").read()
    check(same, "the tp 2 program resumes the adapters and exports the same merged file, byte for byte "
          "(each rank merges its shards)")
    program = generate(work, "plain", plain, quick=True)
    r, _ = train(program, work, "--init", merged, "--steps", "0", "--val-data", val) if program else (None, None)
    ok = r is not None and r.returncode == 0
    plain_loss = float(r.stdout.split("validation loss ")[1].split()[0]) if ok else float("nan")
    check(ok and abs(plain_loss - adapted_loss) < 1e-6 * adapted_loss,
          "the GPT without adapters from the merged weights has the adapted model's validation loss (%.9f, %.9f)"
          % (plain_loss, adapted_loss))


def main():
    work = fortunes_shards("lynx-lora-")
    if not work:
        return exit_status()
    lora, plain = os.path.join(work, "lora.model"), os.path.join(work, "plain.model")
    with open(lora, "w") as f:
        f.write(model_text(True))
    with open(plain, "w") as f:
        f.write(model_text(False))
    ir_numbers(work, lora, plain)
    init = os.path.join(work, "base.bin")
    gpt_reference.write_checkpoint(init, init_weights(), SEQ, VOCAB, LAYERS, HEADS, H, VOCAB)
    data = gpt_reference.windows(os.path.join(work, "data", "train_*.bin"), 2, SEQ)
    val = os.path.join(work, "data", "val_*.bin")
    program, state, start = against_reference(work, lora, init, data)
    if start:
        with_dropout(work, lora, init, data, start)
    frozen_bitwise(work, lora, init)
    gradients(work, lora)
    if program:
        merging(work, program, plain, init, state, val)
        kill_and_resume(work, program, init)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
