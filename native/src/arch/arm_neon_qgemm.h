/* arm_neon_qgemm.h - the many-token integer products of Q8_0/Q4_0 weights on aarch64 with SDOT
 * (arm_neon_qgemm.c), for arm_neon.c's dotprod sets. The gemm functions run only where the
 * CPU has dotprod (they are compiled for it under `#pragma GCC target`); quantize_i16 is
 * plain NEON. */
#ifndef EDGEVLM_ARM_NEON_QGEMM_H
#define EDGEVLM_ARM_NEON_QGEMM_H
#if defined(__aarch64__)

#include <stdint.h>

#include "../kernels.h"

/* gemm_q16x (the default "exact" precision): int16 activations from quantize_i16 */
void ev_neon_gemm_q16x_q8_0(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_neon_gemm_q16x_q4_0(const ev_gemm_args *a, int64_t r0, int64_t r1);
/* gemm_q8x (the "fast" precision): Q8_0 activations, ggml's arithmetic */
void ev_neon_gemm_q8x_q8_0(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_neon_gemm_q8x_q4_0(const ev_gemm_args *a, int64_t r0, int64_t r1);
/* each block of 32 of x[n] as int16 q[32] with d = amax / 32767 (d[n / 32]), rounded to
 * nearest even: bit-identical to ev_avx2_quantize_i16 */
void ev_neon_quantize_i16(const float *x, int16_t *q, float *d, int64_t n);

#endif
#endif
