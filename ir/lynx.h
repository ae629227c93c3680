/* lynx.h — the prelude of the lynxgen model language.
 *
 * A model file is C11 that includes this header. lynxgen hands the header to
 * libclang from memory, so a model file needs nothing installed; point clangd
 * at this directory (-I ir) and editing a model file gets completion and
 * type checking. The language is documented in docs/model-language.md.
 *
 * Tensors are opaque: a model file only wires operators together. Every
 * tensor is (micro_batch, seq_len, width); operators infer width. */
#ifndef LYNX_H
#define LYNX_H

typedef struct lx_tensor *tensor;

/* ---- configuration ------------------------------------------------------ */

enum lx_gpu { GPU_V100_32GB = 1, GPU_A100_40GB, GPU_A100_80GB, GPU_H100_80GB, GPU_H200_141GB,
              GPU_GH200_96GB /* Grace Hopper: host memory over NVLink-C2C */ };

enum lx_link {
  LINK_NVLINK2 = 1, LINK_NVLINK3, LINK_NVLINK4,
  LINK_PCIE4, LINK_PCIE5,
  LINK_IB_HDR, LINK_IB_NDR
};

/* 0 (left out) means: open, the planner chooses. */
enum lx_schedule { SCHEDULE_GPIPE = 1, SCHEDULE_1F1B, SCHEDULE_2BW, SCHEDULE_INTERLEAVED, SCHEDULE_ZB_H1 };

enum lx_dtype { DTYPE_BF16 = 1, DTYPE_FP16, DTYPE_FP32 };

enum lx_lr_schedule { LR_CONSTANT = 1, LR_COSINE, LR_LINEAR };

struct lx_model {
  int vocab;            /* vocabulary size */
  int seq_len;          /* tokens per sequence */
  int layers;           /* number of repeated blocks */
  int hidden;           /* model width h */
  int heads;            /* attention heads a */
  int kv_heads;         /* key/value heads (grouped-query attention); default heads */
  int ffn_hidden;       /* MLP width; default 4 * hidden */
  double dropout;       /* dropout probability of every dropout() and of attention */
  int tied_embeddings;  /* 1: lm_head reuses the token embedding */
  double rope_theta;    /* rope()'s base of rotation frequencies; default 10000 */
};

struct lx_cluster {
  enum lx_gpu gpu;
  int nodes;
  int gpus_per_node;
  enum lx_link intra_node_link;
  enum lx_link inter_node_link;
};

/* Any field left out (0) is open: the planner picks it. */
struct lx_parallel {
  int tp;                 /* tensor-parallel degree, inside one node */
  int pp;                 /* pipeline stages */
  int dp;                 /* data-parallel replicas */
  int micro_batch;        /* sequences per micro-batch */
  int global_batch;       /* sequences per optimizer step, all replicas */
  enum lx_schedule schedule;
  int virtual_stages;     /* SCHEDULE_INTERLEAVED: model chunks per stage (default 2) */
  int sequence_parallel;  /* 1: Megatron sequence parallelism */
  int zero;               /* 1: ZeRO-1, AdamW state sharded over the dp replicas */
  int mini_sequences;     /* MsT: the LM head, its loss and the MLPs over M pieces of
                             the sequence, the logits and MLP hidden never whole; 0: open */
};

struct lx_training {
  int steps;
  double lr;               /* peak learning rate */
  double min_lr;           /* floor of the decay */
  int warmup_steps;
  enum lx_lr_schedule lr_schedule;
  double beta1, beta2, eps, weight_decay;
  double grad_clip;        /* global-norm clip; 0 disables */
  int seed;
  enum lx_dtype dtype;    /* activations and weights; master weights stay fp32 */
  const char *train_data; /* glob of llm.c token shards */
  const char *val_data;
  int val_interval;       /* steps between validation losses; 0 disables */
  int checkpoint_interval;/* steps between checkpoints; 0 disables */
  int lora_fa;            /* fine-tuning: freeze the adapters' A too, train B alone (LoRA-FA) */
  double lora_dropout;    /* fine-tuning: dropout probability of the adapters' input */
};

/* ---- operators ---------------------------------------------------------- */
/* Width arguments are integer constant expressions (macros, enums, sums). */

tensor embedding(tensor tokens, int vocab, int width);     /* token table lookup */
tensor position_embedding(tensor tokens, int width);        /* learned positions, seq_len rows */
tensor layernorm(tensor x);                                  /* with scale and bias */
tensor rmsnorm(tensor x);                                    /* with scale */
tensor linear(tensor x, int out_width);                      /* x W^T + b */
tensor linear_nobias(tensor x, int out_width);               /* x W^T */
tensor attention(tensor qkv, int heads, int kv_heads);       /* causal; keeps the s x s scores */
tensor flash_attention(tensor qkv, int heads, int kv_heads); /* causal; keeps output + log-sum-exp */
tensor rope(tensor qkv, int heads, int kv_heads);            /* rotary positions on q and k */
tensor gelu(tensor x);                                       /* tanh approximation */
tensor silu(tensor x);                                       /* x * sigmoid(x) (swish) */
tensor swiglu(tensor gate_up);                               /* silu(first half) * second half */
tensor dropout(tensor x);                                    /* probability model.dropout */
tensor add(tensor a, tensor b);                              /* residual sum */
tensor lm_head(tensor x, int vocab);                         /* logits; tied if model.tied_embeddings */
tensor cross_entropy(tensor logits, tensor targets);         /* mean loss over tokens */
tensor lora(tensor linear_call, int rank, int alpha);        /* fine-tuning: a linear() plus an adapter */

/* lora(linear(x, n), r, alpha) is x W^T + b + (alpha / r) (x A^T) B^T with A (r x in) and B (n x r):
 * a model with one is fine-tuned, its base weights (all but the adapters) frozen. */

#endif
