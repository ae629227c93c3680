# measured by the CUDA program of gpt2-124m-flash.model (B = 4, T = 1024), mean ms per micro-batch
# measured on an NVIDIA H100 80GB HBM3 (2026-11-26, the vectorised loss and column-reduction kernels) by bench/gpu/device.sh's gpt2_profile step
# (the kit's program, run.sh --steps 4 --profile FILE: steps 2-4 timed); bench/README.md reads it
op embedding 4096 1 768 bf16 0.019083 0.030079  # prologue x (gpt2-124m-flash.model:63), stage 0, 24 + 24 launches
op position_embedding 4096 1 768 bf16 0.009444 0.013229  # prologue position_embedding_0 (gpt2-124m-flash.model:64), stage 0, 24 + 24 launches
op add 4096 768 768 bf16 0.011695 0.012524  # prologue x (gpt2-124m-flash.model:64), stage 0, 24 + 24 launches
op layernorm 4096 768 768 bf16 0.016437 0.044084  # block h (gpt2-124m-flash.model:70), stage 0, 288 + 288 launches
op linear 4096 768 2304 bf16 0.028461 0.064956  # block qkv (gpt2-124m-flash.model:71), stage 0, 288 + 288 launches
op attention 4096 2304 768 bf16 0.031220 0.116847 seq=1024 heads=12 impl=flash  # block a (gpt2-124m-flash.model:72), stage 0, 288 + 288 launches
op linear 4096 768 768 bf16 0.013615 0.036371  # block a (gpt2-124m-flash.model:73), stage 0, 288 + 288 launches
op add 4096 768 768 bf16 0.022117 0.018173  # block x (gpt2-124m-flash.model:74), stage 0, 288 + 288 launches
op layernorm 4096 768 768 bf16 0.001339 0.044555  # block h (gpt2-124m-flash.model:75), stage 0, 288 + 288 launches
op linear 4096 768 3072 bf16 0.045807 0.080573  # block linear_2 (gpt2-124m-flash.model:76), stage 0, 288 + 288 launches
op gelu 4096 3072 3072 bf16 0.001328 0.001610  # block h (gpt2-124m-flash.model:76), stage 0, 288 + 288 launches
op linear 4096 3072 768 bf16 0.031068 0.104751  # block h (gpt2-124m-flash.model:77), stage 0, 288 + 288 launches
op add 4096 768 768 bf16 0.013450 0.017657  # block add_1 (gpt2-124m-flash.model:78), stage 0, 288 + 288 launches
op layernorm 4096 768 768 bf16 0.016452 0.044453  # epilogue layernorm_0 (gpt2-124m-flash.model:82), stage 0, 24 + 24 launches
op lm_head 4096 768 50304 bf16 0.454071 0.846316  # epilogue logits (gpt2-124m-flash.model:82), stage 0, 24 + 24 launches
op cross_entropy 4096 50304 1 bf16 0.161964 0.427343  # epilogue cross_entropy_0 (gpt2-124m-flash.model:83), stage 0, 24 + 24 launches
