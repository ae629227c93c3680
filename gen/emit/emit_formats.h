/* emit_formats.h — the weight files a model can be read from and written
 * to, known by its structure: llm.c's GPT-2 checkpoint and a Hugging Face
 * safetensors checkpoint (transformers' GPT2LMHeadModel or
 * LlamaForCausalLM). The parameter table (emit_operands.c) asks where each
 * parameter goes; the tables the stage programs read are printed here. */
#ifndef LX_EMIT_FORMATS_H
#define LX_EMIT_FORMATS_H

#include <stdbool.h>
#include <stdio.h>

#include "ir.h"
#include "schedule.h"

/* Is the model llm.c's GPT-2 (the order and kinds of its parameters, tied
 * embeddings, biases)? */
bool emit_is_gpt2(const lx_ir *ir);
/* Element offset of parameter k (0 weight, 1 bias) of op `op` of graph g
 * (layer: the block's) in llm.c's file; only for a GPT-2. */
long long emit_llmc_element(const lx_ir *ir, lx_graph_id g, int layer, int op, int k);

/* The Hugging Face model the IR is, if any: prints its tensors (hf_tensors),
 * its config.json (HF_CONFIG) and HF_CHECKPOINT (0 when it is none of them). */
void emit_hf_model(FILE *out, const lx_ir *ir);

/* The Hugging Face tensors parameter k of op `op` of graph g holds rows of
 * (a fused q|k|v or gate|up weight holds several): up to 3 indices into
 * hf_tensors and the parameter's row where each starts. Returns how many. */
enum { EMIT_HF_MAX_PARTS = 3 };
int emit_hf_parts(const lx_ir *ir, lx_graph_id g, int op, int k, int tensor[EMIT_HF_MAX_PARTS],
                  long long first_row[EMIT_HF_MAX_PARTS]);

#endif
