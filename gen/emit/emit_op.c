/* emit_op.c — one op's kernel call for either target (see emit_op.h). */
#include "emit/emit_op.h"

#include <string.h>

/* Both targets' kernels are lx_<kernel>_<direction>(ctx, pointers..., sizes...);
 * what still differs is where the loss goes and the communicator's name. A
 * CPU loss kernel returns the micro-batch's loss to the host's running sum;
 * a CUDA one writes it to the device (losses + mb % MICRO_BATCHES), so that a step never
 * waits for the host and can be one CUDA graph. */
const lx_kernel_target lx_cpu_kernels = {
    .loss = "loss_sum += ",
    .loss_into = "",
    .piece_loss_into = "",
    .tp_group = "groups.tp",
};

const lx_kernel_target lx_cuda_kernels = {
    .loss = "",
    .loss_into = "losses + mb % MICRO_BATCHES, ", /* 2BW numbers the next step's on from MICRO_BATCHES */
    .piece_loss_into =
        "losses + mb % MICRO_BATCHES, piece > 0, ", /* the first piece sets it, the others add */
    .tp_group = "&tp_comm",
};

/* What follows the pointer arguments, and the variant of the kernel a
 * parallel layout calls (its suffix). */
typedef struct {
  const char *variant;
  char sizes[256];
} call_tail;

/* The random stream of op i of this instance: dropout masks are drawn from
 * (step, global micro-batch, layer, op), whatever the layout. */
static int print_rng(const lx_printer *pr, lx_graph_id g, int i, char *buf, size_t size) {
  const char *layer = g == LX_GRAPH_BLOCK ? "layer + 1" : g == LX_GRAPH_PROLOGUE ? "0" : "MODEL_LAYERS + 1";
  const char *step = pr->p->kind == LX_SCHEDULE_2BW ? "STEP_OF(mb)" : "current_step";
  return snprintf(buf, size, "lx_rng_stream(%s, GLOBAL_MB(mb), %s, %d)", step, layer, i);
}

/* An attention's dropout: its random stream and this rank's heads in the
 * whole model's numbering (the masks are drawn by them, in the forward and
 * again in the backward). */
static void attention_tail(const lx_printer *pr, lx_graph_id g, int i, call_tail *c) {
  const lx_op *op = emit_op_at(pr, g, i);
  char dims[96];
  emit_attention_dims(pr, g, op, dims, sizeof dims);
  int n = snprintf(c->sizes, sizeof c->sizes, "%s, DROPOUT, seed, ", dims);
  n += print_rng(pr, g, i, c->sizes + n, sizeof c->sizes - (size_t)n);
  snprintf(c->sizes + n, sizeof c->sizes - (size_t)n, ", TP_RANK * %d, %d", op->heads / emit_tp(pr),
           op->heads);
}

/* A head-split recompute's pieces: the kv heads of the rank they run. */
static void heads_tail(const lx_printer *pr, lx_graph_id g, const lx_op *op, call_tail *c) {
  int split = emit_op_at(pr, g, op->inputs[0])->out.split ? emit_tp(pr) : 1, first, end;
  lx_instr_kv_heads(pr->head_pieces, op->kv_heads / split, &first, &end);
  size_t n = strlen(c->sizes);
  snprintf(c->sizes + n, sizeof c->sizes - n, ", %d, %d", first, end);
  c->variant = "_heads";
}

/* A dropout's random stream, forward and backward (which draws the mask again). */
static void dropout_tail(const lx_printer *pr, lx_graph_id g, int i, const lx_kernel_call *k, call_tail *c) {
  int n = snprintf(c->sizes, sizeof c->sizes, "(size_t)%s * %d, DROPOUT", k->rows, k->width);
  c->variant = k->sharded ? "_at" : "";
  n += snprintf(c->sizes + n, sizeof c->sizes - (size_t)n, ", seed, ");
  n += print_rng(pr, g, i, c->sizes + n, sizeof c->sizes - (size_t)n);
  if (k->sharded)
    snprintf(c->sizes + n, sizeof c->sizes - (size_t)n, ", (uint64_t)TP_RANK * SEQ_ROWS * %d", k->width);
}

/* A LoRA adapter's rank, scale alpha / rank and dropout: its random stream,
 * and where the rank's input columns start in the whole input (a
 * row-parallel linear's are a slice). */
static void lora_tail(const lx_printer *pr, lx_graph_id g, int i, call_tail *c) {
  const lx_op *op = emit_op_at(pr, g, i);
  int in = emit_in_width(pr, g, op), whole = emit_op_at(pr, g, op->inputs[0])->out.width;
  size_t n = strlen(c->sizes);
  n += (size_t)snprintf(c->sizes + n, sizeof c->sizes - n, ", %d, %.17g, LORA_DROPOUT, seed, ", op->lora_rank,
                        lx_lora_scale(op));
  n += (size_t)print_rng(pr, g, i, c->sizes + n, sizeof c->sizes - n);
  if (in == whole)
    snprintf(c->sizes + n, sizeof c->sizes - n, ", 0, %d", whole);
  else
    snprintf(c->sizes + n, sizeof c->sizes - n, ", TP_RANK * %d, %d", in, whole);
}

static void tail_of(const lx_printer *pr, const lx_kernel_target *t, lx_graph_id g, int i,
                    const lx_kernel_call *k, bool backward, call_tail *c) {
  const lx_op *op = k->op;
  bool tp = emit_tp(pr) > 1;
  int w = k->width;
  c->variant = "";
  c->sizes[0] = 0;
  switch (op->kind) {
  case LX_OP_EMBEDDING:
    c->variant = tp ? "_shard" : "";
    snprintf(c->sizes, sizeof c->sizes, tp ? "B, T, %d, VP, " VOCAB_SHARD : "B, T, %d, VP", w);
    break;
  case LX_OP_POSITION_EMBEDDING:
    c->variant = k->sharded ? "_rows" : "";
    snprintf(c->sizes, sizeof c->sizes, k->sharded ? "T, %d, TP_RANK * SEQ_ROWS, SEQ_ROWS" : "B, T, %d", w);
    break;
  case LX_OP_LAYERNORM:
  case LX_OP_RMSNORM:
  case LX_OP_SWIGLU: snprintf(c->sizes, sizeof c->sizes, "%s, %d", k->rows, w); break;
  case LX_OP_LINEAR:
    snprintf(c->sizes, sizeof c->sizes, "%s, %d, %d", k->rows, emit_in_width(pr, g, op), w);
    if (op->lora_rank) lora_tail(pr, g, i, c);
    break;
  case LX_OP_LM_HEAD:
    snprintf(c->sizes, sizeof c->sizes, "%s, %d, VP / %d", k->rows, emit_in_width(pr, g, op), emit_tp(pr));
    break;
  case LX_OP_ATTENTION:
    attention_tail(pr, g, i, c);
    if (pr->head_pieces) heads_tail(pr, g, op, c);
    break;
  case LX_OP_ROPE: {
    char dims[96];
    emit_attention_dims(pr, g, op, dims, sizeof dims);
    snprintf(c->sizes, sizeof c->sizes, "%s, %.17g", dims, pr->ir->model.rope_theta);
    break;
  }
  case LX_OP_ADD: snprintf(c->sizes, sizeof c->sizes, "(size_t)%s * %d", k->rows, w); break;
  case LX_OP_DROPOUT: dropout_tail(pr, g, i, k, c); break;
  case LX_OP_CROSS_ENTROPY: {
    /* a piece's rows of the micro-batch's BT, the loss still the mean over BT */
    bool piece = emit_in_piece(pr, op);
    c->variant = !tp        ? (piece ? "_rows" : "")
                 : backward ? (piece ? "_slice_rows" : "_slice")
                            : (piece ? "_tp_rows" : "_tp");
    snprintf(c->sizes, sizeof c->sizes, "%s%s%s, V, %s%s%s", backward ? "LOSS_SCALE, " : "",
             piece ? "piece_rows, " : "", "BT", tp ? VOCAB_SHARD_LAST : "VP", tp && !backward ? ", " : "",
             tp && !backward ? t->tp_group : "");
    break;
  }
  default: /* an element-wise op of the table */
    snprintf(c->sizes, sizeof c->sizes, "(size_t)%s * %d", k->rows, w);
    break;
  }
}

void emit_grad_modes(const lx_printer *pr, lx_graph_id g, int i, char *buf, size_t size) {
  const lx_graph *graph = lx_graph_of(pr->ir, g);
  int n = 0;
  buf[0] = 0;
  for (const lx_operand *o = lx_op_operands(&graph->ops[i], true); o->kind != LX_OPND_END && n >= 0; o++)
    if (o->kind == LX_OPND_DIN && (size_t)n < size)
      n += snprintf(buf + n, size - (size_t)n, ", %s",
                    lx_writes_input_gradient(pr->ir, graph, i, o->index) ? "LX_GRAD_WRITE" : "LX_GRAD_ADD");
}

void emit_op_call(const lx_printer *pr, const lx_kernel_target *t, lx_graph_id g, int i,
                  lx_tensor_role out_role, bool backward) {
  const lx_op *op = emit_op_at(pr, g, i);
  const lx_op_signature *sig = lx_op_signature_of(op);
  if (!sig->kernel) return;
  lx_kernel_call k;
  emit_kernel_call(pr, g, i, out_role, backward, &k);
  if (!k.writes) { /* a frozen embedding's backward */
    fprintf(pr->out, "  (void)mb; /* frozen: no gradient to compute */\n");
    return;
  }
  call_tail c;
  tail_of(pr, t, g, i, &k, backward, &c);
  bool loss = op->kind == LX_OP_CROSS_ENTROPY && !backward;
  const char *loss_into = !loss ? "" : pr->in_pieces ? t->piece_loss_into : t->loss_into;
  char modes[64] = "";
  if (backward && sig->din_writes) emit_grad_modes(pr, g, i, modes, sizeof modes);
  fprintf(pr->out, "  %slx_%s_%s%s(ctx, %s%s, %s%s);\n", loss ? t->loss : "", sig->kernel,
          backward ? "backward" : "forward", c.variant, loss_into, k.args, c.sizes, modes);
}
