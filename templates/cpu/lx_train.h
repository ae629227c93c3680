/* lx_train.h — what every emitted stage program declares before its tables:
 * the parameter-table row. The training loop itself is lx_main.h, included
 * at the end of the stage file once its functions and tables exist. */
#ifndef LX_TRAIN_H
#define LX_TRAIN_H

typedef struct {
  const char *name;
  long long element;  /* first element in the params region */
  long long elements;
  double init_std;    /* > 0: normal(0, std); 0: the constant below */
  double init_value;
  int decay;          /* AdamW weight decay applies (weights, not biases or norms) */
  long long stream;   /* init random stream: names the parameter, whatever the stage */
  long long file_element; /* offset in llm.c's GPT-2 checkpoint, -1 if none */
  int writes_file;    /* this stage writes it when saving (a tied copy does not) */
  int tied;           /* the embedding table or the last stage's copy of it */
  /* Tensor parallelism: where this rank's elements sit in the whole tensor.
   * split 0: replicated, the rank holds all of it. split 1: `pieces` runs of
   * whole rows of `row_elements`; run k is rows
   * [piece_row[k] + tp_rank * piece_rows[k], ... + piece_rows[k]).
   * split 2: columns [tp_rank * row_elements, ... + row_elements) of every
   * row of `whole_row` elements. split 3: replicated, but each rank's
   * gradient is the part of its sequence shard (sequence parallelism). */
  int split;
  long long row_elements, whole_row;
  int pieces;
  long long piece_row[3], piece_rows[3];
} lx_param_tensor;

/* Gradients reduced across the dp replicas at once (gen/layout.h). */
typedef struct {
  long long first, elements; /* in the params region */
  long long shard_first;     /* ZeRO-1: this replica's share of their optimizer state */
} lx_param_bucket;

/* Blocking point-to-point, for the forward-only passes (validation, gradient
 * checks) that have no schedule to overlap with. */
static inline void lx_send(const real *buf, // (n)
                           int64_t n, int peer, int kind, int micro_batch) {
  MPI_Request request;
  lx_isend(buf, n, peer, kind, micro_batch, &request);
  lx_wait(&request);
}

static inline void lx_recv(real *buf, // (n)
                           int64_t n, int peer, int kind, int micro_batch) {
  MPI_Request request;
  lx_irecv(buf, n, peer, kind, micro_batch, &request);
  lx_wait(&request);
}

#endif
