/* included by tests/diag/config_in_header.model: its lr is NaN */
static const struct lx_training training = {.lr = 0.0 / 0.0};
