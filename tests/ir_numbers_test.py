"""The IR's numbers against closed forms from the literature.

activation bytes per layer: Korthikanti et al. 2022, "Reducing Activation Recomputation
in Large Transformer Models", table 2, less what they count and lynxgen does not keep (its
backwards draw dropout masks again): the attention-dropout mask (a s^2 b bytes) and dropout
output (2 a s^2 b), so 5 a s / h becomes 2 a s / h, and the two dropout masks of the block's
branches (s b h each), so 34 becomes 32 (10 + 24/t becomes 8 + 24/t)
parameters: 12*L*h^2 + 13*L*h + V*h + s*h + 2*h (GPT with biases, tied LM head)
model FLOPs: Narayanan et al. 2021, 72*B*s*L*h^2*(1 + s/(6h) + V/(12*L*h))
The formulas are evaluated here, independently of lynxgen, with exact integers.
"""
import json
import os
import subprocess
import sys
import tempfile
from fractions import Fraction

from tap import check, exit_status

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LYNXGEN = os.path.join(ROOT, "bin", "lynxgen")


GPT = """#include <lynx.h>
static const struct lx_model model = {{ .vocab = {V}, .seq_len = {s}, .layers = {L},
  .hidden = {h}, .heads = {a}, .dropout = 0.1, .tied_embeddings = 1 }};
static const struct lx_cluster cluster = {{ .gpu = GPU_A100_80GB, .gpus_per_node = 8 }};
static const struct lx_parallel parallel = {{ .micro_batch = {b}, .global_batch = {B} }};
tensor prologue(tensor tokens) {{
  return dropout(add(embedding(tokens, {V}, {h}), position_embedding(tokens, {h})));
}}
tensor block(tensor x) {{
  tensor a = {attn}(linear(layernorm(x), 3 * {h}), {a}, {a});
  x = add(x, dropout(linear(a, {h})));
  tensor m = linear(gelu(linear(layernorm(x), 4 * {h})), {h});
  return add(x, dropout(m));
}}
tensor epilogue(tensor x, tensor targets) {{
  return cross_entropy(lm_head(layernorm(x), {V}), targets);
}}
"""


def dump_ir(text, *args):
    with tempfile.NamedTemporaryFile("w", suffix=".model", delete=False) as f:
        f.write(text)
    try:
        out = subprocess.run([LYNXGEN, f.name, "--dump-ir", *args], capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    if out.returncode != 0:
        print(out.stderr)
        return None
    return json.loads(out.stdout)


SHAPES = [  # (s, b, h, a, L, V)
    (2048, 4, 2048, 16, 24, 50257),  # GPT 1.3B
    (2048, 1, 5120, 40, 40, 50257),  # GPT 13B
    (1024, 4, 768, 12, 12, 50257),   # GPT-2 124M
    (4096, 2, 4096, 32, 32, 50257),  # GPT 7B at sequence 4096
    (64, 3, 96, 6, 3, 100),          # a shape nothing is tuned for
]

for s, b, h, a, L, V in SHAPES:
    name = f"s={s} b={b} h={h} a={a} L={L} V={V}"
    B = 8 * b
    text = GPT.format(s=s, b=b, h=h, a=a, L=L, V=V, B=B, attn="attention")
    for t in [1, 2, 4]:
        if a % t:
            continue
        for sp in [False, True]:
            if sp and t == 1:
                continue
            args = ["--tp", str(t)] + (["--sequence-parallel"] if sp else [])
            ir = dump_ir(text, *args)
            if ir is None:
                check(False, f"{name} t={t}: lynxgen accepts the model")
                continue
            if sp:  # tensor + sequence parallel: everything divided by t
                want = Fraction(s * b * h) * (32 + Fraction(2 * a * s, h)) / t
                form = "s*b*h*(32 + 2*a*s/h)/t"
            elif t == 1:
                want = Fraction(s * b * h) * (32 + Fraction(2 * a * s, h))
                form = "s*b*h*(32 + 2*a*s/h)"
            else:
                want = Fraction(s * b * h) * (8 + Fraction(24, t) + Fraction(2 * a * s, h * t))
                form = "s*b*h*(8 + 24/t + 2*a*s/(h*t))"
            got = [layer["activation_bytes"] for layer in ir["layers"]]
            check(len(got) == L and all(g == want for g in got),
                  f"{name} t={t}: activation bytes per layer = {form} = {want} (got {got[0]})")
    ir = dump_ir(text)
    want_params = 12 * L * h * h + 13 * L * h + V * h + s * h + 2 * h
    check(ir["params_total"] == want_params, f"{name}: params = {want_params} (got {ir['params_total']})")
    want_flops = Fraction(72 * B * s * L * h * h) * (1 + Fraction(s, 6 * h) + Fraction(V, 12 * L * h))
    got_flops = ir["model_flops_per_iteration"]
    check(abs(got_flops - want_flops) <= want_flops * Fraction(1, 10**12),
          f"{name}: model FLOPs per iteration = 72Bslh^2(1+s/6h+V/12lh) = {float(want_flops):.6e} "
          f"(got {got_flops:.6e})")

# Full recompute keeps only the layer input: 2*s*b*h; the IR's block input is
# that tensor, so its out_bytes must equal the formula.
s, b, h, a, L, V = SHAPES[0]
ir = dump_ir(GPT.format(s=s, b=b, h=h, a=a, L=L, V=V, B=8 * b, attn="attention"))
block_input = ir["graphs"]["block"]["ops"][0]
check(block_input["kind"] == "input" and block_input["out_bytes"] == 2 * s * b * h,
      f"full recompute keeps 2*s*b*h = {2 * s * b * h} bytes per layer (got {block_input['out_bytes']})")

# Selective recompute (attention core recomputed) keeps s*b*h*(8 + 24/t):
# the layer's bytes less what the materialized attention core itself keeps.
for t in [1, 2]:
    ir = dump_ir(GPT.format(s=s, b=b, h=h, a=a, L=L, V=V, B=8 * b, attn="attention"), "--tp", str(t))
    ops = ir["graphs"]["block"]["ops"]
    core = sum(sv["bytes"] for op in ops if op["kind"] == "attention" for sv in op["saved"]
               if sv["what"] != "input")
    kept = ir["layers"][0]["activation_bytes"] - core
    want = Fraction(s * b * h) * (8 + Fraction(24, t))
    check(kept == want, f"t={t}: selective recompute keeps s*b*h*(8 + 24/t) = {want} (got {kept})")

# Flash attention keeps q, k, v, its output and the log-sum-exp instead of the
# s x s scores: 32*s*b*h + 4*a*s*b (fp32 lse) per layer with no parallelism.
ir = dump_ir(GPT.format(s=s, b=b, h=h, a=a, L=L, V=V, B=8 * b, attn="flash_attention"))
want = 32 * s * b * h + 4 * a * s * b
check(ir["layers"][0]["activation_bytes"] == want,
      f"flash attention layer keeps 32*s*b*h + 4*a*s*b = {want} (got {ir['layers'][0]['activation_bytes']})")

# Without dropout (probability 0) a dropout() is its input: no op in the IR,
# no copy in the programs, and the same bytes as with dropout (no mask is
# kept either way): 32*s*b*h + 2*a*s^2*b.
ir = dump_ir(GPT.format(s=s, b=b, h=h, a=a, L=L, V=V, B=8 * b, attn="attention").replace(".dropout = 0.1",
                                                                                         ".dropout = 0"))
kinds = [op["kind"] for g in ir["graphs"].values() for op in g["ops"]]
want = 32 * s * b * h + 2 * a * s * s * b
check("dropout" not in kinds and ir["layers"][0]["activation_bytes"] == want,
      f"dropout 0: no dropout op, a layer keeps 32*s*b*h + 2*a*s^2*b = {want} "
      f"(got {ir['layers'][0]['activation_bytes']}, {kinds.count('dropout')} dropout ops)")
# ... and the graphs still read what the dropouts passed on: the prologue returns the sum
prologue = ir["graphs"]["prologue"]
check(prologue["output"] == "add_0", f"dropout 0: the prologue returns add_0 (got {prologue['output']})")

sys.exit(exit_status())
