/* included by tests/diag/second_config_in_header.model, which has its own cluster */
static const struct lx_cluster cluster0 = {.gpu = GPU_H100_80GB, .gpus_per_node = 8};
