/* arm_neon_sgemm.h - the many-token product on float activations (arm_neon_sgemm.c). */
#ifndef EDGEVLM_ARM_NEON_SGEMM_H
#define EDGEVLM_ARM_NEON_SGEMM_H
#if defined(__aarch64__)

#include "../kernels.h"

/* ev_gemm_fn for every weight type (a->w_type picks the dequantiser) */
void ev_neon_gemm_dq(const ev_gemm_args *a, int64_t r0, int64_t r1);

#endif
#endif
