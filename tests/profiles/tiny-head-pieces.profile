# A what-if for examples/tiny.model at tp 2: an attention whose forward takes
# 100 us against tensor-parallel all-reduces of about 80 us (40 us a step), so
# that lynx-heu on 2 MiB GPUs cuts the attention's recomputation into two
# pieces of its kv heads, each in an all-reduce window of its own
# (lx_attention_forward_heads). Used by tests/cuda_emit_test.sh and
# tests/trace_test.py (lynxgen --profile).
op attention 128 96 32 fp32 0.1 0.15 seq=64 heads=2 impl=materialized
link nvlink3 235 40
