/* arm_neon_kquants.h - the NEON Q8_K activation quantiser and K-quant row dequantisers
 * (arm_neon_kquants.c). */
#ifndef EDGEVLM_ARM_NEON_KQUANTS_H
#define EDGEVLM_ARM_NEON_KQUANTS_H
#if defined(__aarch64__)

#include "../kernels.h"

/* x[n] -> y[n/256]: bit-identical to ev_quantize_row_q8_K */
void ev_neon_quantize_q8_K(const float *x, ev_block_q8_K *y, int64_t n);
/* n/256 super-blocks -> dst[n]: bit-identical to the type table's to_float (gemm_dq's panels) */
void ev_neon_dequantize_q4_K(const void *src, float *dst, int64_t n);
void ev_neon_dequantize_q6_K(const void *src, float *dst, int64_t n);

#endif
#endif
