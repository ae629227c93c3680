/* verify_comm.c — checks 3 to 5 of the verifier (verify.h): across stages,
 * every send meets its receive, the schedule cannot deadlock, and each
 * channel (communicator) of a stage is used from one stream. A send and its receive
 * are a rendezvous here, as in the simulator. */
#include <stdio.h>
#include <stdlib.h>

#include "alloc.h"
#include "verify/verify_report.h"

/* ---- check 3: sends and receives match ------------------------------------------------- */

static bool is_send(lx_instr_kind k) { return k == LX_I_SEND_ACT || k == LX_I_SEND_GRAD; }
static bool is_recv(lx_instr_kind k) { return k == LX_I_RECV_ACT || k == LX_I_RECV_GRAD; }

/* Does point-to-point instruction `in` of stage `s` name a real peer, chunk
 * (its own, and for a send the receiver's) and micro-batch? */
static bool well_formed_p2p(reporter *r, const lx_pipeline *p, instr_at at) {
  const lx_instr *in = lx_verify_instr(p, at);
  int chunks = p->stages[at.stage].n_chunks;
  int peer_chunk = is_send(in->kind) ? lx_peer_chunk(p, at.stage, in) : in->chunk;
  if (in->peer >= 0 && in->peer < p->pp && in->peer != at.stage && in->mb >= 0 &&
      in->mb < lx_micro_batch_ids(p) && in->chunk >= 0 && in->chunk < chunks && peer_chunk >= 0 &&
      peer_chunk < chunks)
    return true;
  lx_verify_report(r, "send or receive names no valid peer stage, chunk or micro-batch", at, NO_INSTR);
  return false;
}

typedef struct {
  instr_at at;
  int matches;    /* receives found for this send */
  int recv_order; /* position of its receive among the receiver's receives from this sender */
} send_info;

/* The receive slot of (sender, kind, receiving chunk, mb) on a receiving stage. */
static int slot_of(const lx_pipeline *p, int sender, bool grad, int chunk, int mb) {
  return ((sender * 2 + grad) * p->stages[0].n_chunks + chunk) * lx_micro_batch_ids(p) + mb;
}

static int receive_slots(const lx_pipeline *p) {
  return p->pp * 2 * p->stages[0].n_chunks * lx_micro_batch_ids(p);
}

/* Receives of stage `t`, indexed by (sender, kind, mb): their position in
 * t's order of receives from that sender, or -1; duplicates are reported. */
static int *index_receives(reporter *r, const lx_pipeline *p, int t, instr_at *where, bool *valid) {
  int n = receive_slots(p);
  int *order = lx_malloc(sizeof *order * (size_t)n),
      *per_sender = lx_calloc((size_t)p->pp, sizeof *per_sender);
  for (int i = 0; i < n; i++)
    order[i] = -1;
  for (int k = 0; k < NS; k++)
    for (int i = 0; i < p->stages[t].streams[k].count; i++) {
      instr_at at = {t, k, i};
      const lx_instr *in = lx_verify_instr(p, at);
      if (!is_recv(in->kind)) continue;
      if (!well_formed_p2p(r, p, at)) {
        *valid = false;
        continue;
      }
      int slot = slot_of(p, in->peer, in->kind == LX_I_RECV_GRAD, in->chunk, in->mb);
      if (order[slot] >= 0) {
        lx_verify_report(r, "two receives of the same message", where[slot], at);
        continue;
      }
      order[slot] = per_sender[in->peer]++;
      where[slot] = at;
    }
  free(per_sender);
  return order;
}

static void check_stage_sends(reporter *r, const lx_pipeline *p, int s, int *const *recv_order,
                              instr_at *const *recv_at, int **matched) {
  int *last_order = lx_malloc(sizeof *last_order * (size_t)p->pp);
  instr_at *last_send = lx_malloc(sizeof *last_send * (size_t)p->pp);
  for (int t = 0; t < p->pp; t++)
    last_order[t] = -1, last_send[t] = NO_INSTR;
  for (int k = 0; k < NS; k++)
    for (int i = 0; i < p->stages[s].streams[k].count; i++) {
      instr_at at = {s, k, i};
      const lx_instr *in = lx_verify_instr(p, at);
      if (!is_send(in->kind) || !well_formed_p2p(r, p, at)) continue;
      int slot = slot_of(p, s, in->kind == LX_I_SEND_GRAD, lx_peer_chunk(p, s, in), in->mb), t = in->peer;
      if (recv_order[t][slot] < 0) {
        lx_verify_report(r, "send has no matching receive on its peer", at, NO_INSTR);
        continue;
      }
      if (matched[t][slot]++) {
        lx_verify_report(r, "two sends of the same message", at, recv_at[t][slot]);
        continue;
      }
      if (lx_verify_instr(p, recv_at[t][slot])->bytes != in->bytes)
        lx_verify_report(r, "send and receive disagree on the size", at, recv_at[t][slot]);
      if (recv_order[t][slot] < last_order[t])
        lx_verify_report(r, "sends to a stage run in another order than its receives", last_send[t], at);
      last_order[t] = recv_order[t][slot];
      last_send[t] = at;
    }
  free(last_order);
  free(last_send);
}

/* Returns false when a send or receive is malformed (the deadlock search
 * then cannot follow it). */
bool lx_verify_matching(reporter *r, const lx_pipeline *p) {
  bool valid = true;
  int n = receive_slots(p);
  int **order = lx_malloc(sizeof *order * (size_t)p->pp),
      **matched = lx_malloc(sizeof *matched * (size_t)p->pp);
  instr_at **where = lx_malloc(sizeof *where * (size_t)p->pp);
  for (int t = 0; t < p->pp; t++) {
    where[t] = lx_malloc(sizeof **where * (size_t)n);
    matched[t] = lx_calloc((size_t)n, sizeof **matched);
    order[t] = index_receives(r, p, t, where[t], &valid);
  }
  for (int s = 0; s < p->pp; s++)
    check_stage_sends(r, p, s, order, where, matched);
  for (int t = 0; t < p->pp; t++) {
    for (int slot = 0; slot < n; slot++)
      if (order[t][slot] >= 0 && !matched[t][slot])
        lx_verify_report(r, "receive has no matching send", where[t][slot], NO_INSTR);
    free(order[t]);
    free(matched[t]);
    free(where[t]);
  }
  free(order);
  free(matched);
  free(where);
  return valid;
}

/* ---- check 4: no deadlock ----------------------------------------------------------------- */

/* Runs every stream of every stage as far as it can, with no notion of
 * time: a WAIT after its RECORD, a send together with its receive when that
 * receive is the head of the peer's stream (a rendezvous, as NCCL's
 * point-to-point is and as the simulator models it). Anything left is stuck. */
typedef struct {
  const lx_pipeline *p;
  int *next;       /* [stage * NS + stream] */
  bool **recorded; /* [stage][event] */
} token_game;

static const lx_instr *game_head(const token_game *g, int s, int k) {
  const lx_instr_list *list = &g->p->stages[s].streams[k];
  int i = g->next[s * NS + k];
  return i < list->count ? &list->items[i] : NULL;
}

/* The receive stream of stage `t` whose head is the receive of `send` from `s`, or -1. */
static int matching_recv_stream(const token_game *g, int s, const lx_instr *send) {
  for (int k = 0; k < NS; k++) {
    const lx_instr *h = game_head(g, send->peer, k);
    if (h && lx_transfer_matches(g->p, s, send, h)) return k;
  }
  return -1;
}

static bool game_step(token_game *g, int s, int k) {
  const lx_instr *in = game_head(g, s, k);
  if (!in || is_recv(in->kind)) return false; /* a receive runs with its send */
  if (in->kind == LX_I_WAIT && !g->recorded[s][in->event]) return false;
  if (in->kind == LX_I_RECORD) g->recorded[s][in->event] = true;
  if (is_send(in->kind)) {
    int rk = matching_recv_stream(g, s, in);
    if (rk < 0) return false;
    g->next[in->peer * NS + rk]++;
  }
  g->next[s * NS + k]++;
  return true;
}

static void report_stuck(reporter *r, const token_game *g) {
  int stuck = 0;
  for (int s = 0; s < g->p->pp; s++)
    for (int k = 0; k < NS; k++) {
      const lx_instr *in = game_head(g, s, k);
      if (!in) continue;
      if (!stuck++)
        lx_verify_report(r, "the schedule deadlocks; first stuck stream head", (instr_at){s, k, g->next[s * NS + k]},
               NO_INSTR);
      char text[TEXT];
      lx_verify_describe(g->p, (instr_at){s, k, g->next[s * NS + k]}, text, sizeof text);
      if (stuck <= MAX_PRINTED) fprintf(stderr, "  stuck: %s\n", text);
    }
}

void lx_verify_deadlock_free(reporter *r, const lx_pipeline *p) {
  token_game g = {p, lx_calloc((size_t)p->pp * NS, sizeof(int)), lx_malloc(sizeof(bool *) * (size_t)p->pp)};
  for (int s = 0; s < p->pp; s++)
    g.recorded[s] = lx_calloc((size_t)p->stages[s].n_events + 1, sizeof(bool));
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p->pp; s++)
      for (int k = 0; k < NS; k++)
        while (game_step(&g, s, k))
          progress = true;
  }
  report_stuck(r, &g);
  for (int s = 0; s < p->pp; s++)
    free(g.recorded[s]);
  free(g.recorded);
  free(g.next);
}

/* ---- check 5: one stream per channel ---------------------------------------------------- */

void lx_verify_channels(reporter *r, const lx_pipeline *p) {
  for (int s = 0; s < p->pp; s++) {
    instr_at first[LX_CHANNEL_COUNT];
    for (int c = 0; c < LX_CHANNEL_COUNT; c++)
      first[c] = NO_INSTR;
    for (int k = 0; k < NS; k++)
      for (int i = 0; i < p->stages[s].streams[k].count; i++) {
        instr_at at = {s, k, i};
        lx_channel c = lx_transfer_channel(lx_verify_instr(p, at)->kind);
        if (c == LX_CHANNEL_COUNT) continue;
        if (lx_verify_instr(p, at)->peer != lx_channel_peer(p, s, c))
          lx_verify_report(r, "a transfer to or from a stage its channel does not join", at, NO_INSTR);
        if (first[c].stage < 0)
          first[c] = at;
        else if (first[c].stream != k)
          lx_verify_report(r,
                           "one channel's transfers on two streams (NCCL would run them in the order they "
                           "were issued, across both)",
                           first[c], at);
      }
  }
}
