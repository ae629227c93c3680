/* included by tests/diag/unknown_config_in_header.model */
struct lx_optimizer {
  int kind;
};
static const struct lx_optimizer optimizer = {1};
