/* lx_stage.h — what the training loop of lx_loop.h asks of an emitted stage
 * program, CPU or CUDA: the stage file's definitions it reads, the defaults
 * of those only some programs define, and the functions its target defines.
 * Valid C11 and C++17.
 *
 * Included (through lx_loop.h, by the target's main: lx_main.h,
 * lx_cuda_main.h) once the stage file has defined its sizes (STAGE, STAGES,
 * MICRO_BATCHES, B, T, BT, V, TENSOR_PARALLEL, DATA_PARALLEL), TRAINING_*
 * settings, TP_RANK, replica, param_tensors, GPT2_CHECKPOINT and
 * gpt2_header, HF_CHECKPOINT and (when 1) hf_tensors, hf_parts and
 * HF_CONFIG, and the target's main LX_TARGET_NORM_EPS (its norms' epsilon,
 * which config.json states). The target then defines the functions declared
 * below, the only steps that differ. Every rank runs the same loop, so each
 * collective inside them is reached by all. */
#ifndef LX_STAGE_H
#define LX_STAGE_H

#include "lx_errors.h" /* first: it sets _POSIX_C_SOURCE */

#include "lx_data.h"
#include "lx_options.h"
#include "lx_params.h"

/* Fine-tuning's programs define them: the first PARAM_TENSORS of
 * param_tensors are trained, the rest frozen (elements PARAM_ELEMENTS to
 * ALL_PARAM_ELEMENTS of the params region), read from --init and never changed. */
#ifndef FINETUNE
#define FINETUNE 0
#define ALL_PARAM_TENSORS PARAM_TENSORS
#define ALL_PARAM_ELEMENTS PARAM_ELEMENTS
#endif

/* PipeDream-2BW programs define it: consecutive steps overlap, the next
 * one's first forwards running in this one's drain, and the weights have a
 * second version (the one before the last update) that the steps use. */
#ifndef STEPS_OVERLAP
#define STEPS_OVERLAP 0
#endif

/* One optimizer step at learning rate lr under the run's AdamW and clip
 * settings: the mean loss of its micro-batches over the replicas, and the
 * global gradient norm, known on every rank. `continues`: the next step
 * follows on this one's pipeline (under 2BW it starts in this one's drain). */
static double train_step(const lx_train_settings *train, int step, double lr, double *grad_norm,
                         int continues);
/* The mean loss of `batches` forward-only steps on val from its start. */
static double validation_loss(lx_loader *val, int batches, int step);
/* Collective: the weights as llm.c's GPT-2 checkpoint at llmc
 * (write_checkpoint) and as a Hugging Face checkpoint in directory hf
 * (write_hf_checkpoint); NULL: not that one. */
static void export_weights(const char *llmc, const char *hf);
/* The elements [*lo, *hi) of tensor t (params-region indices, within the
 * whole tensor it is called with) that this rank writes into a checkpoint;
 * together the ranks write each element once. */
static void saved_part(const lx_param_tensor *t, long long *lo, long long *hi);
/* This rank's training state in host memory, as fp32 (lx_state.h): its
 * weights at their params-region indices (arrays[0], PARAM_ELEMENTS; the
 * CUDA program's fp32 masters, of the shares it updates), the AdamW
 * moments it holds (arrays[1], arrays[2]: OPTIMIZER_ELEMENTS, at
 * moments_of's indices), and under 2BW the previous weights (arrays[3],
 * PARAM_ELEMENTS; else NULL). saving: fill them with the current values first. */
static void state_arrays(float *arrays[4], int saving);
/* The elements [*lo, *hi) of t whose moments this rank holds (its replica's
 * share under ZeRO-1); returns where the moments of *lo are. */
static long long moments_of(const lx_param_tensor *t, long long *lo, long long *hi);
/* After a resume filled the arrays: make them the state the steps use. */
static void state_restored(void);
/* After state_arrays(..., 1): is every weight this rank saves finite? */
static int weights_finite(void);

/* A double build (the CPU's gradient check) defines it 0: llm.c's files hold fp32. */
#ifndef CHECKPOINT_FP32
#define CHECKPOINT_FP32 1
#endif

#endif
