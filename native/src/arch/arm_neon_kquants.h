/* arm_neon_kquants.h - the NEON Q8_K activation quantiser (arm_neon_kquants.c). */
#ifndef EDGEVLM_ARM_NEON_KQUANTS_H
#define EDGEVLM_ARM_NEON_KQUANTS_H
#if defined(__aarch64__)

#include "../kernels.h"

/* x[n] -> y[n/256]: bit-identical to ev_quantize_row_q8_K */
void ev_neon_quantize_q8_K(const float *x, ev_block_q8_K *y, int64_t n);

#endif
#endif
