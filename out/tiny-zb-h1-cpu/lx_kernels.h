/* lx_kernels.h — every CPU kernel of the emitted training programs, one
 * concern per header (see lx_common.h for the conventions they share). */
#ifndef LX_KERNELS_H
#define LX_KERNELS_H

#include "lx_adamw.h"
#include "lx_attention.h"
#include "lx_common.h"
#include "lx_elementwise.h"
#include "lx_embedding.h"
#include "lx_init.h"
#include "lx_loss.h"
#include "lx_matmul.h"
#include "lx_norm.h"
#include "lx_rng.h"

#endif
