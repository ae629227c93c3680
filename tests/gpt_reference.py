"""A GPT-2 trained in float64 numpy, written here from the published model
and optimizer, independently of lynxgen: the reference that the training
tests hold the emitted programs to.

The model is llm.c's GPT-2 (the layout of its checkpoint file): learned
token and position embeddings, pre-norm blocks of causal multi-head
attention and a tanh-GELU MLP, a final layernorm and the LM head tied to the
token embedding; cross-entropy averaged over a micro-batch's tokens, and a
step's loss the mean of its micro-batches'. Dropout is not modelled (the
tests run without it). AdamW with bias correction, eps added to sqrt(v),
decoupled weight decay, a constant learning rate and no gradient clipping:
the settings the tests give their models, so no schedule or clip enters.

Data: the training windows of byte-level shards as lynx's loader takes them
(lx_data.h's format: a 256-int32 header, then uint16 or uint32 tokens):
window w of a shard is its tokens [w B T, w B T + B T], inputs the first
B T, targets the last; the windows of the shards (sorted by path) follow
each other, and the run takes them in order from window 0.

train(..., delay=0) is synchronous training; delay=1 is PipeDream-2BW's
delayed update, W(t+1) = W(t) - AdamW(gradient at W(t-1)), with W(-1) =
W(0): the first two steps take their gradients at the initial weights.

LoRA (Hu et al. 2021): `adapters` maps a block linear ("qkv", "attproj",
"fc", "fcproj") to its per-layer A (L, rank, in) and B (L, out, rank); the
linear computes x W^T + b + scale (d(x) A^T) B^T, d LoRA's dropout of the
adapter's input. Fine-tuning trains the adapters alone (every weight of `w`
frozen), LoRA-FA the Bs alone. The dropout masks are the programs' own:
lx_rng.h's counter-based generator (SplitMix64 of (seed, stream, index)) is
written again here, so the same seed draws the same masks.
"""
import glob
import struct

import numpy as np

GPT2_MAGIC, GPT2_FP32 = 20240326, 3
SHARD_MAGIC, SHARD_MAGIC_U32 = 20240520, 20240801
EPS_NORM = 1e-5
GELU_K = np.sqrt(2 / np.pi)


# ---- checkpoint (llm.c's order) -------------------------------------------------------

def shapes(seq, layers, channels, padded):
    C, L = channels, layers
    return [("wte", (padded, C)), ("wpe", (seq, C)), ("ln1w", (L, C)), ("ln1b", (L, C)),
            ("qkvw", (L, 3 * C, C)), ("qkvb", (L, 3 * C)), ("attprojw", (L, C, C)), ("attprojb", (L, C)),
            ("ln2w", (L, C)), ("ln2b", (L, C)), ("fcw", (L, 4 * C, C)), ("fcb", (L, 4 * C)),
            ("fcprojw", (L, C, 4 * C)), ("fcprojb", (L, C)), ("lnfw", (C,)), ("lnfb", (C,))]


def random_weights(seq, vocab, layers, channels, padded, seed):
    """Weights as GPT-2 draws them (std 0.02, layernorms near 1, small
    biases), rounded to float32 so that the file holds them exactly; the
    padded vocabulary rows are zero."""
    rng = np.random.default_rng(seed)
    w = {}
    for name, shape in shapes(seq, layers, channels, padded):
        if name.startswith("ln") and name.endswith("w"):
            value = 1 + 0.1 * rng.standard_normal(shape)
        elif name.endswith("b"):
            value = 0.02 * rng.standard_normal(shape)
        else:
            value = 0.02 * rng.standard_normal(shape)
        w[name] = value.astype(np.float32).astype(np.float64)
    w["wte"][vocab:] = 0
    return w


def write_checkpoint(path, w, seq, vocab, layers, heads, channels, padded):
    header = [GPT2_MAGIC, GPT2_FP32, seq, vocab, layers, heads, channels, padded] + [0] * 248
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        for name, _ in shapes(seq, layers, channels, padded):
            f.write(w[name].astype("<f4").tobytes())


# ---- data -------------------------------------------------------------------------------

def windows(pattern, B, T):
    """Every training window of the shards, in the loader's order: (inputs, targets), each (B, T)."""
    out = []
    for path in sorted(glob.glob(pattern)):
        with open(path, "rb") as f:
            header = struct.unpack("<256i", f.read(1024))
            dtype = "<u2" if header[0] == SHARD_MAGIC else "<u4"
            tokens = np.frombuffer(f.read(), dtype=dtype)[:header[2]].astype(np.int64)
        for w in range((len(tokens) - 1) // (B * T)):
            chunk = tokens[w * B * T: w * B * T + B * T + 1]
            out.append((chunk[:-1].reshape(B, T), chunk[1:].reshape(B, T)))
    return out


# ---- the model: forward with what backward needs, then backward ---------------------------

def layernorm(x, w, b):
    mean = x.mean(-1, keepdims=True)
    rstd = 1 / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + EPS_NORM)
    xhat = (x - mean) * rstd
    return xhat * w + b, (xhat, rstd, w)


def layernorm_back(dy, cache):
    xhat, rstd, w = cache
    dxhat = dy * w
    dx = rstd * (dxhat - dxhat.mean(-1, keepdims=True) - xhat * (dxhat * xhat).mean(-1, keepdims=True))
    return dx, (dy * xhat).sum((0, 1)), dy.sum((0, 1))


def linear_back(dy, x):
    """The weight and bias gradients of y = x W^T + b."""
    return dy.reshape(-1, dy.shape[-1]).T @ x.reshape(-1, x.shape[-1]), dy.sum((0, 1))


def gelu(x):
    t = np.tanh(GELU_K * (x + 0.044715 * x ** 3))
    return 0.5 * x * (1 + t), (x, t)


def gelu_back(dy, cache):
    x, t = cache
    return dy * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * GELU_K * (1 + 3 * 0.044715 * x * x))


def attention(qkv, heads):
    B, T, C3 = qkv.shape
    C = C3 // 3
    D = C // heads
    q, k, v = (qkv[..., i * C:(i + 1) * C].reshape(B, T, heads, D).transpose(0, 2, 1, 3) for i in range(3))
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(D)
    scores = np.where(np.tril(np.ones((T, T), bool)), scores, -np.inf)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    y = (p @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
    return y, (q, k, v, p, D)


def attention_back(dy, cache):
    q, k, v, p, D = cache
    B, H, T, _ = q.shape
    dy = dy.reshape(B, T, H, D).transpose(0, 2, 1, 3)
    dv = p.transpose(0, 1, 3, 2) @ dy
    dp = dy @ v.transpose(0, 1, 3, 2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True)) / np.sqrt(D)
    dq, dk = ds @ k, ds.transpose(0, 1, 3, 2) @ q
    return np.concatenate([g.transpose(0, 2, 1, 3).reshape(B, T, H * D) for g in (dq, dk, dv)], -1)


# ---- the programs' random numbers (templates/common/lx_rng.h) -------------------------------

MASK64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15


def mix64(z):
    """SplitMix64's output function, on a Python int or a numpy uint64 array (both wrap at 2^64)."""
    if isinstance(z, int):
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def rng_stream(step, micro_batch, layer, op):
    h = mix64((step + GAMMA) & MASK64)
    h = mix64(h ^ ((micro_batch + 2 * GAMMA) & MASK64))
    h = mix64(h ^ ((layer + 3 * GAMMA) & MASK64))
    return mix64(h ^ ((op + 4 * GAMMA) & MASK64))


def dropout_keep(seed, stream, index, p):
    """The keep decision of each element of `index` (a uint64 array), as lx_dropout_keep takes it."""
    key = mix64((mix64((seed + GAMMA) & MASK64) + stream * 0xD1B54A32D192ED03) & MASK64)
    with np.errstate(over="ignore"):
        bits = mix64(np.uint64(key) + (index + np.uint64(1)) * np.uint64(GAMMA))
    return (bits >> np.uint64(32)) >= np.uint64(int(p * 4294967296.0))


def adapted(x, w, name, l, adapters, scale, keep=None):
    """Block linear `name` of layer l: x W^T + b, plus its adapter's scale (d(x) A^T) B^T,
    d scaling x by `keep` (the kept elements' 1 / (1 - p), the dropped 0) where given."""
    y = x @ w[name + "w"][l].T + w[name + "b"][l]
    if adapters and name in adapters:
        a, b = adapters[name]
        xd = x * keep(name, l, x.shape) if keep else x
        y = y + scale * (xd @ a[l].T) @ b[l].T
    return y


def adapted_back(dy, x, w, name, l, adapters, scale, grads, adapter_grads, keep=None):
    """The input gradient of adapted(); the weight, bias and adapter gradients into grads and adapter_grads."""
    grads[name + "w"][l], grads[name + "b"][l] = linear_back(dy, x)
    dx = dy @ w[name + "w"][l]
    if adapters and name in adapters:
        a, b = adapters[name]
        da, db = adapter_grads[name]
        d = keep(name, l, x.shape) if keep else 1.0
        u = (x * d) @ a[l].T
        du = scale * dy @ b[l]
        db[l] = scale * dy.reshape(-1, dy.shape[-1]).T @ u.reshape(-1, u.shape[-1])
        da[l] = du.reshape(-1, du.shape[-1]).T @ (x * d).reshape(-1, x.shape[-1])
        dx = dx + (du @ a[l]) * d
    return dx


def loss_and_gradients(w, inputs, targets, heads, vocab, adapters=None, scale=0.0, keep=None):
    """The mean cross-entropy of one micro-batch and its gradient w.r.t. every
    weight (and with adapters, a third result: theirs, as (dA, dB) by name).
    keep(name, layer, shape): the scale of each element of an adapter's input
    under LoRA's dropout, or None without it."""
    B, T = inputs.shape
    L = w["qkvw"].shape[0]
    x = w["wte"][inputs] + w["wpe"][:T]
    caches = []
    for l in range(L):
        h1, c1 = layernorm(x, w["ln1w"][l], w["ln1b"][l])
        qkv = adapted(h1, w, "qkv", l, adapters, scale, keep)
        a, ca = attention(qkv, heads)
        x2 = x + adapted(a, w, "attproj", l, adapters, scale, keep)
        h2, c2 = layernorm(x2, w["ln2w"][l], w["ln2b"][l])
        f = adapted(h2, w, "fc", l, adapters, scale, keep)
        g, cg = gelu(f)
        x3 = x2 + adapted(g, w, "fcproj", l, adapters, scale, keep)
        caches.append((h1, c1, a, ca, h2, c2, g, cg))
        x = x3
    hf, cf = layernorm(x, w["lnfw"], w["lnfb"])
    logits = hf @ w["wte"][:vocab].T
    z = logits - logits.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    rows = np.arange(B)[:, None], np.arange(T)[None, :]
    loss = -logp[rows[0], rows[1], targets].mean()

    grads = {name: np.zeros_like(value) for name, value in w.items()}
    adapter_grads = {name: (np.zeros_like(a), np.zeros_like(b)) for name, (a, b) in (adapters or {}).items()}
    dlogits = np.exp(logp)
    dlogits[rows[0], rows[1], targets] -= 1
    dlogits /= B * T
    grads["wte"][:vocab] += dlogits.reshape(-1, vocab).T @ hf.reshape(-1, hf.shape[-1])
    dx, grads["lnfw"], grads["lnfb"] = layernorm_back(dlogits @ w["wte"][:vocab], cf)
    for l in reversed(range(L)):
        h1, c1, a, ca, h2, c2, g, cg = caches[l]
        back = (w, l, adapters, scale, grads, adapter_grads, keep)
        df = gelu_back(adapted_back(dx, g, back[0], "fcproj", *back[1:]), cg)
        dh2, grads["ln2w"][l], grads["ln2b"][l] = layernorm_back(adapted_back(df, h2, back[0], "fc", *back[1:]), c2)
        dx = dx + dh2
        dqkv = attention_back(adapted_back(dx, a, back[0], "attproj", *back[1:]), ca)
        dh1, grads["ln1w"][l], grads["ln1b"][l] = layernorm_back(adapted_back(dqkv, h1, back[0], "qkv", *back[1:]), c1)
        dx = dx + dh1
    np.add.at(grads["wte"], inputs, dx)
    grads["wpe"][:T] += dx.sum(0)
    if adapters is not None:
        return loss, grads, adapter_grads
    return loss, grads


# ---- training ------------------------------------------------------------------------------

def adamw(w, g, m, v, step, lr, beta1, beta2, eps, weight_decay):
    """One AdamW step of every tensor in place (step counts from 1)."""
    for name in w:
        m[name] = beta1 * m[name] + (1 - beta1) * g[name]
        v[name] = beta2 * v[name] + (1 - beta2) * g[name] ** 2
        m_hat, v_hat = m[name] / (1 - beta1 ** step), v[name] / (1 - beta2 ** step)
        w[name] = w[name] - lr * (m_hat / (np.sqrt(v_hat) + eps) + weight_decay * w[name])


def train(w0, data, steps, micro_batches, heads, vocab, lr, beta1, beta2, eps, weight_decay=0.0, delay=0):
    """Per-step losses. delay 0: synchronous; 1: each step's gradient is taken
    at the weights before the last update (PipeDream-2BW)."""
    live = {name: value.copy() for name, value in w0.items()}
    versions = [live]  # the weights of the last `delay` + 1 updates, oldest first
    m = {name: np.zeros_like(value) for name, value in w0.items()}
    v = {name: np.zeros_like(value) for name, value in w0.items()}
    losses = []
    for step in range(1, steps + 1):
        used = versions[0]
        total, grads = 0.0, {name: np.zeros_like(value) for name, value in w0.items()}
        for j in range(micro_batches):
            inputs, targets = data[((step - 1) * micro_batches + j) % len(data)]
            loss, g = loss_and_gradients(used, inputs, targets, heads, vocab)
            total += loss / micro_batches
            for name in grads:
                grads[name] += g[name] / micro_batches
        losses.append(total)
        updated = {name: value.copy() for name, value in versions[-1].items()}
        adamw(updated, grads, m, v, step, lr, beta1, beta2, eps, weight_decay)
        versions.append(updated)
        if len(versions) > delay + 1:
            versions.pop(0)
    return losses


def lora_keep(p, seed, step, micro_batch, ops):
    """keep() of loss_and_gradients for LoRA's dropout p in a step's micro-batch: the
    mask of adapter `name` of layer l is drawn from stream (step, micro_batch, l + 1,
    ops[name]), the linear's index among the block's ops, element (r, c) from counter
    r * width + c."""
    def keep(name, l, shape):
        width = shape[-1]
        index = np.arange(int(np.prod(shape)), dtype=np.uint64)
        kept = dropout_keep(seed, rng_stream(step, micro_batch, l + 1, ops[name]), index, p)
        return (kept / (1 - p)).reshape(shape)
    return keep


def lora_train(w, adapters0, data, steps, micro_batches, heads, vocab, lr, beta1, beta2, eps, scale, fa=False,
               dropout=None, delay=0):
    """Per-step losses of fine-tuning: w frozen, the adapters trained (LoRA-FA:
    their Bs alone) by AdamW without weight decay; and the adapters at the end.
    dropout: (p, seed, ops) for LoRA's dropout (lora_keep), or None; delay as
    train()'s (1: PipeDream-2BW's update, the frozen weights have one version)."""
    live = {}
    for name, (a, b) in adapters0.items():
        if not fa:
            live[name + ".a"] = a.copy()
        live[name + ".b"] = b.copy()
    versions = [live]  # the adapters of the last `delay` + 1 updates, oldest first
    m = {name: np.zeros_like(value) for name, value in live.items()}
    v = {name: np.zeros_like(value) for name, value in live.items()}
    def adapters(trained):
        return {name: (trained.get(name + ".a", adapters0[name][0]), trained[name + ".b"]) for name in adapters0}
    losses = []
    for step in range(1, steps + 1):
        total, grads = 0.0, {name: np.zeros_like(value) for name, value in live.items()}
        for j in range(micro_batches):
            inputs, targets = data[((step - 1) * micro_batches + j) % len(data)]
            keep = lora_keep(dropout[0], dropout[1], step, j, dropout[2]) if dropout else None
            loss, _, g = loss_and_gradients(w, inputs, targets, heads, vocab, adapters(versions[0]), scale, keep)
            total += loss / micro_batches
            for name in grads:
                grads[name] += g[name[:-2]][0 if name.endswith(".a") else 1] / micro_batches
        losses.append(total)
        updated = {name: value.copy() for name, value in versions[-1].items()}
        adamw(updated, grads, m, v, step, lr, beta1, beta2, eps, 0.0)
        versions.append(updated)
        if len(versions) > delay + 1:
            versions.pop(0)
    return losses, adapters(versions[-1])
