# measured by the CUDA program of gpt13b-flash.model (B = 4, T = 2048), mean ms per micro-batch
# measured on an NVIDIA H100 80GB HBM3 (2026-11-26) by bench/gpu/device.sh's gpt13b_profile step (the kit's
# program, run.sh --steps 4 --profile FILE: steps 2-4 timed); bench/README.md reads it
op embedding 8192 1 2048 bf16 0.052917 0.121731  # prologue x (gpt13b-flash.model:57), stage 0, 24 + 24 launches
op position_embedding 8192 1 2048 bf16 0.029428 0.062876  # prologue position_embedding_0 (gpt13b-flash.model:58), stage 0, 24 + 24 launches
op add 8192 2048 2048 bf16 0.060957 0.096433  # prologue x (gpt13b-flash.model:58), stage 0, 24 + 24 launches
op dropout 8192 2048 2048 bf16 0.070545 0.089839  # prologue dropout_0 (gpt13b-flash.model:59), stage 0, 24 + 24 launches
op layernorm 8192 2048 2048 bf16 0.066576 0.197458  # block h (gpt13b-flash.model:64), stage 0, 576 + 576 launches
op linear 8192 2048 6144 bf16 0.298457 0.616676  # block qkv (gpt13b-flash.model:65), stage 0, 576 + 576 launches
op attention 8192 6144 2048 bf16 0.329835 0.660140 seq=2048 heads=16 impl=flash  # block a (gpt13b-flash.model:66), stage 0, 576 + 576 launches
op linear 8192 2048 2048 bf16 0.101794 0.250725  # block linear_1 (gpt13b-flash.model:67), stage 0, 576 + 576 launches
op dropout 8192 2048 2048 bf16 0.071103 0.091147  # block a (gpt13b-flash.model:67), stage 0, 576 + 576 launches
op add 8192 2048 2048 bf16 0.088736 0.091998  # block x (gpt13b-flash.model:68), stage 0, 576 + 576 launches
op layernorm 8192 2048 2048 bf16 0.001338 0.197342  # block h (gpt13b-flash.model:69), stage 0, 576 + 576 launches
op linear 8192 2048 8192 bf16 0.430552 0.796184  # block linear_2 (gpt13b-flash.model:70), stage 0, 576 + 576 launches
op gelu 8192 8192 8192 bf16 0.001335 0.001511  # block h (gpt13b-flash.model:70), stage 0, 576 + 576 launches
op linear 8192 8192 2048 bf16 0.353094 0.867147  # block linear_3 (gpt13b-flash.model:71), stage 0, 576 + 576 launches
op dropout 8192 2048 2048 bf16 0.069878 0.091186  # block h (gpt13b-flash.model:71), stage 0, 576 + 576 launches
op add 8192 2048 2048 bf16 0.060773 0.094969  # block add_1 (gpt13b-flash.model:72), stage 0, 576 + 576 launches
op layernorm 8192 2048 2048 bf16 0.066805 0.201676  # epilogue layernorm_0 (gpt13b-flash.model:76), stage 0, 24 + 24 launches
op lm_head 8192 2048 50304 bf16 2.212676 4.235772  # epilogue logits (gpt13b-flash.model:76), stage 0, 24 + 24 launches
op cross_entropy 8192 50304 1 bf16 1.347011 1.490279  # epilogue cross_entropy_0 (gpt13b-flash.model:77), stage 0, 24 + 24 launches
