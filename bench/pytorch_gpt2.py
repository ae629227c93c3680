"""GPT-2 training steps in PyTorch, written the way nanoGPT (karpathy/nanoGPT,
model.py and train.py) writes them: one nn.Linear per weight, causal
self-attention with an explicit mask (torch 1.13 has no
scaled_dot_product_attention), GELU MLP, pre-LayerNorm blocks, the lm_head
tied to the token embedding, torch.optim.AdamW with decay on the 2-D weights
only, gradient clipping at 1.0. Dropout 0.

Reads llm.c token shards (256-int32 header, then uint16 tokens) and cuts
them into batches as the lynxgen CPU program does (templates/common/lx_data.h):
window w is the B*T+1 tokens starting at w*B*T, inputs its first B*T and
targets its last B*T.

usage: /usr/bin/python3 pytorch_gpt2.py --data GLOB --steps N [--threads 2]
Prints one line per step and, last, "tokens_per_s X" over the steps after
the first --skip (default 2)."""
import argparse
import glob
import math
import struct
import sys
import time
from array import array

import torch
import torch.nn as nn
from torch.nn import functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.register_buffer(
            "bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            h=nn.ModuleList([Block(n_embd, n_head, block_size) for _ in range(n_layer)]),
            ln_f=nn.LayerNorm(n_embd),
        ))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        logits = self.lm_head(x)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    def configure_optimizers(self, weight_decay, learning_rate, betas, eps):
        params = [p for p in self.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2]
        nodecay = [p for p in params if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": weight_decay}, {"params": nodecay, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, eps=eps)


def read_shard(path):
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        if header[0] != 20240520 or header[1] != 1:
            sys.exit(f"{path}: not an llm.c token shard (magic {header[0]}, version {header[1]})")
        tokens = array("H")
        tokens.frombytes(f.read(2 * header[2]))
    if sys.byteorder != "little":
        tokens.byteswap()
    return tokens


def batches(paths, B, T):
    windows = []
    for path in paths:
        tokens = read_shard(path)
        for w in range((len(tokens) - 1) // (B * T)):
            windows.append(tokens[w * B * T: w * B * T + B * T + 1])
    if not windows:
        sys.exit("no window of B*T+1 tokens in the data")
    while True:
        for win in windows:
            buf = torch.tensor(list(win), dtype=torch.long)
            yield buf[:-1].view(B, T), buf[1:].view(B, T)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--skip", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1234)
    paths = sorted(glob.glob(args.data))
    if not paths:
        sys.exit(f"no files match {args.data}")
    model = GPT(args.vocab, args.seq, args.layers, args.heads, args.hidden)
    model.train()
    optimizer = model.configure_optimizers(0.1, 6e-4, (0.9, 0.95), 1e-8)
    data = batches(paths, args.batch, args.seq)
    params = sum(p.numel() for p in model.parameters())
    print(f"pytorch {torch.__version__}, {torch.get_num_threads()} threads, {params} parameters, "
          f"B={args.batch} T={args.seq}", flush=True)
    times = []
    for step in range(1, args.steps + 1):
        x, y = next(data)
        t0 = time.perf_counter()
        loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        dt = time.perf_counter() - t0
        times.append(dt)
        print(f"step {step:5d}/{args.steps} | loss {loss.item():.6f} | norm {norm.item():.4f} | "
              f"{dt * 1e3:.1f} ms | {args.batch * args.seq / dt:.0f} tok/s", flush=True)
    steady = times[args.skip:] or times
    print(f"tokens_per_s {args.batch * args.seq * len(steady) / sum(steady):.2f}")
    print(f"step_ms {1e3 * sum(steady) / len(steady):.2f}")


if __name__ == "__main__":
    main()
