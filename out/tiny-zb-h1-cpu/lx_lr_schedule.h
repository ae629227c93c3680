/* lx_lr_schedule.h — the learning rate of each step, the same on both
 * targets (lx_loop.h). Valid C11 and C++17. */
#ifndef LX_LR_SCHEDULE_H
#define LX_LR_SCHEDULE_H

#include <math.h>

enum { LX_SCHED_CONSTANT = 1, LX_SCHED_COSINE, LX_SCHED_LINEAR }; /* = enum lx_lr_schedule */

/* The model language's name of a schedule (LR_COSINE: "cosine"), as --lr-schedule takes it. */
static inline const char *lx_lr_schedule_label(int kind) {
  static const char *const names[] = {"?", "constant", "cosine", "linear"};
  return kind >= LX_SCHED_CONSTANT && kind <= LX_SCHED_LINEAR ? names[kind] : names[0];
}

/* Linear warm-up from lr / warmup to lr over the first `warmup` steps, then a
 * constant, cosine or linear decay to min_lr at the last step. step counts
 * from 1. */
static inline double lx_learning_rate(int step, int warmup, int total_steps, double lr, double min_lr,
                                      int kind) {
  if (step <= warmup) return lr * step / warmup;
  if (kind == LX_SCHED_CONSTANT || total_steps <= warmup) return lr;
  double progress = (double)(step - warmup) / (total_steps - warmup);
  if (progress > 1) progress = 1;
  double decay = kind == LX_SCHED_COSINE ? 0.5 * (1 + cos(3.14159265358979323846 * progress)) : 1 - progress;
  return min_lr + (lr - min_lr) * decay;
}

#endif
