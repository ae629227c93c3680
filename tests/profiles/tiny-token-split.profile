# A what-if for examples/tiny.model at tp 2 (and the tests' GPTs of hidden 64): a
# gelu that takes 50 us each way and a host link of 0.44 GB/s, under which a
# whole copy of the gelu's 64 KiB output outlasts a layer's forward, and lynx-heu
# offloads part of a tensor's rows and recomputes the rest (token-wise, MEMO).
# Used by tests/trace_test.py and tests/cuda_emit_test.sh (lynxgen --profile).
op gelu 128 128 128 fp32 0.05 0.05
host 0.44
