/* emit_formats.c — llm.c's GPT-2 file and Hugging Face's safetensors
 * checkpoints: which tensor of the file each parameter is, recognised from
 * the model's structure (the kinds and order of its parameter ops). */
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "emit/emit_formats.h"
#include "escape.h"
#include "json.h"

/* The ops of graph g that hold parameters (the lm_head too: tied, it holds
 * none of its own), in program order; returns their number. */
static int param_ops(const lx_graph *g, int *ops, int max) {
  int n = 0;
  for (int i = 0; i < g->n_ops; i++)
    if (g->ops[i].params > 0 || g->ops[i].kind == LX_OP_LM_HEAD) {
      if (n < max) ops[n] = i;
      n++;
    }
  return n;
}

/* Do graph g's parameter ops have exactly these kinds? Their indices into ops. */
static bool param_kinds_are(const lx_graph *g, const lx_op_kind *kinds, int n, int *ops) {
  if (param_ops(g, ops, 8) != n) return false;
  for (int k = 0; k < n; k++)
    if (g->ops[ops[k]].kind != kinds[k]) return false;
  return true;
}

/* The first op that reads op i's output, or -1. */
static int consumer(const lx_graph *g, int i) {
  for (int c = i + 1; c < g->n_ops; c++)
    if (g->ops[c].n_inputs > 0 && g->ops[c].inputs[0] == i) return c;
  return -1;
}

static int in_width(const lx_graph *g, int i) { return g->ops[g->ops[i].inputs[0]].out.width; }

/* ---- llm.c's GPT-2 ------------------------------------------------------------------ */

/* The block of a GPT-2 in llm.c's order: ln1, qkv, attproj, ln2, fc, fcproj. */
static const lx_op_kind gpt2_block[] = {LX_OP_LAYERNORM, LX_OP_LINEAR, LX_OP_LINEAR,
                                        LX_OP_LAYERNORM, LX_OP_LINEAR, LX_OP_LINEAR};
static const lx_op_kind gpt2_prologue[] = {LX_OP_EMBEDDING, LX_OP_POSITION_EMBEDDING};
static const lx_op_kind gpt2_epilogue[] = {LX_OP_LAYERNORM, LX_OP_LM_HEAD};

bool emit_is_gpt2(const lx_ir *ir) {
  int ops[8];
  if (!param_kinds_are(&ir->block, gpt2_block, 6, ops) || !ir->model.tied_embeddings) return false;
  for (int k = 0; k < 6; k++)
    if (!ir->block.ops[ops[k]].has_bias) return false;
  return param_kinds_are(&ir->prologue, gpt2_prologue, 2, ops) &&
         param_kinds_are(&ir->epilogue, gpt2_epilogue, 2, ops);
}

long long emit_llmc_element(const lx_ir *ir, lx_graph_id g, int layer, int op, int k) {
  long long C = ir->model.hidden, L = ir->model.layers, Vp = ir->padded_vocab, T = ir->model.seq_len;
  long long per_layer[12] = {C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C};
  int ops[8], n;
  if (g == LX_GRAPH_PROLOGUE) {
    param_ops(&ir->prologue, ops, 8);
    return ops[0] == op ? 0 : Vp * C;
  }
  long long base = Vp * C + T * C;
  if (g == LX_GRAPH_EPILOGUE) {
    param_ops(&ir->epilogue, ops, 8);
    if (op == ops[1]) return 0; /* the tied head is wte */
    long long end = base;
    for (int t = 0; t < 12; t++)
      end += L * per_layer[t];
    return end + k * C;
  }
  n = param_ops(&ir->block, ops, 8);
  int index = 0;
  while (index < n && ops[index] != op)
    index++;
  int tensor = 2 * index + k;
  for (int t = 0; t < tensor; t++)
    base += L * per_layer[t];
  return base + layer * per_layer[tensor];
}

/* ---- Hugging Face: the tensors of GPT2LMHeadModel and LlamaForCausalLM ---------------- */

/* One tensor of the file: rows [first_row, first_row + rows) of parameter k
 * of an op (the whole parameter but for a fused q|k|v or gate|up). */
typedef struct {
  char name[64]; /* a block's has %d for the layer */
  lx_graph_id graph;
  int op, k;
  long long first_row;
  int dims;
  long long shape[2]; /* as the file has it */
  const char *layout; /* lx_safetensors.h's lx_hf_layout */
  int head_dim;       /* LX_HF_ROPE_PAIRS: rows permute within heads of this many */
  bool positions;     /* the file may hold more rows (a longer context) */
} hf_entry;

enum { HF_MAX_ENTRIES = 24 };

typedef struct {
  hf_entry e[HF_MAX_ENTRIES];
  int n;
} hf_table;

static hf_entry *hf_add(hf_table *t, const char *name, lx_graph_id g, int op, int k, long long rows,
                        long long cols, const char *layout) {
  if (t->n == HF_MAX_ENTRIES) abort(); /* the two models have fewer */
  hf_entry *e = &t->e[t->n++];
  *e = (hf_entry){.graph = g,
                  .op = op,
                  .k = k,
                  .dims = cols ? 2 : 1,
                  .shape = {rows, cols},
                  .layout = layout ? layout : "LX_HF_ROWS"};
  snprintf(e->name, sizeof e->name, "%s", name);
  return e;
}

/* A linear's weight (out, in) and bias (out) under GPT-2's names: Conv1D
 * stores the weight transposed, (in, out). */
static void hf_conv1d(hf_table *t, const lx_graph *g, const char *name, int op) {
  char text[64];
  long long out = g->ops[op].out_width, in = in_width(g, op);
  snprintf(text, sizeof text, "transformer.h.%%d.%s.weight", name);
  hf_add(t, text, LX_GRAPH_BLOCK, op, 0, in, out, "LX_HF_TRANSPOSED");
  snprintf(text, sizeof text, "transformer.h.%%d.%s.bias", name);
  hf_add(t, text, LX_GRAPH_BLOCK, op, 1, out, 0, NULL);
}

static void hf_norm(hf_table *t, const char *name, lx_graph_id g, int op, bool bias, long long width) {
  char text[64];
  snprintf(text, sizeof text, "%s.weight", name);
  hf_add(t, text, g, op, 0, width, 0, NULL);
  if (!bias) return;
  snprintf(text, sizeof text, "%s.bias", name);
  hf_add(t, text, g, op, 1, width, 0, NULL);
}

static void hf_gpt2(const lx_ir *ir, hf_table *t) {
  int pro[8], blk[8], epi[8];
  long long V = ir->model.vocab, C = ir->model.hidden;
  param_ops(&ir->prologue, pro, 8), param_ops(&ir->block, blk, 8), param_ops(&ir->epilogue, epi, 8);
  hf_add(t, "transformer.wte.weight", LX_GRAPH_PROLOGUE, pro[0], 0, V, C, NULL);
  hf_add(t, "transformer.wpe.weight", LX_GRAPH_PROLOGUE, pro[1], 0, ir->model.seq_len, C, NULL)->positions =
      true;
  hf_norm(t, "transformer.h.%d.ln_1", LX_GRAPH_BLOCK, blk[0], true, C);
  hf_conv1d(t, &ir->block, "attn.c_attn", blk[1]);
  hf_conv1d(t, &ir->block, "attn.c_proj", blk[2]);
  hf_norm(t, "transformer.h.%d.ln_2", LX_GRAPH_BLOCK, blk[3], true, C);
  hf_conv1d(t, &ir->block, "mlp.c_fc", blk[4]);
  hf_conv1d(t, &ir->block, "mlp.c_proj", blk[5]);
  hf_norm(t, "transformer.ln_f", LX_GRAPH_EPILOGUE, epi[0], true, C);
}

/* A Llama: pre-RMSNorm blocks whose fused q|k|v linear feeds rope, whose
 * fused gate|up linear feeds swiglu, no biases; a token embedding only. */
static const lx_op_kind llama_block[] = {LX_OP_RMSNORM, LX_OP_LINEAR, LX_OP_LINEAR,
                                         LX_OP_RMSNORM, LX_OP_LINEAR, LX_OP_LINEAR};
static const lx_op_kind llama_prologue[] = {LX_OP_EMBEDDING};
static const lx_op_kind llama_epilogue[] = {LX_OP_RMSNORM, LX_OP_LM_HEAD};

static bool is_llama(const lx_ir *ir) {
  int ops[8], others[8];
  const lx_graph *b = &ir->block;
  if (!param_kinds_are(&ir->prologue, llama_prologue, 1, others) ||
      !param_kinds_are(&ir->epilogue, llama_epilogue, 2, others) || !param_kinds_are(b, llama_block, 6, ops))
    return false;
  for (int k = 1; k < 6; k++)
    if (k != 3 && b->ops[ops[k]].has_bias) return false;
  int rope = consumer(b, ops[1]), swiglu = consumer(b, ops[4]);
  return rope >= 0 && b->ops[rope].kind == LX_OP_ROPE && consumer(b, rope) >= 0 &&
         b->ops[consumer(b, rope)].kind == LX_OP_ATTENTION && swiglu >= 0 &&
         b->ops[swiglu].kind == LX_OP_SWIGLU;
}

/* A Llama's attention heads, key/value heads, head size and MLP width. */
typedef struct {
  long long heads, kv_heads, head_dim, ffn;
} llama_dims;

static llama_dims llama_dims_of(const lx_ir *ir) {
  int blk[8];
  const lx_graph *b = &ir->block;
  param_ops(b, blk, 8);
  const lx_op *rope = &b->ops[consumer(b, blk[1])];
  llama_dims d = {.heads = rope->heads, .kv_heads = rope->kv_heads, .ffn = b->ops[blk[4]].out_width / 2};
  d.head_dim = b->ops[blk[1]].out_width / (d.heads + 2 * d.kv_heads);
  return d;
}

static void hf_llama(const lx_ir *ir, hf_table *t) {
  int pro[8], blk[8], epi[8];
  const lx_graph *b = &ir->block;
  long long V = ir->model.vocab, C = ir->model.hidden;
  param_ops(&ir->prologue, pro, 8), param_ops(b, blk, 8), param_ops(&ir->epilogue, epi, 8);
  llama_dims dims = llama_dims_of(ir);
  long long H = dims.heads, KV = dims.kv_heads, D = dims.head_dim, F = dims.ffn;
  hf_add(t, "model.embed_tokens.weight", LX_GRAPH_PROLOGUE, pro[0], 0, V, C, NULL);
  hf_norm(t, "model.layers.%d.input_layernorm", LX_GRAPH_BLOCK, blk[0], false, C);
  const char *qkv[3] = {"q_proj", "k_proj", "v_proj"};
  long long rows[3] = {H * D, KV * D, KV * D}, first = 0;
  for (int p = 0; p < 3; p++) {
    char name[64];
    snprintf(name, sizeof name, "model.layers.%%d.self_attn.%s.weight", qkv[p]);
    hf_entry *e = hf_add(t, name, LX_GRAPH_BLOCK, blk[1], 0, rows[p], C, p < 2 ? "LX_HF_ROPE_PAIRS" : NULL);
    e->first_row = first, e->head_dim = (int)D;
    first += rows[p];
  }
  hf_add(t, "model.layers.%d.self_attn.o_proj.weight", LX_GRAPH_BLOCK, blk[2], 0, C, in_width(b, blk[2]),
         NULL);
  hf_norm(t, "model.layers.%d.post_attention_layernorm", LX_GRAPH_BLOCK, blk[3], false, C);
  hf_add(t, "model.layers.%d.mlp.gate_proj.weight", LX_GRAPH_BLOCK, blk[4], 0, F, C, NULL);
  hf_add(t, "model.layers.%d.mlp.up_proj.weight", LX_GRAPH_BLOCK, blk[4], 0, F, C, NULL)->first_row = F;
  hf_add(t, "model.layers.%d.mlp.down_proj.weight", LX_GRAPH_BLOCK, blk[5], 0, C, F, NULL);
  hf_norm(t, "model.norm", LX_GRAPH_EPILOGUE, epi[0], false, C);
  if (!ir->model.tied_embeddings) hf_add(t, "lm_head.weight", LX_GRAPH_EPILOGUE, epi[1], 0, V, C, NULL);
}

typedef enum { HF_NONE, HF_GPT2, HF_LLAMA } hf_family;

static hf_family hf_family_of(const lx_ir *ir) {
  return emit_is_gpt2(ir) ? HF_GPT2 : is_llama(ir) ? HF_LLAMA : HF_NONE;
}

/* The file's tensors in file order: the prologue's, a block's (once per
 * layer), the epilogue's. */
static hf_table hf_table_of(const lx_ir *ir) {
  hf_table t = {.n = 0};
  hf_family family = hf_family_of(ir);
  if (family == HF_GPT2) hf_gpt2(ir, &t);
  if (family == HF_LLAMA) hf_llama(ir, &t);
  return t;
}

int emit_hf_parts(const lx_ir *ir, lx_graph_id g, int op, int k, int tensor[EMIT_HF_MAX_PARTS],
                  long long first_row[EMIT_HF_MAX_PARTS]) {
  hf_table t = hf_table_of(ir);
  const lx_op *o = &lx_graph_of(ir, g)->ops[op];
  if (o->kind == LX_OP_LM_HEAD && ir->model.tied_embeddings) { /* the tied head's copy is the embedding */
    int pro[8];
    param_ops(&ir->prologue, pro, 8);
    g = LX_GRAPH_PROLOGUE, op = pro[0];
  }
  int n = 0;
  for (int i = 0; i < t.n && n < EMIT_HF_MAX_PARTS; i++)
    if (t.e[i].graph == g && t.e[i].op == op && t.e[i].k == k)
      tensor[n] = i, first_row[n++] = t.e[i].first_row;
  return n;
}

/* ---- printing ------------------------------------------------------------------------ */

/* config.json as transformers reads it, but for the norms' epsilon: the
 * program adds that from its kernels' constant (lx_safetensors.h). */
static cJSON *hf_config(const lx_ir *ir, hf_family family) {
  const lx_model_config *m = &ir->model;
  cJSON *doc = lx_json_document();
  lx_json_add_string(lx_json_add_array(doc, "architectures"), NULL,
                     family == HF_GPT2 ? "GPT2LMHeadModel" : "LlamaForCausalLM");
  lx_json_add_string(doc, "model_type", family == HF_GPT2 ? "gpt2" : "llama");
  lx_json_add_int(doc, "vocab_size", m->vocab);
  if (family == HF_GPT2) {
    int ops[8];
    param_ops(&ir->block, ops, 8);
    lx_json_add_int(doc, "n_positions", m->seq_len);
    lx_json_add_int(doc, "n_embd", m->hidden);
    lx_json_add_int(doc, "n_layer", m->layers);
    lx_json_add_int(doc, "n_head", m->heads);
    lx_json_add_int(doc, "n_inner", ir->block.ops[ops[4]].out_width);
    lx_json_add_string(doc, "activation_function", "gelu_new"); /* the tanh approximation */
    lx_json_add_number(doc, "resid_pdrop", m->dropout);
    lx_json_add_number(doc, "embd_pdrop", m->dropout);
    lx_json_add_number(doc, "attn_pdrop", m->dropout);
  } else {
    llama_dims d = llama_dims_of(ir);
    lx_json_add_int(doc, "hidden_size", m->hidden);
    lx_json_add_int(doc, "intermediate_size", d.ffn);
    lx_json_add_int(doc, "num_hidden_layers", m->layers);
    lx_json_add_int(doc, "num_attention_heads", d.heads);
    lx_json_add_int(doc, "num_key_value_heads", d.kv_heads);
    lx_json_add_int(doc, "head_dim", d.head_dim);
    lx_json_add_int(doc, "max_position_embeddings", m->seq_len);
    lx_json_add_number(doc, "rope_theta", m->rope_theta);
    lx_json_add_string(doc, "hidden_act", "silu");
    lx_json_add_bool(doc, "attention_bias", false);
    lx_json_add_bool(doc, "mlp_bias", false);
  }
  lx_json_add_bool(doc, "tie_word_embeddings", m->tied_embeddings);
  /* the model file names no special tokens; without these, transformers
   * would assume GPT-2's 50256 or Llama's 1 and 2 */
  lx_json_add_null(doc, "bos_token_id");
  lx_json_add_null(doc, "eos_token_id");
  return doc;
}

static void print_config(FILE *out, const lx_ir *ir, hf_family family) {
  char *text = NULL;
  size_t size = 0;
  FILE *mem = lx_memory_stream(&text, &size);
  lx_json_write(hf_config(ir, family), false, mem);
  fclose(mem);
  text[strcspn(text, "\n")] = '\0';
  fprintf(out, "#define HF_NORM_EPS_KEY \"%s\"\n#define HF_CONFIG",
          family == HF_GPT2 ? "layer_norm_epsilon" : "rms_norm_eps");
  /* a member per line: its strings hold no `,"` (the names are the ones above) */
  for (char *member = text, *next; member; member = next) {
    next = strstr(member, ",\"");
    if (next) *++next = '\0';
    fputs(" \\\n  ", out);
    lx_put_c_string(out, member);
    if (next) *next = '"';
  }
  fputc('\n', out);
  free(text);
}

void emit_hf_model(FILE *out, const lx_ir *ir) {
  hf_family family = hf_family_of(ir);
  fprintf(out,
          "\n/* The model as a Hugging Face checkpoint (--export-hf, --init): its tensors in\n"
          " * file order, a block's once per layer; name, section (0 prologue, 1 block,\n"
          " * 2 epilogue), dimensions, shape in the file, layout of the parameter's rows\n"
          " * there, head size (rope pairs), whether a longer file fits (positions). */\n"
          "#define HF_CHECKPOINT %d\n",
          family != HF_NONE);
  if (family == HF_NONE) return;
  hf_table t = hf_table_of(ir);
  fprintf(out, "static const lx_hf_tensor hf_tensors[] = {\n");
  for (int i = 0; i < t.n; i++) {
    const hf_entry *e = &t.e[i];
    fputs("  {", out);
    lx_put_c_string(out, e->name);
    fprintf(out, ", %d, %d, {%lldLL, %lldLL}, %s, %d, %d},\n", (int)e->graph, e->dims, e->shape[0],
            e->shape[1], e->layout, e->head_dim, e->positions ? 1 : 0);
  }
  fprintf(out, "};\nenum { HF_TENSORS = %d, HF_LAYERS = %d };\n", t.n, ir->model.layers);
  print_config(out, ir, family);
}
