# measured by the CUDA program of gpt13b.model (B = 4, T = 2048), mean ms per micro-batch
# measured on an NVIDIA H100 80GB HBM3 by the program of `lynxgen examples/gpt13b.model --tp 1 --dp 1 --pp 1
# --global-batch 32` run with `./run.sh --steps 2 --profile FILE` (step 2 timed; the step took 26.2 s)
op embedding 8192 1 2048 bf16 0.051504 0.118652  # prologue x (gpt13b.model:57), stage 0, 8 + 8 launches
op position_embedding 8192 1 2048 bf16 0.027736 0.034016  # prologue position_embedding_0 (gpt13b.model:58), stage 0, 8 + 8 launches
op add 8192 2048 2048 bf16 0.058992 0.093420  # prologue x (gpt13b.model:58), stage 0, 8 + 8 launches
op dropout 8192 2048 2048 bf16 0.064568 0.086284  # prologue dropout_0 (gpt13b.model:59), stage 0, 8 + 8 launches
op layernorm 8192 2048 2048 bf16 0.062044 0.189052  # block h (gpt13b.model:64), stage 0, 192 + 192 launches
op linear 8192 2048 6144 bf16 0.280289 0.587304  # block qkv (gpt13b.model:65), stage 0, 192 + 192 launches
op attention 8192 6144 2048 bf16 86.653582 44.057810 seq=2048 heads=16 impl=materialized  # block a (gpt13b.model:66), stage 0, 192 + 192 launches
op linear 8192 2048 2048 bf16 0.094526 0.234498  # block linear_1 (gpt13b.model:67), stage 0, 192 + 192 launches
op dropout 8192 2048 2048 bf16 0.065424 0.087495  # block a (gpt13b.model:67), stage 0, 192 + 192 launches
op add 8192 2048 2048 bf16 0.058902 0.088701  # block x (gpt13b.model:68), stage 0, 192 + 192 launches
op layernorm 8192 2048 2048 bf16 0.061912 0.189105  # block h (gpt13b.model:69), stage 0, 192 + 192 launches
op linear 8192 2048 8192 bf16 0.353607 0.765846  # block linear_2 (gpt13b.model:70), stage 0, 192 + 192 launches
op gelu 8192 8192 8192 bf16 0.170252 0.238703  # block h (gpt13b.model:70), stage 0, 192 + 192 launches
op linear 8192 8192 2048 bf16 0.336489 0.803712  # block linear_3 (gpt13b.model:71), stage 0, 192 + 192 launches
op dropout 8192 2048 2048 bf16 0.064437 0.087674  # block h (gpt13b.model:71), stage 0, 192 + 192 launches
op add 8192 2048 2048 bf16 0.058588 0.092112  # block add_1 (gpt13b.model:72), stage 0, 192 + 192 launches
op layernorm 8192 2048 2048 bf16 0.061936 0.194728  # epilogue layernorm_0 (gpt13b.model:76), stage 0, 8 + 8 launches
op lm_head 8192 2048 50304 bf16 2.150828 4.090572  # epilogue logits (gpt13b.model:76), stage 0, 8 + 8 launches
op cross_entropy 8192 50304 1 bf16 1.301148 1.478776  # epilogue cross_entropy_0 (gpt13b.model:77), stage 0, 8 + 8 launches
