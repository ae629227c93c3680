"""PyTorch's scaled_dot_product_attention on the sizes of attention_lynx.cu.

Causal, bf16, layout (B, H, T, D), forward alone and forward + backward
(out.backward(dout)), once with the FlashAttention-2 backend alone ("fa2"),
once with cuDNN's ("cudnn") and once with cuDNN's under
torch.use_deterministic_algorithms ("cudnn-deterministic": lynxgen asks cuDNN
for its deterministic backward, so this is the like-for-like row; where
PyTorch has no deterministic kernel for it, the row says "unsupported" and
does not fail the run). Sizes: D in {64, 128}, T in {1024, 2048, 4096,
8192}, B * T = 16384 tokens, H * D = 2048. Inputs and dout random in (-1, 1).
3 warm-up iterations, then the median of 10 timed with CUDA events (the
freeing of the previous gradients is not timed); then, untimed, whether a
second forward + backward gives the same gradient bits ("bitwise_repeatable").

FLOPs (the PyTorch / FlashAttention causal convention): forward =
4 * B * H * T * T * D / 2, backward = 2.5 x forward, forward + backward =
3.5 x forward. One JSON line per (backend, seq, head_dim); an "error" line
where a size or backend fails (exit status 1); "skipped: no GPU" without CUDA.
"""
import json
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SEQS = (1024, 2048, 4096, 8192)
HEAD_DIMS = (64, 128)
TOKENS = 16384  # B * T
WIDTH = 2048  # H * D
WARMUP, ITERS = 3, 10
BACKENDS = (("fa2", SDPBackend.FLASH_ATTENTION, False), ("cudnn", SDPBackend.CUDNN_ATTENTION, False),
            ("cudnn-deterministic", SDPBackend.CUDNN_ATTENTION, True))


def median_ms(step, before=lambda: None):
    """Median of ITERS timed calls of step(), after WARMUP; before() runs untimed."""
    times = []
    for i in range(WARMUP + ITERS):
        before()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        stop.record()
        stop.synchronize()
        if i >= WARMUP:
            times.append(start.elapsed_time(stop))
    return statistics.median(times)


def bench(backend, B, H, T, D):
    def rand(*shape, grad=False):
        x = torch.empty(*shape, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1)
        return x.requires_grad_(grad)

    q, k, v = (rand(B, H, T, D, grad=True) for _ in range(3))
    dout = rand(B, H, T, D)
    outs = []

    def forward():
        outs[:] = [F.scaled_dot_product_attention(q, k, v, is_causal=True)]

    def forward_backward():
        forward()
        outs[0].backward(dout)

    def clear_grads():
        q.grad = k.grad = v.grad = None

    with sdpa_kernel(backend):
        fwd_ms = median_ms(forward)
        fwd_bwd_ms = median_ms(forward_backward, clear_grads)
        for name, x in (("out", outs[0]), ("dq", q.grad), ("dk", k.grad), ("dv", v.grad)):
            if not torch.isfinite(x).all():
                raise RuntimeError(f"{name} has non-finite values")
        first = [x.clone() for x in (q.grad, k.grad, v.grad)]
        clear_grads()
        forward_backward()
        repeatable = all(torch.equal(a, b) for a, b in zip(first, (q.grad, k.grad, v.grad)))
    return fwd_ms, fwd_bwd_ms, repeatable


def main():
    if not torch.cuda.is_available():
        print("skipped: no GPU")
        return 0
    device = torch.cuda.get_device_name()
    failures = 0
    for impl, backend, deterministic in BACKENDS:
        for D in HEAD_DIMS:
            for T in SEQS:
                B, H = TOKENS // T, WIDTH // D
                row = {"impl": impl, "device": device, "seq": T, "head_dim": D}
                torch.use_deterministic_algorithms(deterministic)
                try:
                    fwd_ms, fwd_bwd_ms, repeatable = bench(backend, B, H, T, D)
                    fwd_flops = 4 * B * H * T * T * D / 2
                    row.update(batch=B, heads=H, fwd_ms=round(fwd_ms, 4), fwd_bwd_ms=round(fwd_bwd_ms, 4),
                               fwd_tflops=round(fwd_flops / fwd_ms / 1e9, 3),
                               fwd_bwd_tflops=round(3.5 * fwd_flops / fwd_bwd_ms / 1e9, 3),
                               bitwise_repeatable=repeatable)
                except Exception as e:  # a refused shape, no kernel for the backend, out of memory
                    failures += not deterministic
                    row["unsupported" if deterministic else "error"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
                torch.use_deterministic_algorithms(False)
                torch.cuda.empty_cache()
                print(json.dumps(row), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
