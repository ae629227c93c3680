"""Hugging Face checkpoints of the emitted CPU programs (--export-hf DIR, --init).

For a GPT-2 and a Llama (tied and untied embeddings), each at its model
file's plan and at tp 2 x pp 2 x dp 2 with ZeRO-1 and sequence parallelism:

- the file is the safetensors layout exactly, read here by a parser of the
  format written in this test: an 8-byte little-endian header size, a JSON
  header padded with spaces to 8 bytes, every data byte in exactly one
  tensor, the names and shapes of transformers' GPT2LMHeadModel and
  LlamaForCausalLM listed here; config.json holds the model's sizes;
- the weights mean what transformers means by them: a forward pass written
  here in numpy after transformers' conventions (Conv1D's transposed
  weights, rotate-half rotary pairs, grouped-query heads, gate|up order)
  gives the program's validation loss; with transformers and torch
  installed, transformers itself gives it too;
- GPT-2's tensors equal those of the same run's llm.c export, transposed
  where Conv1D transposes;
- the initial weights export byte-identical under both plans (every plan
  draws the same weights), and a checkpoint trained under one plan loads
  under the other and exports back byte-identical;
- --init reads what transformers and the hub write besides: BF16 and F16
  files, a base model's names without the "transformer." / "model." prefix,
  a directory of shards named by model.safetensors.index.json, and a GPT-2
  of a longer context;
- a hostile or broken file (truncated, a header size past the end or a few
  bytes short, a header that is not JSON, a missing tensor, a wrong shape or
  dtype, offsets past the data, two tensors on the same bytes, a tensor
  named twice, a NaN weight, an index naming a file outside the directory or
  a named pipe) ends the program with one error line that says what is
  wrong, exit status 1;
- before step 1: an export directory that cannot be made, and a model that
  transformers has no class for (an untied GPT-2), are refused.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

from tap import check, exit_status
from training_metrics import QUICK_CFLAGS

try:
    import numpy as np
except ImportError:  # scripts/deps.sh installs python3-numpy
    np = None

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LYNXGEN = os.path.join(ROOT, "bin", "lynxgen")
FORTUNES = "/usr/share/games/fortunes/fortunes"
BIG_PLAN = ["--tp", "2", "--pp", "2", "--dp", "2", "--zero", "--sequence-parallel"]
LOSS_BOUND = 1e-5  # fp32 program against a float64 reference: relative

GPT = """#include <lynx.h>
static const struct lx_model model = { .vocab = 256, .seq_len = 32, .layers = 2, .hidden = 64, .heads = 4,
  .dropout = 0.0, .tied_embeddings = 1 };
static const struct lx_cluster cluster = { .gpu = GPU_A100_80GB, .gpus_per_node = 8 };
static const struct lx_parallel parallel = { .tp = 1, .pp = 1, .dp = 1, .micro_batch = 2, .global_batch = 8,
  .schedule = SCHEDULE_1F1B };
static const struct lx_training training = { .steps = 10, .lr = 3e-3, .min_lr = 3e-4, .warmup_steps = 2,
  .lr_schedule = LR_COSINE, .weight_decay = 0.1, .grad_clip = 1.0, .seed = 7, .dtype = DTYPE_FP32 };
tensor prologue(tensor tokens) { return add(embedding(tokens, 256, 64), position_embedding(tokens, 64)); }
tensor block(tensor x) {
  x = add(x, linear(attention(linear(layernorm(x), 3 * 64), 4, 4), 64));
  return add(x, linear(gelu(linear(layernorm(x), 4 * 64)), 64));
}
tensor epilogue(tensor x, tensor targets) { return cross_entropy(lm_head(layernorm(x), 256), targets); }
"""

with open(os.path.join(ROOT, "tests", "equivalence", "llama.model")) as f:
    LLAMA = f.read()


def run(cmd, cwd):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env, timeout=300)


def generate(work, name, text, *args):
    model = os.path.join(work, name + ".model")
    with open(model, "w") as f:
        f.write(text)
    out = os.path.join(work, name)
    r = run([LYNXGEN, model, "-o", out, "--target", "cpu", *args], work)
    if r.returncode == 0:
        r = run(["make", "-s", "-j2", "-C", out, QUICK_CFLAGS], work)
    if not check(r.returncode == 0, "%s generates and builds" % name):
        print(r.stdout[-2000:] + r.stderr[-2000:])
        return None
    return out


def program_run(program, work, *args):
    """The program's run.sh on fortunes; returns (result, validation loss or None)."""
    cmd = [os.path.join(program, "run.sh"), "--data", "data/train_*.bin", "--val-data", "data/val_*.bin",
           "--val-batches", "1", "--metrics", os.path.join(program, "metrics.jsonl"), *args]
    r = run(cmd, work)
    loss = None
    for line in r.stdout.splitlines():
        if line.startswith("validation loss"):
            loss = float(line.split()[2])
    return r, loss


# ---- the safetensors format, as its specification describes it ---------------------------

DTYPES = {"F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": (None, 2)}


def read_safetensors(path):
    """{name: float32 array} and the problems found with the layout (empty: exact)."""
    with open(path, "rb") as f:
        blob = f.read()
    problems = []
    (n,) = struct.unpack("<Q", blob[:8])
    text = blob[8:8 + n]
    if n % 8:
        problems.append("header size %d is not a multiple of 8" % n)
    if text != text.rstrip(b" ") + b" " * (len(text) - len(text.rstrip(b" "))):
        problems.append("header padding is not spaces")
    header = json.loads(text)
    data = blob[8 + n:]
    if header.get("__metadata__", {}).get("format") != "pt":
        problems.append("no __metadata__.format pt")
    spans, tensors = [], {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        spans.append((begin, end, name))
        raw = data[begin:end]
        if entry["dtype"] == "BF16":
            values = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            values = np.frombuffer(raw, DTYPES[entry["dtype"]][0]).astype(np.float32)
        count = int(np.prod(entry["shape"])) if entry["shape"] else 1
        if count * DTYPES[entry["dtype"]][1] != end - begin:
            problems.append("%s: %d bytes for shape %s" % (name, end - begin, entry["shape"]))
        tensors[name] = values.reshape(entry["shape"])
    spans.sort()
    at = 0
    for begin, end, name in spans:
        if begin != at:
            problems.append("%s starts at %d, expected %d (a hole or an overlap)" % (name, begin, at))
        at = end
    if at != len(data):
        problems.append("the tensors end at %d, the data at %d" % (at, len(data)))
    return tensors, header, problems


def write_safetensors(path, tensors, dtype="F32", names=None):
    """tensors: {name: array}, written in the given dtype (BF16 rounds to nearest even)."""
    header, chunks, at = {"__metadata__": {"format": "pt"}}, [], 0
    for name, values in tensors.items():
        values = np.ascontiguousarray(values, dtype=np.float32)
        if dtype == "BF16":
            bits = values.view(np.uint32).astype(np.uint64)
            raw = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2").tobytes()
        elif dtype == "F16":
            raw = values.astype("<f2").tobytes()
        else:
            raw = values.astype("<f4").tobytes()
        header[(names or {}).get(name, name)] = {"dtype": dtype, "shape": list(values.shape),
                                                 "data_offsets": [at, at + len(raw)]}
        chunks.append(raw)
        at += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def as_dtype(values, dtype):
    """What the program reads from values stored in dtype."""
    values = np.asarray(values, np.float32)
    if dtype == "F16":
        return values.astype(np.float16).astype(np.float32)
    if dtype == "BF16":
        bits = values.view(np.uint32).astype(np.uint64)
        return ((((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).astype(np.uint32)).view(np.float32)
    return values


# ---- the two models as transformers names and computes them ---------------------------------

def expected_shapes(family, layers, V, C, T, F, H=None, KV=None, D=None, tied=True):
    if family == "gpt":
        shapes = {"transformer.wte.weight": [V, C], "transformer.wpe.weight": [T, C],
                  "transformer.ln_f.weight": [C], "transformer.ln_f.bias": [C]}
        for l in range(layers):
            p = "transformer.h.%d." % l
            shapes.update({p + "ln_1.weight": [C], p + "ln_1.bias": [C], p + "ln_2.weight": [C],
                           p + "ln_2.bias": [C], p + "attn.c_attn.weight": [C, 3 * C], p + "attn.c_attn.bias": [3 * C],
                           p + "attn.c_proj.weight": [C, C], p + "attn.c_proj.bias": [C],
                           p + "mlp.c_fc.weight": [C, F], p + "mlp.c_fc.bias": [F],
                           p + "mlp.c_proj.weight": [F, C], p + "mlp.c_proj.bias": [C]})
        return shapes
    shapes = {"model.embed_tokens.weight": [V, C], "model.norm.weight": [C]}
    if not tied:
        shapes["lm_head.weight"] = [V, C]
    for l in range(layers):
        p = "model.layers.%d." % l
        shapes.update({p + "input_layernorm.weight": [C], p + "post_attention_layernorm.weight": [C],
                       p + "self_attn.q_proj.weight": [H * D, C], p + "self_attn.k_proj.weight": [KV * D, C],
                       p + "self_attn.v_proj.weight": [KV * D, C], p + "self_attn.o_proj.weight": [C, H * D],
                       p + "mlp.gate_proj.weight": [F, C], p + "mlp.up_proj.weight": [F, C],
                       p + "mlp.down_proj.weight": [C, F]})
    return shapes


def layernorm(x, w, b, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def rmsnorm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def causal_attention(q, k, v):
    """q (H, T, D), k and v (H, T, D): softmax(q k^T / sqrt D) v under a causal mask."""
    T = q.shape[1]
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[2])
    scores = np.where(np.tril(np.ones((T, T), bool)), scores, -np.inf)
    scores = np.exp(scores - scores.max(-1, keepdims=True))
    return (scores / scores.sum(-1, keepdims=True)) @ v


def gpt2_logits(w, cfg, tokens):
    """transformers' GPT2LMHeadModel on one sequence, in float64."""
    C, H, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
    T = len(tokens)
    x = w["transformer.wte.weight"][tokens] + w["transformer.wpe.weight"][:T]
    for l in range(cfg["n_layer"]):
        p = "transformer.h.%d." % l
        h = layernorm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        qkv = h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]  # Conv1D: x W, W (in, out)
        q, k, v = (qkv[:, i * C:(i + 1) * C].reshape(T, H, C // H).transpose(1, 0, 2) for i in range(3))
        a = causal_attention(q, k, v).transpose(1, 0, 2).reshape(T, C)
        x = x + a @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = layernorm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        h = h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"]
        h = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))  # gelu_new
        x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = layernorm(x, w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], eps)
    return x @ w["transformer.wte.weight"].T


def rotate_half_rope(x, theta):
    """transformers' rotary embedding: pairs (m, m + D/2) turn by t theta^(-2m/D)."""
    T, D = x.shape[1], x.shape[2]
    angles = np.arange(T)[:, None] * theta ** (-np.arange(0, D, 2) / D)[None, :]
    cos, sin = np.cos(np.concatenate([angles] * 2, -1)), np.sin(np.concatenate([angles] * 2, -1))
    rotated = np.concatenate([-x[..., D // 2:], x[..., :D // 2]], -1)
    return x * cos + rotated * sin


def llama_logits(w, cfg, tokens):
    """transformers' LlamaForCausalLM on one sequence, in float64."""
    H, KV, D, eps = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"], cfg["rms_norm_eps"]
    T = len(tokens)
    x = w["model.embed_tokens.weight"][tokens]
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        h = rmsnorm(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(T, H, D).transpose(1, 0, 2)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(T, KV, D).transpose(1, 0, 2)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(T, KV, D).transpose(1, 0, 2)
        q, k = rotate_half_rope(q, cfg["rope_theta"]), rotate_half_rope(k, cfg["rope_theta"])
        group = H // KV  # query head i reads key/value head i // group
        a = causal_attention(q, np.repeat(k, group, 0), np.repeat(v, group, 0)).transpose(1, 0, 2).reshape(T, H * D)
        x = x + a @ w[p + "self_attn.o_proj.weight"].T
        h = rmsnorm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate, up = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ w[p + "mlp.down_proj.weight"].T
    x = rmsnorm(x, w["model.norm.weight"], eps)
    head = w["lm_head.weight"] if "lm_head.weight" in w else w["model.embed_tokens.weight"]
    return x @ head.T


def val_windows(work, B, T, windows):
    """The first windows of the validation shard as (inputs, targets) of B rows (lx_data.h)."""
    shard = sorted(f for f in os.listdir(os.path.join(work, "data")) if f.startswith("val_"))[0]
    with open(os.path.join(work, "data", shard), "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        tokens = np.frombuffer(f.read(2 * header[2]), "<u2").astype(np.int64)
    for w in range(windows):
        window = tokens[w * B * T:w * B * T + B * T + 1]
        yield window[:-1].reshape(B, T), window[1:].reshape(B, T)


def reference_loss(weights, cfg, family, work, B, T, windows):
    """The mean cross-entropy over the windows one validation batch reads."""
    w = {name: values.astype(np.float64) for name, values in weights.items()}
    logits_of = gpt2_logits if family == "gpt" else llama_logits
    total, count = 0.0, 0
    for inputs, targets in val_windows(work, B, T, windows):
        for row in range(B):
            logits = logits_of(w, cfg, inputs[row])
            logits = logits - logits.max(-1, keepdims=True)
            logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
            total -= logp[np.arange(T), targets[row]].sum()
            count += T
    return total / count


def transformers_loss(directory, work, B, T, windows):
    """transformers' own loss of the exported directory, or None without it."""
    try:
        import torch
        import transformers
    except ImportError:
        return None
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    model = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    losses = []
    for inputs, targets in val_windows(work, B, T, windows):
        with torch.no_grad():
            logits = model(torch.from_numpy(inputs)).logits
        losses.append(torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                        torch.from_numpy(targets).reshape(-1)).item())
    return sum(losses) / len(losses)


def relative(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def same_bytes(a, b):
    with open(a, "rb") as f, open(b, "rb") as g:
        return f.read() == g.read()


# ---- the checks ------------------------------------------------------------------------------

def llmc_matches(work, name, tensors, s):
    """GPT-2's tensors against the same weights in llm.c's file (lx_checkpoint.h's order)."""
    L, C, T, V = s["layers"], s["C"], s["T"], s["V"]
    with open(os.path.join(work, name + "-init.bin"), "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        params = np.frombuffer(f.read(), "<f4")
    Vp = header[7]
    sizes = [("wte", (Vp, C)), ("wpe", (T, C)), ("ln1w", (L, C)), ("ln1b", (L, C)), ("qkvw", (L, 3 * C, C)),
             ("qkvb", (L, 3 * C)), ("attprojw", (L, C, C)), ("attprojb", (L, C)), ("ln2w", (L, C)),
             ("ln2b", (L, C)), ("fcw", (L, 4 * C, C)), ("fcb", (L, 4 * C)), ("fcprojw", (L, C, 4 * C)),
             ("fcprojb", (L, C)), ("lnfw", (C,)), ("lnfb", (C,))]
    llmc, at = {}, 0
    for key, shape in sizes:
        llmc[key] = params[at:at + int(np.prod(shape))].reshape(shape)
        at += int(np.prod(shape))
    pairs = [("transformer.wte.weight", llmc["wte"][:V]), ("transformer.wpe.weight", llmc["wpe"]),
             ("transformer.ln_f.weight", llmc["lnfw"]), ("transformer.ln_f.bias", llmc["lnfb"])]
    for l in range(L):
        p = "transformer.h.%d." % l
        pairs += [(p + "ln_1.weight", llmc["ln1w"][l]), (p + "ln_1.bias", llmc["ln1b"][l]),
                  (p + "attn.c_attn.weight", llmc["qkvw"][l].T), (p + "attn.c_attn.bias", llmc["qkvb"][l]),
                  (p + "attn.c_proj.weight", llmc["attprojw"][l].T), (p + "attn.c_proj.bias", llmc["attprojb"][l]),
                  (p + "ln_2.weight", llmc["ln2w"][l]), (p + "ln_2.bias", llmc["ln2b"][l]),
                  (p + "mlp.c_fc.weight", llmc["fcw"][l].T), (p + "mlp.c_fc.bias", llmc["fcb"][l]),
                  (p + "mlp.c_proj.weight", llmc["fcprojw"][l].T), (p + "mlp.c_proj.bias", llmc["fcprojb"][l])]
    differ = [n for n, values in pairs if not np.array_equal(tensors[n], values)]
    check(not differ, "%s: every tensor equals llm.c's export of the same weights, Conv1D's transposed %s"
          % (name, differ))


def config_checks(name, cfg, s):
    if s["family"] == "gpt":
        want = {"model_type": "gpt2", "vocab_size": s["V"], "n_positions": s["T"], "n_embd": s["C"],
                "n_layer": s["layers"], "n_head": 4, "n_inner": s["F"], "activation_function": "gelu_new",
                "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True}
    else:
        want = {"model_type": "llama", "vocab_size": s["V"], "hidden_size": s["C"], "intermediate_size": s["F"],
                "num_hidden_layers": s["layers"], "num_attention_heads": s["H"], "num_key_value_heads": s["KV"],
                "head_dim": s["D"], "rope_theta": 10000, "rms_norm_eps": 1e-5, "hidden_act": "silu",
                "tie_word_embeddings": s["tied"]}
    wrong = {k: (cfg.get(k), v) for k, v in want.items() if cfg.get(k) != v}
    check(not wrong, "%s: config.json states the model's sizes %s" % (name, wrong))


def crafted_weights(shapes, family, seed):
    """Weights large enough that every convention shows in the loss (at the
    initialisation's scale, attention is nearly uniform and the rotary pairs'
    order changes the loss by 1e-5 only): unit-variance activations, norm
    scales near one."""
    rng = np.random.default_rng(seed)
    weights = {}
    for name, shape in sorted(shapes.items()):
        if len(shape) == 1:
            scale, offset = 0.1, 1.0 if "norm" in name or "ln_" in name else 0.0
        elif "wte" in name or "wpe" in name or "embed_tokens" in name:
            scale, offset = 0.3, 0.0
        else:  # Conv1D holds (in, out), Linear (out, in)
            scale, offset = (shape[0] if family == "gpt" else shape[1]) ** -0.5, 0.0
        weights[name] = (offset + scale * rng.standard_normal(shape)).astype(np.float32)
    return weights


def model_checks(work, name, text, s):
    """The plan-independent checks of one model; returns (program, trained directory, config) or None."""
    small, big = generate(work, name, text), generate(work, name + "-big", text, *BIG_PLAN)
    if not (small and big):
        return None
    B, T = 2, s["T"]
    init = os.path.join(work, name + "-init")
    llmc = ["--export-llmc", os.path.join(work, name + "-init.bin")] if s["family"] == "gpt" else []
    r, loss = program_run(small, work, "--steps", "0", "--export-hf", init, *llmc)
    if not check(r.returncode == 0 and loss is not None, "%s: --steps 0 --export-hf writes a checkpoint" % name):
        print(r.stdout[-2000:] + r.stderr[-2000:])
        return None
    tensors, header, problems = read_safetensors(os.path.join(init, "model.safetensors"))
    check(not problems, "%s: the file is the safetensors layout exactly %s" % (name, problems))
    shapes = {n: list(v.shape) for n, v in tensors.items()}
    want = expected_shapes(**s)
    check(shapes == want, "%s: it holds transformers' tensors, names and shapes (extra %s, missing %s)"
          % (name, sorted(set(shapes) - set(want)), sorted(set(want) - set(shapes))))
    check(all(e["dtype"] == "F32" for n, e in header.items() if n != "__metadata__"), "%s: as F32" % name)
    with open(os.path.join(init, "config.json")) as f:
        cfg = json.load(f)
    config_checks(name, cfg, s)
    reference = reference_loss(tensors, cfg, s["family"], work, B, T, 4)
    check(relative(loss, reference) < LOSS_BOUND,
          "%s: a numpy forward after transformers' conventions gives the program's validation loss "
          "(%.9g, program %.9g)" % (name, reference, loss))
    library = transformers_loss(init, work, B, T, 4)
    if library is None:
        print("# %s: transformers and torch are not installed: loading with transformers not tried" % name)
    else:
        check(relative(library, loss) < LOSS_BOUND,
              "%s: transformers loads the directory and computes the program's loss (%.9g, program %.9g)"
              % (name, library, loss))
    if s["family"] == "gpt":
        llmc_matches(work, name, tensors, s)
    crafted, crafted_path = crafted_weights(want, s["family"], 5), os.path.join(work, name + "-crafted.safetensors")
    write_safetensors(crafted_path, crafted)
    reference = reference_loss(crafted, cfg, s["family"], work, B, T, 4)
    for plan, program in (("the model file's plan", small), ("tp 2 x pp 2 x dp 2", big)):
        out = os.path.join(work, "%s-crafted-%s" % (name, "big" if program == big else "small"))
        r, loss = program_run(program, work, "--steps", "0", "--init", crafted_path, "--export-hf", out)
        back = read_safetensors(os.path.join(out, "model.safetensors"))[0] if r.returncode == 0 else {}
        check(r.returncode == 0 and relative(loss, reference) < LOSS_BOUND,
              "%s: under %s, weights written here load and give the numpy forward's loss (%.9g, program %s)"
              % (name, plan, reference, loss))
        check(back.keys() == crafted.keys() and all(np.array_equal(back[n], crafted[n]) for n in crafted),
              "%s: under %s, they export back unchanged" % (name, plan))
    other = os.path.join(work, name + "-init-big")
    r, _ = program_run(big, work, "--steps", "0", "--export-hf", other)
    check(r.returncode == 0 and same_bytes(os.path.join(init, "model.safetensors"),
                                           os.path.join(other, "model.safetensors")),
          "%s: tp 2 x pp 2 x dp 2 with ZeRO-1 and sequence parallelism exports the same initial weights, "
          "byte for byte" % name)
    trained, reloaded = os.path.join(work, name + "-trained"), os.path.join(work, name + "-reloaded")
    r, _ = program_run(small, work, "--steps", "3", "--export-hf", trained)
    r2, loss2 = program_run(big, work, "--steps", "0", "--init", trained, "--export-hf", reloaded)
    if not check(r.returncode == 0 and r2.returncode == 0 and
                 same_bytes(os.path.join(trained, "model.safetensors"), os.path.join(reloaded, "model.safetensors")),
                 "%s: trained 3 steps under the model file's plan, loaded under tp 2 x pp 2 x dp 2 and exported: "
                 "byte-identical" % name):
        print(r.stderr[-2000:] + r2.stderr[-2000:])
        return None
    weights, _, _ = read_safetensors(os.path.join(trained, "model.safetensors"))
    reference = reference_loss(weights, cfg, s["family"], work, B, T, 4)
    check(relative(loss2, reference) < LOSS_BOUND,
          "%s: under tp 2 x pp 2 x dp 2 the loaded weights give the reference's loss (%.9g, program %.9g)"
          % (name, reference, loss2))
    return small, trained, cfg


def loads_back(work, program, trained, label, path):
    """--init path, then --export-hf: the trained file again, byte for byte?"""
    out = os.path.join(work, os.path.basename(path) + "-export")
    r, _ = program_run(program, work, "--steps", "0", "--init", path, "--export-hf", out)
    ok = r.returncode == 0 and same_bytes(os.path.join(trained, "model.safetensors"),
                                          os.path.join(out, "model.safetensors"))
    if not check(ok, label):
        print(r.stderr[-2000:])


def variant_checks(work, name, program, trained, cfg, s):
    """What transformers and the hub write besides this program's own files."""
    tensors, _, _ = read_safetensors(os.path.join(trained, "model.safetensors"))
    for dtype in ("BF16", "F16"):
        path = os.path.join(work, "%s-%s.safetensors" % (name, dtype))
        write_safetensors(path, tensors, dtype)
        r, loss = program_run(program, work, "--steps", "0", "--init", path)
        rounded = {n: as_dtype(v, dtype) for n, v in tensors.items()}
        reference = reference_loss(rounded, cfg, s["family"], work, 2, s["T"], 4)
        check(r.returncode == 0 and loss is not None and relative(loss, reference) < LOSS_BOUND,
              "%s: a %s file loads (loss %s, the reference on its rounded weights %.9g)" % (name, dtype, loss, reference))
    prefix = "transformer." if s["family"] == "gpt" else "model."
    path = os.path.join(work, name + "-base.safetensors")
    write_safetensors(path, tensors, names={n: n[len(prefix):] for n in tensors if n.startswith(prefix)})
    loads_back(work, program, trained, "%s: a base model's names (no %r prefix) load" % (name, prefix), path)
    shards = os.path.join(work, name + "-shards")
    os.makedirs(shards)
    names = sorted(tensors)
    files = {"model-00001-of-00002.safetensors": names[:len(names) // 2],
             "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    for file, part in files.items():
        write_safetensors(os.path.join(shards, file), {n: tensors[n] for n in part})
    with open(os.path.join(shards, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": {n: file for file, part in files.items() for n in part}}, f)
    loads_back(work, program, trained, "%s: a directory of two shards and their index loads" % name, shards)
    if s["family"] == "gpt":
        longer = dict(tensors)
        extra = np.random.default_rng(1).standard_normal((s["T"], s["C"])).astype(np.float32)
        longer["transformer.wpe.weight"] = np.concatenate([tensors["transformer.wpe.weight"], extra])
        path = os.path.join(work, name + "-longer.safetensors")
        write_safetensors(path, longer)
        loads_back(work, program, trained, "%s: a checkpoint of twice the context loads its first positions" % name,
                   path)


def refuses(work, program, label, path, phrase):
    r, _ = program_run(program, work, "--steps", "0", "--init", path)
    errors = [line for line in r.stderr.splitlines() if line.startswith("lynx: error:")]
    check(r.returncode == 1 and errors and phrase in errors[0],
          "--init refuses %s: exit %d, %s" % (label, r.returncode, errors[0] if errors else r.stderr[-300:]))


def hostile_checks(work, program, trained, other):
    good = os.path.join(trained, "model.safetensors")
    with open(good, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])

    def variant(label, data):
        path = os.path.join(work, "hostile-%s.safetensors" % label)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def with_header(changed):
        text = json.dumps(changed).encode()
        text += b" " * (-len(text) % 8)
        return struct.pack("<Q", len(text)) + text + blob[8 + n:]

    refuses(work, program, "a truncated file", variant("truncated", blob[:len(blob) * 2 // 3]), "past the end")
    refuses(work, program, "a header size past the end (nor an llm.c file: --init reads either)",
            variant("size", struct.pack("<Q", 1 << 40) + blob[8:]),
            "the file holds %d; nor is it llm.c's, whose first int32 is 20240326" % len(blob))
    refuses(work, program, "a header that is not JSON", variant("json", struct.pack("<Q", 8) + b"{nonsense" + blob[17:]),
            "not a JSON object")
    missing = dict(header)
    missing["transformer.ln_f.bias-renamed"] = missing.pop("transformer.ln_f.bias")
    refuses(work, program, "a missing tensor", variant("missing", with_header(missing)),
            "holds no tensor transformer.ln_f.bias")
    shape = json.loads(json.dumps(header))
    shape["transformer.h.0.ln_1.weight"]["shape"] = [32]
    refuses(work, program, "a wrong shape", variant("shape", with_header(shape)), "has 32 in dimension 0")
    dtype = json.loads(json.dumps(header))
    dtype["transformer.ln_f.weight"]["dtype"] = "I64"
    dtype["transformer.ln_f.weight"]["shape"] = [32]
    refuses(work, program, "an integer dtype", variant("dtype", with_header(dtype)), "reads F32, F16 and BF16")
    offsets = json.loads(json.dumps(header))
    offsets["transformer.ln_f.weight"]["data_offsets"] = [len(blob), len(blob) + 256]
    refuses(work, program, "offsets past the data", variant("offsets", with_header(offsets)), "past the end")
    # The tensors must cover the data exactly, each name once (the safetensors rule):
    # else a header size a few bytes short (the header's padding still parses) moves
    # every tensor, and overlapping or repeated entries load other weights.
    padded = json.dumps(header).encode()
    padded += b" " * (8 + -len(padded) % 8)
    refuses(work, program, "a header size 4 bytes short (its padding still parses)",
            variant("short", struct.pack("<Q", len(padded) - 4) + padded + blob[8 + n:]),
            "do not cover its data exactly")
    overlap = json.loads(json.dumps(header))
    overlap["transformer.ln_f.weight"]["data_offsets"] = header["transformer.h.0.ln_1.weight"]["data_offsets"]
    refuses(work, program, "two tensors on the same bytes", variant("overlap", with_header(overlap)),
            "do not cover its data exactly")
    text = json.dumps(header)
    twice = ('{"transformer.ln_f.weight": %s, ' % json.dumps(header["transformer.h.0.ln_1.weight"]) +
             text[1:]).encode()
    twice += b" " * (-len(twice) % 8)
    refuses(work, program, "a tensor named twice", variant("twice", struct.pack("<Q", len(twice)) + twice +
                                                            blob[8 + n:]), "names tensor transformer.ln_f.weight twice")
    nan = bytearray(blob)
    struct.pack_into("<f", nan, 8 + n + header["transformer.ln_f.weight"]["data_offsets"][0] + 4, float("nan"))
    refuses(work, program, "a NaN weight", variant("nan", bytes(nan)),
            "tensor transformer.ln_f.weight holds nan at element 1: weights must be finite")
    fifo = os.path.join(work, "hostile-fifo")
    os.makedirs(fifo)
    os.mkfifo(os.path.join(fifo, "pipe.safetensors"))
    with open(os.path.join(fifo, "model.safetensors.index.json"), "w") as f:
        json.dump({"weight_map": {name: "pipe.safetensors" for name in header}}, f)
    refuses(work, program, "an index naming a named pipe (without waiting for a writer)", fifo,
            "it is a named pipe, not a file")
    outside = os.path.join(work, "hostile-index")
    os.makedirs(outside)
    with open(os.path.join(outside, "model.safetensors.index.json"), "w") as f:
        json.dump({"weight_map": {n: "../model.safetensors" for n in header}}, f)
    refuses(work, program, "an index naming a file outside its directory", outside, "refuses")
    refuses(work, program, "a checkpoint of another architecture", other, "holds no tensor transformer.wte.weight")


def usage_checks(work, program, trained):
    """What is refused before step 1: an export directory that cannot be
    made, and a model that is neither transformers' GPT-2 nor its Llama (an
    untied GPT-2 has no GPT2LMHeadModel), for --export-hf and for --init."""
    blocker = os.path.join(work, "not-a-directory")
    with open(blocker, "w") as f:
        f.write("a file where the export's parent directory would be\n")
    metrics = os.path.join(program, "metrics.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    r, _ = program_run(program, work, "--steps", "1", "--export-hf", os.path.join(blocker, "hf"))
    errors = [line for line in r.stderr.splitlines() if "error" in line]
    check(r.returncode != 0 and any("--export-hf" in e and "cannot save there" in e for e in errors) and
          not os.path.exists(metrics),
          "--export-hf into a path that cannot be a directory stops the run before step 1: %s" % (
              errors[0] if errors else r.stderr[-300:]))
    untied = generate(work, "gpt-untied", GPT.replace(".tied_embeddings = 1", ".tied_embeddings = 0"))
    if untied is None:
        return
    for flag, path in (("--export-hf", os.path.join(work, "untied-hf")), ("--init", trained)):
        r, _ = program_run(untied, work, "--steps", "0", flag, path)
        check(r.returncode != 0 and "no Hugging Face checkpoint" in r.stderr,
              "an untied GPT-2 refuses %s: %s" % (flag, (r.stderr.strip().splitlines() or ["(no message)"])[-1]))


def main():
    if np is None:
        check(False, "numpy installed (scripts/deps.sh installs python3-numpy)")
        return
    if not os.path.exists(FORTUNES):
        check(False, "fortunes corpus installed (scripts/deps.sh installs fortunes-min)")
        return
    work = tempfile.mkdtemp(prefix="lynx-hf-")
    r = run([LYNXGEN, "tokenize", FORTUNES, "-o", os.path.join(work, "data")], work)
    check(r.returncode == 0, "lynxgen tokenize makes byte-level shards of fortunes")
    llama = dict(family="llama", layers=2, V=256, C=64, T=64, F=128, H=4, KV=2, D=16)
    models = [("gpt", GPT, dict(family="gpt", layers=2, V=256, C=64, T=32, F=256)),
              ("llama", LLAMA, dict(llama, tied=True)),
              ("llama-untied", LLAMA.replace(".tied_embeddings = 1", ".tied_embeddings = 0"), dict(llama, tied=False))]
    results = {name: (model_checks(work, name, text, s), s) for name, text, s in models}
    for name in ("gpt", "llama-untied"):
        result, s = results[name]
        if result:
            variant_checks(work, name, *result, s)
    if results["gpt"][0] and results["llama"][0]:
        hostile_checks(work, results["gpt"][0][0], results["gpt"][0][1], results["llama"][0][1])
        usage_checks(work, results["gpt"][0][0], results["gpt"][0][1])
    shutil.rmtree(work, ignore_errors=True)


main()
sys.exit(exit_status())
