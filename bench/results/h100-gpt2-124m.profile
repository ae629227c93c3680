# measured by the CUDA program of gpt2-124m-flash.model (B = 4, T = 1024), mean ms per micro-batch
# measured on an NVIDIA H100 80GB HBM3 (2026-11-26) by bench/gpu/device.sh's gpt2_profile step (the kit's
# program, run.sh --steps 4 --profile FILE: steps 2-4 timed); bench/README.md reads it
op embedding 4096 1 768 bf16 0.018740 0.030563  # prologue x (gpt2-124m-flash.model:63), stage 0, 24 + 24 launches
op position_embedding 4096 1 768 bf16 0.010313 0.013065  # prologue position_embedding_0 (gpt2-124m-flash.model:64), stage 0, 24 + 24 launches
op add 4096 768 768 bf16 0.011800 0.013008  # prologue x (gpt2-124m-flash.model:64), stage 0, 24 + 24 launches
op dropout 4096 768 768 bf16 0.013979 0.016481  # prologue dropout_0 (gpt2-124m-flash.model:65), stage 0, 24 + 24 launches
op layernorm 4096 768 768 bf16 0.016424 0.067341  # block h (gpt2-124m-flash.model:70), stage 0, 288 + 288 launches
op linear 4096 768 2304 bf16 0.028427 0.086199  # block qkv (gpt2-124m-flash.model:71), stage 0, 288 + 288 launches
op attention 4096 2304 768 bf16 0.064709 0.135861 seq=1024 heads=12 impl=flash  # block a (gpt2-124m-flash.model:72), stage 0, 288 + 288 launches
op linear 4096 768 768 bf16 0.013534 0.048583  # block linear_1 (gpt2-124m-flash.model:73), stage 0, 288 + 288 launches
op dropout 4096 768 768 bf16 0.013843 0.018177  # block a (gpt2-124m-flash.model:73), stage 0, 288 + 288 launches
op add 4096 768 768 bf16 0.021700 0.018160  # block x (gpt2-124m-flash.model:74), stage 0, 288 + 288 launches
op layernorm 4096 768 768 bf16 0.001318 0.068234  # block h (gpt2-124m-flash.model:75), stage 0, 288 + 288 launches
op linear 4096 768 3072 bf16 0.045939 0.102060  # block linear_2 (gpt2-124m-flash.model:76), stage 0, 288 + 288 launches
op gelu 4096 3072 3072 bf16 0.001334 0.001553  # block h (gpt2-124m-flash.model:76), stage 0, 288 + 288 launches
op linear 4096 3072 768 bf16 0.030958 0.129019  # block linear_3 (gpt2-124m-flash.model:77), stage 0, 288 + 288 launches
op dropout 4096 768 768 bf16 0.013931 0.015573  # block h (gpt2-124m-flash.model:77), stage 0, 288 + 288 launches
op add 4096 768 768 bf16 0.013284 0.017521  # block add_1 (gpt2-124m-flash.model:78), stage 0, 288 + 288 launches
op layernorm 4096 768 768 bf16 0.016423 0.068711  # epilogue layernorm_0 (gpt2-124m-flash.model:82), stage 0, 24 + 24 launches
op lm_head 4096 768 50304 bf16 0.454835 0.846628  # epilogue logits (gpt2-124m-flash.model:82), stage 0, 24 + 24 launches
op cross_entropy 4096 50304 1 bf16 0.666804 0.744320  # epilogue cross_entropy_0 (gpt2-124m-flash.model:83), stage 0, 24 + 24 launches
