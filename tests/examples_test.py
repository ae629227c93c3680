#!/usr/bin/env python3
"""The example model files: each one builds, and its numbers are the ones it claims.

- every examples/*.model: lynxgen --dump-ir exits 0 and prints JSON that parses;
  clang accepts it with examples/compile_flags.txt (what clangd sees), if clang is here
- the GPT examples: params_total equals 12*L*h^2 + 13*L*h + V*h + s*h + 2*h, computed
  here from the example's own config, and is within 3% of the nominal size in
  GPT-3's table of model sizes (Brown et al. 2020, table 2.1) and GPT-2 small
- llama.model: params_total equals the Llama closed form derived below; its block
  has rmsnorm, rope and swiglu, grouped-query attention (kv_heads < heads, visible
  in the attention op's input and output widths) and linears without biases
- llama.model's rope calls rotate by 10000, and by 500000 with .rope_theta = 500000
- -o DIR run from two different working directories writes byte-identical ir.json,
  the same bytes --dump-ir prints (for tiny, gpt2-124m and gpt13b)
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

from emitted import unwrapped
from tap import check, exit_status

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LYNXGEN = os.path.join(ROOT, "bin", "lynxgen")
EXAMPLES = os.path.join(ROOT, "examples")


def run(args, cwd=None):
    return subprocess.run([LYNXGEN, *args], capture_output=True, cwd=cwd)


# Nominal sizes: GPT-3's table 2.1 (Brown et al. 2020; gpt-7b is GPT-3 6.7B), GPT-2 small,
# and for gpt-20b and gpt-23b the sizes their names give (44 and 50 layers of hidden 6144).
NOMINAL = {
    "gpt2-124m": 124e6,
    "gpt13b": 1.3e9,
    "gpt-2.7b": 2.7e9,
    "gpt-7b": 6.7e9,
    "gpt-13b": 13e9,
    "gpt-20b": 20e9,
    "gpt-23b": 23e9,
}
GPT_SHAPED = set(NOMINAL) | {"tiny"}  # GPT blocks with biases and a tied head


def gpt_params(m):
    L, h, V, s = m["layers"], m["hidden"], m["vocab"], m["seq_len"]
    return 12 * L * h * h + 13 * L * h + V * h + s * h + 2 * h


def llama_params(m):
    """Llama: per layer two RMSNorm scales (h each), fused q/k/v projection
    (h + 2*kv_heads*head_dim) x h, output projection h x h, fused gate/up
    2*ffn x h, down projection ffn x h, no biases; token embedding V x h, an
    untied output head V x h and the final RMSNorm scale h."""
    L, h, V = m["layers"], m["hidden"], m["vocab"]
    kv, ffn = m["kv_heads"], m["ffn_hidden"]
    d = h // m["heads"]
    layer = 2 * h + (h + 2 * kv * d) * h + h * h + 2 * ffn * h + ffn * h
    return L * layer + V * h + V * h + h


models = sorted(glob.glob(os.path.join(EXAMPLES, "*.model")))
names = {os.path.basename(p)[: -len(".model")] for p in models}
for name in sorted(NOMINAL) + ["tiny", "llama"]:
    check(name in names, f"examples/{name}.model exists")

flags_path = os.path.join(EXAMPLES, "compile_flags.txt")
flags = open(flags_path).read().split() if os.path.exists(flags_path) else None
check(flags is not None and "-I../ir" in flags and "-xc" in flags and "-std=c11" in flags,
      "examples/compile_flags.txt gives clangd -xc -std=c11 -I../ir")
clang = shutil.which("clang")

irs = {}
for path in models:
    name = os.path.basename(path)[: -len(".model")]
    out = run([path, "--dump-ir"])
    if not check(out.returncode == 0, f"{name}: lynxgen --dump-ir exits 0 (got {out.returncode})"):
        sys.stdout.write(out.stderr.decode(errors="replace"))
        continue
    try:
        irs[name] = json.loads(out.stdout)
        check(True, f"{name}: --dump-ir prints JSON that parses")
    except ValueError as e:
        check(False, f"{name}: --dump-ir prints JSON that parses ({e})")
    if clang and flags:
        cc = subprocess.run([clang, *flags, "-fsyntax-only", os.path.basename(path)], cwd=EXAMPLES,
                            capture_output=True, text=True)
        if not check(cc.returncode == 0, f"{name}: clang accepts it with examples/compile_flags.txt"):
            sys.stdout.write(cc.stderr)

for name in sorted(GPT_SHAPED & set(irs)):
    ir = irs[name]
    want = gpt_params(ir["model"])
    got = ir["params_total"]
    check(got == want, f"{name}: params_total = 12Lh^2 + 13Lh + Vh + sh + 2h = {want} (got {got})")
    if name in NOMINAL:
        nominal = NOMINAL[name]
        check(abs(got - nominal) <= 0.03 * nominal,
              f"{name}: params_total {got / 1e9:.4f} B is within 3% of the nominal {nominal / 1e9:g} B")

def llama_checks(name, ir):
    m = ir["model"]
    want = llama_params(m)
    check(ir["params_total"] == want,
          f"{name}: params_total = L*(2h + (h + 2*kv*d)*h + h^2 + 3*ffn*h) + 2*V*h + h = {want} "
          f"(got {ir['params_total']})")
    all_ops = [op for g in ir["graphs"].values() for op in g["ops"]]
    block = ir["graphs"]["block"]["ops"]
    kinds = {op["kind"] for op in block}
    for kind in ["rmsnorm", "rope", "swiglu", "attention"]:
        check(kind in kinds, f"{name}: the block has a {kind} op")
    check(not {"layernorm", "position_embedding", "dropout", "gelu"} & {op["kind"] for op in all_ops},
          f"{name}: no layernorm, position_embedding, dropout or gelu anywhere")
    check(m["kv_heads"] < m["heads"] and m["heads"] % m["kv_heads"] == 0,
          f"{name}: grouped-query attention, kv_heads {m['kv_heads']} < heads {m['heads']}")
    d = m["hidden"] // m["heads"]
    by_name = {op["name"]: op for op in block}
    for op in block:
        if op["kind"] != "attention":
            continue
        qkv = by_name[op["inputs"][0]]["shape"]["width"]
        want_qkv = (m["heads"] + 2 * m["kv_heads"]) * d
        check(qkv == want_qkv and op["shape"]["width"] == m["heads"] * d,
              f"{name}: {op['name']} reads q,k,v of width (heads + 2*kv_heads)*head_dim = {want_qkv} "
              f"and writes heads*head_dim = {m['heads'] * d} (got {qkv} -> {op['shape']['width']})")
    for g in ir["graphs"].values():
        names_in_g = {op["name"]: op for op in g["ops"]}
        for op in g["ops"]:
            if op["kind"] == "linear":
                k = names_in_g[op["inputs"][0]]["shape"]["width"]
                n = op["shape"]["width"]
                check(op["params"] == k * n, f"{name}: {op['name']} has no bias ({k} x {n} = {k * n} "
                                             f"parameters, got {op['params']})")
    heads = [op for op in ir["graphs"]["epilogue"]["ops"] if op["kind"] == "lm_head"]
    check(not m["tied_embeddings"] and len(heads) == 1 and heads[0]["params"] == m["vocab"] * m["hidden"],
          f"{name}: the lm_head is untied and holds V*h parameters")


# Llama 3 8B as published (Meta, "The Llama 3 Herd of Models", 2024, table 3):
# 8.03 B parameters, GQA with 8 key/value heads, FFN 14336, vocabulary 128256,
# RoPE base 500000; the long-context example is the same model.
LLAMA3 = {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn_hidden": 14336, "vocab": 128256,
          "rope_theta": 500000}
for name in ("llama", "llama3-8b", "llama3-8b-32k"):
    check(name in irs, f"examples/{name}.model dumps its IR")
    if name in irs:
        llama_checks(name, irs[name])
    if name.startswith("llama3") and name in irs:
        m = irs[name]["model"]
        wrong = {k: (m.get(k), v) for k, v in LLAMA3.items() if m.get(k) != v}
        check(not wrong and abs(irs[name]["params_total"] - 8.03e9) <= 0.005 * 8.03e9,
              f"{name}: Llama 3 8B's published shape {wrong} and 8.03 B parameters "
              f"(got {irs[name]['params_total'] / 1e9:.4f} B)")

# The rotation base of rope(): Llama's default, or the model's .rope_theta,
# reaches every rope call of both targets' programs.
with tempfile.TemporaryDirectory() as tmp:
    text = open(os.path.join(EXAMPLES, "llama.model")).read()
    llama3 = os.path.join(tmp, "llama3.model")
    with open(llama3, "w") as f:
        f.write(text.replace("static const struct lx_model model = {",
                             "static const struct lx_model model = {\n    .rope_theta = 500000,", 1))
    for model, theta in ((os.path.join(EXAMPLES, "llama.model"), "10000"), (llama3, "500000")):
        ir = json.loads(run([model, "--dump-ir"]).stdout or b"{}")
        check(str(ir.get("model", {}).get("rope_theta")) == theta, f"{os.path.basename(model)}: rope_theta {theta}")
        for target in ("cpu", "cuda"):
            out = os.path.join(tmp, f"{theta}-{target}")
            r = run([model, "--target", target, "--allow-oom-plan", "-o", out])
            calls = []
            for stage in glob.glob(os.path.join(out, "stage*.c*")):
                calls += [line for line in unwrapped(open(stage).read()).splitlines()
                          if "lx_rope_forward(" in line or "lx_rope_backward(" in line]
            ends = {line.rstrip().rsplit(",", 1)[-1].strip(" );") for line in calls}  # one argument order on both
            check(r.returncode == 0 and calls and ends == {theta},
                  f"{os.path.basename(model)} --target {target}: its {len(calls)} rope calls rotate by {theta} ({ends})")

# Reproducibility: the same model, from two working directories, into two
# differently named output directories. -o runs every pass (plan, schedule,
# simulation, emission), seconds for the large examples, so only the small
# ones and the README's gpt13b are written; --dump-ir covers the rest above.
REPRODUCED = ["tiny", "gpt2-124m", "gpt13b"]
with tempfile.TemporaryDirectory() as tmp:
    cwd_a, cwd_b = os.path.join(tmp, "a"), os.path.join(tmp, "b", "deeper")
    os.makedirs(cwd_a)
    os.makedirs(cwd_b)
    os.makedirs(os.path.join(tmp, "b", "elsewhere"))  # lynxgen creates DIR, not its parents
    for name in REPRODUCED:
        path = os.path.join(EXAMPLES, name + ".model")
        ra = run([path, "-o", "out"], cwd=cwd_a)
        rb = run([path, "-o", os.path.join("..", "elsewhere", name)], cwd=cwd_b)
        if not check(ra.returncode == 0 and rb.returncode == 0, f"{name}: -o DIR exits 0 from two directories"):
            sys.stdout.write((ra.stderr + rb.stderr).decode(errors="replace"))
            continue
        a = open(os.path.join(cwd_a, "out", "ir.json"), "rb").read()
        b = open(os.path.join(tmp, "b", "elsewhere", name, "ir.json"), "rb").read()
        check(a == b, f"{name}: ir.json is byte-identical when written from two working directories")
        dump = run([path, "--dump-ir"], cwd=cwd_b).stdout
        check(a == dump, f"{name}: ir.json holds exactly what --dump-ir prints")
        shutil.rmtree(os.path.join(cwd_a, "out"))

sys.exit(exit_status())
