"""GPT-2 124M training speed in PyTorch on a GPU, the way nanoGPT's train.py
runs on a modern GPU: bf16 autocast, F.scaled_dot_product_attention with
is_causal=True (flash attention), fused AdamW, torch.compile(model), TF32
matmuls allowed. 12 layers, 768 wide, 12 heads, sequence 1024, vocabulary
50304 (50257 padded as nanoGPT does), dropout 0, micro-batch B with gradient
accumulation to 32768 tokens per step, lr 6e-4, weight decay 0.1 on the 2-D
weights, gradient clipping at 1.0. A baseline beside lynxgen's CUDA target and
llm.c (bench/gpu/llmc_gpt2.sh).

The model and the llm.c shard reader are bench/pytorch_gpt2.py's (the CPU
baseline); only the attention is replaced, by nanoGPT's flash path. Only the
first shard matching --data is read (whole, into memory), its windows cycled.

usage: python3 pytorch_gpt2_cuda.py --data GLOB --steps N --micro-batch B
                                    [--skip 3] [--no-compile] [--tiny]
Prints one line per step and, last, "pytorch_tok_s X": tokens/s over the steps
after the first --skip, the clock read after torch.cuda.synchronize().
Without a GPU it runs on the CPU; --tiny (2 layers, 64 wide, 4 heads,
sequence 64, 2 micro-batches per step) makes that quick enough to check."""
import argparse
import glob
import os
import sys
import time

import torch
from torch.nn import functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import pytorch_gpt2 as cpu  # noqa: E402  (bench/pytorch_gpt2.py)


class CausalSelfAttention(cpu.CausalSelfAttention):
    """nanoGPT's attention with flash: SDPA, causal, no mask buffer."""

    def __init__(self, n_embd, n_head, block_size):
        super().__init__(n_embd, n_head, block_size)
        del self.bias

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                   for t in self.c_attn(x).split(C, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


cpu.CausalSelfAttention = CausalSelfAttention  # cpu.Block builds its attention by this name


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--micro-batch", type=int, required=True)
    ap.add_argument("--skip", type=int, default=3)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--tiny", action="store_true")
    args = ap.parse_args()
    B = args.micro_batch
    layers, heads, hidden, T, total = (2, 4, 64, 64, 2 * B * 64) if args.tiny else (12, 12, 768, 1024, 32768)
    if B <= 0 or total % (B * T):
        sys.exit(f"--micro-batch {B}: B*{T} must divide {total}")
    if args.steps <= args.skip:
        sys.exit(f"--steps {args.steps} must exceed --skip {args.skip}")
    accum = total // (B * T)
    paths = sorted(glob.glob(args.data))
    if not paths:
        sys.exit(f"no files match {args.data}")

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(1337)
    torch.set_float32_matmul_precision("high")  # TF32 matmuls
    torch.backends.cudnn.allow_tf32 = True
    model = cpu.GPT(50304, T, layers, heads, hidden).to(device)
    model.train()
    params = list(model.parameters())
    optimizer = torch.optim.AdamW(
        [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
         {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
        lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=device == "cuda")
    if not args.no_compile:
        model = torch.compile(model)
    autocast = torch.autocast(device_type=device, dtype=torch.bfloat16)

    data = cpu.batches(paths[:1], B, T)

    def next_batch():
        x, y = next(data)
        if device == "cuda":
            return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
        return x, y

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    print(f"pytorch {torch.__version__} on {name}, {sum(p.numel() for p in params)} parameters, "
          f"L={layers} C={hidden} T={T} B={B} x {accum} micro-batches = {total} tokens/step, "
          f"compile={not args.no_compile}, data {paths[0]}", flush=True)
    times = []
    x, y = next_batch()
    for step in range(1, args.steps + 1):
        sync()
        t0 = time.perf_counter()
        loss_sum = torch.zeros((), device=device)
        for _ in range(accum):
            with autocast:
                loss = model(x, y) / accum
            x, y = next_batch()  # as nanoGPT: fetch the next batch while the GPU works
            loss.backward()
            loss_sum += loss.detach()
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        sync()
        dt = time.perf_counter() - t0
        times.append(dt)
        print(f"step {step:4d}/{args.steps} | loss {loss_sum.item():.6f} | norm {norm.item():.4f} | "
              f"{dt * 1e3:.2f} ms | {total / dt:.0f} tok/s", flush=True)
    steady = times[args.skip:]
    print(f"pytorch_step_ms {1e3 * sum(steady) / len(steady):.2f}")
    print(f"pytorch_tok_s {total * len(steady) / sum(steady):.0f}")


if __name__ == "__main__":
    main()
