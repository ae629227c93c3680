/* lx_params.h — the rows of the tables an emitted stage program of either
 * target prints (gen/emit/emit_operands.c, emit_param_table): every parameter
 * tensor of the stage, the gradient buckets of its params region, and the
 * model's tensors in a Hugging Face checkpoint (gen/emit/emit_formats.c,
 * lx_safetensors.h). Valid C11 and C++17. */
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
   * gradient is a part of the sum: of its sequence shard (sequence
   * parallelism), or of its shard of the linear a LoRA factor adapts. */
  int split;
  long long row_elements, whole_row;
  int pieces;
  long long piece_row[3], piece_rows[3];
  /* The whole tensor, as every plan holds it: rows of cols elements (the
   * vocabulary unpadded), row-major as the split's rows and columns count. */
  long long rows, cols;
} lx_param_tensor;

/* Gradients reduced across the dp replicas at once (gen/planning/layout.h). */
typedef struct {
  long long first, elements; /* in the params region */
  long long shard_first;     /* ZeRO-1: this replica's share of their optimizer state */
} lx_param_bucket;

/* Fine-tuning: a linear's LoRA adapter, as rows of param_tensors: the frozen
 * weight (out, in), A (rank, in) and B (out, rank). Exported weights are
 * merged, W + scale B A, so that the files hold the model the run trained. */
typedef struct {
  int weight, lora_a, lora_b;
  long long rank;
  double scale; /* alpha / rank */
} lx_lora_adapter;

/* How the rows of a parameter lie in the file's tensor. */
typedef enum {
  LX_HF_ROWS,       /* as they are */
  LX_HF_TRANSPOSED, /* GPT-2's Conv1D: the file holds (in, out), the parameter (out, in) */
  LX_HF_ROPE_PAIRS  /* Meta's interleaved rotary pairs (2m, 2m + 1) are transformers' (m, m + D/2) */
} lx_hf_layout;

typedef struct {
  const char *name; /* a block's has %d: its layer */
  int section;      /* 0 prologue, 1 block (once per layer), 2 epilogue */
  int dims;
  long long shape[2]; /* in the file */
  lx_hf_layout layout;
  int head_dim;  /* LX_HF_ROPE_PAIRS */
  int positions; /* a file of a longer context fits: the model reads its first rows */
} lx_hf_tensor;

/* Rows [first_row, first_row + the tensor's) of param_tensors[param] are
 * tensor hf_tensors[tensor] of layer `layer` (-1 outside the blocks). */
typedef struct {
  int param, tensor, layer;
  long long first_row;
} lx_hf_part;

#endif
