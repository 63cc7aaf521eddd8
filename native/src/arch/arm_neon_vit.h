/* arm_neon_vit.h - the ViT's float kernels on aarch64 (arm_neon_vit.c), for arm_neon.c's sets. */
#ifndef EDGEVLM_ARM_NEON_VIT_H
#define EDGEVLM_ARM_NEON_VIT_H
#if defined(__aarch64__)

#include <stdint.h>

void ev_neon_sgemm_f32(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                       const float *b, int64_t ldb, float *c, int64_t ldc);
float ev_neon_exp_sum_f32(float *x, int64_t n, float max);
void ev_neon_gelu_tanh_f32(float *x, int64_t n);

#endif
#endif
