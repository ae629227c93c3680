/* lx_params.h — the rows of the tables an emitted stage program of either
 * target prints (gen/emit/emit_operands.c, emit_param_table): every parameter
 * tensor of the stage and the gradient buckets of its params region. Valid
 * C11 and C++17. */
#ifndef LX_PARAMS_H
#define LX_PARAMS_H

typedef struct {
  const char *name;
  long long element; /* first element in the params region */
  long long elements;
  double init_std; /* > 0: normal(0, std); 0: the constant below */
  double init_value;
  int decay;              /* AdamW weight decay applies (weights, not biases or norms) */
  long long stream;       /* init random stream: names the parameter, whatever the stage */
  long long file_element; /* offset in llm.c's GPT-2 checkpoint, -1 if none */
  int writes_file;        /* this stage writes it when saving (a tied copy does not) */
  int tied;               /* the embedding table or the last stage's copy of it */
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

/* Gradients reduced across the dp replicas at once (gen/planning/layout.h). */
typedef struct {
  long long first, elements; /* in the params region */
  long long shard_first;     /* ZeRO-1: this replica's share of their optimizer state */
} lx_param_bucket;

#endif
