/* ir_json.c — the IR as JSON (lynxgen --dump-ir); schema in docs/ir.md. */
#include <inttypes.h>

#include "escape.h"
#include "ir.h"

/* A minimal pretty-printing JSON writer: nesting depth and whether the
 * current container already has a member decide commas and indentation. */
typedef struct {
  FILE *out;
  int depth;
  bool has_member[32];
} json_writer;

static void member_prefix(json_writer *w, const char *key) {
  if (w->depth > 0) {
    fputs(w->has_member[w->depth] ? ",\n" : "\n", w->out);
    w->has_member[w->depth] = true;
    fprintf(w->out, "%*s", 2 * w->depth, "");
  }
  if (key) fprintf(w->out, "\"%s\": ", key);
}

static void open_container(json_writer *w, const char *key, char bracket) {
  member_prefix(w, key);
  fputc(bracket, w->out);
  w->has_member[++w->depth] = false;
}

static void close_container(json_writer *w, char bracket) {
  bool had = w->has_member[w->depth--];
  if (had) fprintf(w->out, "\n%*s", 2 * w->depth, "");
  fputc(bracket, w->out);
}

static void put_str(json_writer *w, const char *key, const char *value) {
  member_prefix(w, key);
  if (value)
    lx_put_json_string(w->out, value);
  else
    fputs("null", w->out);
}

static void put_int(json_writer *w, const char *key, int64_t value) {
  member_prefix(w, key);
  fprintf(w->out, "%" PRId64, value);
}

/* An open plan field (0) prints as null. */
static void put_int_or_open(json_writer *w, const char *key, int value) {
  member_prefix(w, key);
  if (value == LX_OPEN)
    fputs("null", w->out);
  else
    fprintf(w->out, "%d", value);
}

static void put_num(json_writer *w, const char *key, double value) {
  member_prefix(w, key);
  fprintf(w->out, "%.17g", value);
}

static void put_bool(json_writer *w, const char *key, bool value) {
  member_prefix(w, key);
  fputs(value ? "true" : "false", w->out);
}

static void put_src(json_writer *w, const char *key, lx_srcloc at) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s:%d:%d", lx_file_name(at.file), at.line, at.col);
  put_str(w, key, buf);
}

static void print_configs(json_writer *w, const lx_ir *ir) {
  const lx_model_config *m = &ir->model;
  open_container(w, "model", '{');
  put_int(w, "vocab", m->vocab);
  put_int(w, "padded_vocab", ir->padded_vocab);
  put_int(w, "seq_len", m->seq_len);
  put_int(w, "layers", m->layers);
  put_int(w, "hidden", m->hidden);
  put_int(w, "heads", m->heads);
  put_int(w, "kv_heads", m->kv_heads);
  put_int(w, "ffn_hidden", m->ffn_hidden);
  put_num(w, "dropout", m->dropout);
  put_bool(w, "tied_embeddings", m->tied_embeddings);
  close_container(w, '}');

  const lx_cluster *c = &ir->cluster;
  open_container(w, "cluster", '{');
  put_str(w, "gpu", lx_gpu_name(c->gpu));
  put_int(w, "nodes", c->nodes);
  put_int(w, "gpus_per_node", c->gpus_per_node);
  put_str(w, "intra_node_link", lx_link_name(c->intra_node_link));
  put_str(w, "inter_node_link", lx_link_name(c->inter_node_link));
  close_container(w, '}');

  const lx_plan *p = &ir->plan;
  open_container(w, "plan", '{');
  put_int_or_open(w, "tp", p->tp);
  put_int_or_open(w, "pp", p->pp);
  put_int_or_open(w, "dp", p->dp);
  put_int_or_open(w, "micro_batch", p->micro_batch);
  put_int_or_open(w, "global_batch", p->global_batch);
  put_str(w, "schedule", p->schedule == LX_SCHEDULE_OPEN ? NULL : lx_schedule_name(p->schedule));
  put_bool(w, "sequence_parallel", p->sequence_parallel);
  put_bool(w, "zero", p->zero);
  close_container(w, '}');

  const lx_training *t = &ir->training;
  open_container(w, "training", '{');
  put_int(w, "steps", t->steps);
  put_num(w, "lr", t->lr);
  put_num(w, "min_lr", t->min_lr);
  put_int(w, "warmup_steps", t->warmup_steps);
  put_str(w, "lr_schedule", lx_lr_schedule_name(t->lr_schedule));
  put_num(w, "beta1", t->beta1);
  put_num(w, "beta2", t->beta2);
  put_num(w, "eps", t->eps);
  put_num(w, "weight_decay", t->weight_decay);
  put_num(w, "grad_clip", t->grad_clip);
  put_int(w, "seed", t->seed);
  put_str(w, "dtype", lx_dtype_name(t->dtype));
  put_str(w, "train_data", t->train_data);
  put_str(w, "val_data", t->val_data);
  put_int(w, "val_interval", t->val_interval);
  put_int(w, "checkpoint_interval", t->checkpoint_interval);
  close_container(w, '}');
}

static void print_shape(json_writer *w, lx_shape s) {
  open_container(w, "shape", '{');
  put_bool(w, "scalar", s.scalar);
  put_int(w, "width", s.width);
  put_bool(w, "split", s.split);
  put_str(w, "dtype", lx_dtype_name(s.dtype));
  close_container(w, '}');
}

static void print_op(json_writer *w, const lx_graph *g, const lx_op *op) {
  open_container(w, NULL, '{');
  put_str(w, "name", op->name);
  put_str(w, "kind", lx_op_kind_name(op->kind));
  put_str(w, "var", op->var);
  put_src(w, "src", op->src);
  open_container(w, "inputs", '[');
  for (int k = 0; k < op->n_inputs; k++)
    put_str(w, NULL, g->ops[op->inputs[k]].name);
  close_container(w, ']');
  print_shape(w, op->out);
  if (op->kind == LX_OP_LINEAR || op->kind == LX_OP_EMBEDDING || op->kind == LX_OP_POSITION_EMBEDDING ||
      op->kind == LX_OP_LM_HEAD)
    put_int(w, "out_width", op->out_width);
  if (op->kind == LX_OP_EMBEDDING) put_int(w, "table_rows", op->table_rows);
  if (op->kind == LX_OP_ATTENTION || op->kind == LX_OP_ROPE) {
    put_int(w, "heads", op->heads);
    put_int(w, "kv_heads", op->kv_heads);
  }
  if (op->kind == LX_OP_LINEAR) put_bool(w, "bias", op->has_bias);
  put_str(w, "tp_role", lx_tp_role_name(op->tp_role));
  if (op->kind == LX_OP_ATTENTION)
    put_str(w, "attention_impl", op->attention_impl == LX_ATTN_FLASH ? "flash" : "materialized");
  put_num(w, "flops_fwd", op->flops_fwd);
  put_num(w, "flops_bwd", op->flops_bwd);
  put_bool(w, "is_matmul", op->is_matmul);
  put_int(w, "out_bytes", op->out_bytes);
  put_int(w, "saved_bytes", op->saved_bytes);
  open_container(w, "saved", '[');
  for (int k = 0; k < op->n_saved; k++) {
    open_container(w, NULL, '{');
    put_str(w, "what", op->saved[k].what);
    if (op->saved[k].kind == LX_SAVE_INPUT) put_str(w, "tensor", g->ops[op->inputs[op->saved[k].input]].name);
    put_int(w, "bytes", op->saved[k].bytes);
    close_container(w, '}');
  }
  close_container(w, ']');
  put_int(w, "params", op->params);
  put_int(w, "params_per_rank", op->params_per_rank);
  put_bool(w, "tp_allreduce", op->needs_tp_allreduce);
  close_container(w, '}');
}

static void print_graph(json_writer *w, const lx_graph *g) {
  open_container(w, g->name, '{');
  put_src(w, "src", g->src);
  put_str(w, "output", g->output >= 0 ? g->ops[g->output].name : NULL);
  put_int(w, "activation_bytes", g->activation_bytes);
  put_int(w, "params", g->params);
  put_int(w, "params_per_rank", g->params_per_rank);
  put_num(w, "flops_fwd", g->flops_fwd);
  put_num(w, "flops_bwd", g->flops_bwd);
  open_container(w, "ops", '[');
  for (int i = 0; i < g->n_ops; i++)
    print_op(w, g, &g->ops[i]);
  close_container(w, ']');
  close_container(w, '}');
}

void lx_ir_print_json(const lx_ir *ir, FILE *out) {
  json_writer w = {.out = out};
  open_container(&w, NULL, '{');
  put_int(&w, "ir_version", 1);
  put_str(&w, "model_file", lx_file_name(ir->model_path));
  print_configs(&w, ir);
  open_container(&w, "numbers_for", '{');
  put_int(&w, "micro_batch", ir->plan.micro_batch ? ir->plan.micro_batch : 1);
  put_int(&w, "seq_len", ir->model.seq_len);
  put_int(&w, "tp", ir->plan.tp ? ir->plan.tp : 1);
  put_bool(&w, "sequence_parallel", ir->plan.sequence_parallel);
  put_str(&w, "dtype", lx_dtype_name(ir->training.dtype));
  close_container(&w, '}');
  put_int(&w, "params_total", ir->params_total);
  put_num(&w, "model_flops_per_sequence", ir->model_flops_per_sequence);
  if (ir->plan.global_batch)
    put_num(&w, "model_flops_per_iteration", ir->model_flops_per_sequence * ir->plan.global_batch);
  open_container(&w, "layers", '[');
  for (int l = 0; l < ir->model.layers; l++) {
    open_container(&w, NULL, '{');
    put_int(&w, "index", l);
    put_int(&w, "activation_bytes", ir->block.activation_bytes);
    put_int(&w, "params", ir->block.params);
    put_int(&w, "params_per_rank", ir->block.params_per_rank);
    close_container(&w, '}');
  }
  close_container(&w, ']');
  open_container(&w, "graphs", '{');
  print_graph(&w, &ir->prologue);
  print_graph(&w, &ir->block);
  print_graph(&w, &ir->epilogue);
  close_container(&w, '}');
  close_container(&w, '}');
  fputc('\n', out);
}
