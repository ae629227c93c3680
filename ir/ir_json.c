/* ir_json.c — the IR as JSON (lynxgen --dump-ir); schema in docs/ir.md. */
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "ir.h"
#include "json.h"

/* An open plan field is null (analysis resolved it to 1: lx_ir.open_plan). */
static void put_int_or_open(cJSON *parent, const char *key, int value, bool open) {
  if (open || value == LX_OPEN)
    lx_json_add_null(parent, key);
  else
    lx_json_add_int(parent, key, value);
}

/* "file:line:col", the file as generated files cite it. */
static void put_src(cJSON *parent, const char *key, lx_srcloc at) {
  const char *file = lx_file_name(at.file);
  size_t size = strlen(file) + 2 * 12 + 1;
  char *text = lx_malloc(size);
  snprintf(text, size, "%s:%d:%d", file, at.line, at.col);
  lx_json_add_string(parent, key, text);
  free(text);
}

static void print_configs(cJSON *doc, const lx_ir *ir) {
  const lx_model_config *m = &ir->model;
  cJSON *w = lx_json_add_object(doc, "model");
  lx_json_add_int(w, "vocab", m->vocab);
  lx_json_add_int(w, "padded_vocab", ir->padded_vocab);
  lx_json_add_int(w, "seq_len", m->seq_len);
  lx_json_add_int(w, "layers", m->layers);
  lx_json_add_int(w, "hidden", m->hidden);
  lx_json_add_int(w, "heads", m->heads);
  lx_json_add_int(w, "kv_heads", m->kv_heads);
  lx_json_add_int(w, "ffn_hidden", m->ffn_hidden);
  lx_json_add_number(w, "dropout", m->dropout);
  lx_json_add_bool(w, "tied_embeddings", m->tied_embeddings);
  lx_json_add_number(w, "rope_theta", m->rope_theta);

  const lx_cluster *c = &ir->cluster;
  w = lx_json_add_object(doc, "cluster");
  lx_json_add_string(w, "gpu", lx_gpu_name(c->gpu));
  lx_json_add_int(w, "nodes", c->nodes);
  lx_json_add_int(w, "gpus_per_node", c->gpus_per_node);
  lx_json_add_string(w, "intra_node_link", lx_link_name(c->intra_node_link));
  lx_json_add_string(w, "inter_node_link", lx_link_name(c->inter_node_link));

  const lx_plan *p = &ir->plan;
  w = lx_json_add_object(doc, "plan");
  put_int_or_open(w, "tp", p->tp, ir->open_plan.tp);
  put_int_or_open(w, "pp", p->pp, ir->open_plan.pp);
  put_int_or_open(w, "dp", p->dp, ir->open_plan.dp);
  put_int_or_open(w, "micro_batch", p->micro_batch, ir->open_plan.micro_batch);
  put_int_or_open(w, "global_batch", p->global_batch, false);
  lx_json_add_string(w, "schedule", ir->open_plan.schedule ? NULL : lx_schedule_name(p->schedule));
  lx_json_add_int(w, "virtual_stages", p->virtual_stages);
  lx_json_add_bool(w, "sequence_parallel", p->sequence_parallel);
  lx_json_add_bool(w, "zero", p->zero);
  put_int_or_open(w, "mini_sequences", p->mini_sequences, ir->open_plan.mini_sequences);

  const lx_training *t = &ir->training;
  w = lx_json_add_object(doc, "training");
  lx_json_add_int(w, "steps", t->steps);
  lx_json_add_number(w, "lr", t->lr);
  lx_json_add_number(w, "min_lr", t->min_lr);
  lx_json_add_int(w, "warmup_steps", t->warmup_steps);
  lx_json_add_string(w, "lr_schedule", lx_lr_schedule_name(t->lr_schedule));
  lx_json_add_number(w, "beta1", t->beta1);
  lx_json_add_number(w, "beta2", t->beta2);
  lx_json_add_number(w, "eps", t->eps);
  lx_json_add_number(w, "weight_decay", t->weight_decay);
  lx_json_add_number(w, "grad_clip", t->grad_clip);
  lx_json_add_int(w, "seed", t->seed);
  lx_json_add_string(w, "dtype", lx_dtype_name(t->dtype));
  lx_json_add_string(w, "train_data", t->train_data);
  lx_json_add_string(w, "val_data", t->val_data);
  lx_json_add_int(w, "val_interval", t->val_interval);
  lx_json_add_int(w, "checkpoint_interval", t->checkpoint_interval);
  if (ir->finetune) { /* a model with lora() adapters: only they train */
    cJSON *f = lx_json_add_object(doc, "finetune");
    lx_json_add_bool(f, "lora_fa", t->lora_fa);
    lx_json_add_number(f, "lora_dropout", t->lora_dropout);
  }
}

static void print_shape(cJSON *parent, lx_shape s) {
  cJSON *w = lx_json_add_object(parent, "shape");
  lx_json_add_bool(w, "scalar", s.scalar);
  lx_json_add_int(w, "width", s.width);
  lx_json_add_bool(w, "split", s.split);
  lx_json_add_string(w, "dtype", lx_dtype_name(s.dtype));
}

static void print_saved(cJSON *parent, const lx_graph *g, const lx_op *op) {
  cJSON *saved = lx_json_add_array(parent, "saved");
  for (int k = 0; k < op->n_saved; k++) {
    cJSON *w = lx_json_add_object(saved, NULL);
    lx_json_add_string(w, "what", op->saved[k].what);
    if (op->saved[k].kind == LX_SAVE_INPUT)
      lx_json_add_string(w, "tensor", g->ops[op->inputs[op->saved[k].input]].name);
    lx_json_add_int(w, "bytes", op->saved[k].bytes);
  }
}

static void print_op(cJSON *ops, const lx_graph *g, const lx_op *op) {
  cJSON *w = lx_json_add_object(ops, NULL);
  lx_json_add_string(w, "name", op->name);
  lx_json_add_string(w, "kind", lx_op_kind_name(op->kind));
  lx_json_add_string(w, "var", op->var);
  put_src(w, "src", op->src);
  cJSON *inputs = lx_json_add_array(w, "inputs");
  for (int k = 0; k < op->n_inputs; k++)
    lx_json_add_string(inputs, NULL, g->ops[op->inputs[k]].name);
  print_shape(w, op->out);
  if (op->kind == LX_OP_LINEAR || op->kind == LX_OP_EMBEDDING || op->kind == LX_OP_POSITION_EMBEDDING ||
      op->kind == LX_OP_LM_HEAD)
    lx_json_add_int(w, "out_width", op->out_width);
  if (op->kind == LX_OP_EMBEDDING) lx_json_add_int(w, "table_rows", op->table_rows);
  if (op->kind == LX_OP_ATTENTION || op->kind == LX_OP_ROPE) {
    lx_json_add_int(w, "heads", op->heads);
    lx_json_add_int(w, "kv_heads", op->kv_heads);
  }
  if (op->kind == LX_OP_LINEAR) lx_json_add_bool(w, "bias", op->has_bias);
  if (op->lora_rank) { /* fine-tuning's adapter */
    lx_json_add_int(w, "lora_rank", op->lora_rank);
    lx_json_add_int(w, "lora_alpha", op->lora_alpha);
  }
  lx_json_add_string(w, "tp_role", lx_tp_role_name(op->tp_role));
  lx_json_add_int(w, "chunks", op->chunks);
  if (op->kind == LX_OP_ATTENTION)
    lx_json_add_string(w, "attention_impl", op->attention_impl == LX_ATTN_FLASH ? "flash" : "materialized");
  lx_json_add_number(w, "flops_fwd", op->flops_fwd);
  lx_json_add_number(w, "flops_bwd", op->flops_bwd);
  lx_json_add_bool(w, "is_matmul", op->is_matmul);
  lx_json_add_int(w, "out_bytes", op->out_bytes);
  lx_json_add_int(w, "saved_bytes", op->saved_bytes);
  print_saved(w, g, op);
  lx_json_add_int(w, "params", op->params);
  lx_json_add_int(w, "params_per_rank", op->params_per_rank);
  if (op->frozen_per_rank) lx_json_add_int(w, "frozen_per_rank", op->frozen_per_rank);
  lx_json_add_bool(w, "tp_allreduce", op->needs_tp_allreduce);
}

static void print_graph(cJSON *graphs, const lx_graph *g) {
  cJSON *w = lx_json_add_object(graphs, g->name);
  put_src(w, "src", g->src);
  lx_json_add_string(w, "output", g->output >= 0 ? g->ops[g->output].name : NULL);
  lx_json_add_int(w, "activation_bytes", g->activation_bytes);
  lx_json_add_int(w, "params", g->params);
  lx_json_add_int(w, "params_per_rank", g->params_per_rank);
  if (g->frozen_per_rank) lx_json_add_int(w, "frozen_per_rank", g->frozen_per_rank);
  lx_json_add_number(w, "flops_fwd", g->flops_fwd);
  lx_json_add_number(w, "flops_bwd", g->flops_bwd);
  cJSON *ops = lx_json_add_array(w, "ops");
  for (int i = 0; i < g->n_ops; i++)
    print_op(ops, g, &g->ops[i]);
}

static void print_layers(cJSON *doc, const lx_ir *ir) {
  cJSON *layers = lx_json_add_array(doc, "layers");
  for (int l = 0; l < ir->model.layers; l++) {
    cJSON *w = lx_json_add_object(layers, NULL);
    lx_json_add_int(w, "index", l);
    lx_json_add_int(w, "activation_bytes", ir->block.activation_bytes);
    lx_json_add_int(w, "params", ir->block.params);
    lx_json_add_int(w, "params_per_rank", ir->block.params_per_rank);
  }
}

void lx_ir_print_json(const lx_ir *ir, FILE *out) {
  cJSON *doc = lx_json_document();
  lx_json_add_int(doc, "ir_version", 1);
  lx_json_add_string(doc, "model_file", lx_file_name(ir->model_path));
  print_configs(doc, ir);
  cJSON *w = lx_json_add_object(doc, "numbers_for");
  lx_json_add_int(w, "micro_batch", ir->plan.micro_batch);
  lx_json_add_int(w, "seq_len", ir->model.seq_len);
  lx_json_add_int(w, "tp", ir->plan.tp);
  lx_json_add_bool(w, "sequence_parallel", ir->plan.sequence_parallel);
  lx_json_add_string(w, "dtype", lx_dtype_name(ir->training.dtype));
  lx_json_add_int(doc, "params_total", ir->params_total);
  lx_json_add_number(doc, "model_flops_per_sequence", ir->model_flops_per_sequence);
  if (ir->plan.global_batch)
    lx_json_add_number(doc, "model_flops_per_iteration",
                       ir->model_flops_per_sequence * ir->plan.global_batch);
  print_layers(doc, ir);
  cJSON *graphs = lx_json_add_object(doc, "graphs");
  print_graph(graphs, &ir->prologue);
  print_graph(graphs, &ir->block);
  print_graph(graphs, &ir->epilogue);
  lx_json_write(doc, true, out);
}
