/* included by tests/diag/valid/config_in_header.model: the model's configuration and constants */
#define VOCAB 512
#define HIDDEN 64
#define HEADS 4
#define FFN (4 * HIDDEN)
static const struct lx_model model = {
    .vocab = VOCAB, .seq_len = 64, .layers = 2, .hidden = HIDDEN, .heads = HEADS};
