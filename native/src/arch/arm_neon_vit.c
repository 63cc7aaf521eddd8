/*
 * arm_neon_vit.c - the float kernels of the vision encoder's attention and MLP on aarch64
 * (the NEON twin of x86_avx2_vit.c; same formulas, same exp polynomial):
 *   sgemm_f32      C[m][n] = alpha * A[m][k] . B[k][n], tiles of 4 rows x 16 columns
 *   exp_sum_f32    exp(x - max) in place and its sum
 *   gelu_tanh_f32  x * e / (e + 1), e = exp(2u), u = sqrt(2/pi) (x + 0.044715 x^3)
 * Reference: kernels_scalar.c. Compiles to nothing off aarch64.
 */
#if defined(__aarch64__)

#include <arm_neon.h>

#include "arm_neon_vit.h"

static inline float32x4_t neon_exp(float32x4_t x) {
    const float32x4_t lo = vdupq_n_f32(-87.33654475f);
    const uint32x4_t keep = vcgeq_f32(x, lo);                     /* 0 where x < lo or NaN */
    x = vmaxq_f32(vminq_f32(x, vdupq_n_f32(88.0f)), lo);
    const float32x4_t n = vrndnq_f32(vmulq_n_f32(x, 1.44269504088896341f));
    float32x4_t r = vfmsq_n_f32(x, n, 0.693359375f);
    r = vfmsq_n_f32(r, n, -2.12194440e-4f);
    float32x4_t p = vdupq_n_f32(1.9875691500e-4f);
    p = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), p, r);
    p = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), p, r);
    p = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), p, vmulq_f32(r, r));
    const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    const float32x4_t y = vmulq_f32(p, vreinterpretq_f32_s32(e));
    return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(y), keep));
}

float ev_neon_exp_sum_f32(float *x, int64_t n, float max) {
    const float32x4_t m = vdupq_n_f32(max);
    float32x4_t s0 = vdupq_n_f32(0.0f), s1 = s0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        float32x4_t a = neon_exp(vsubq_f32(vld1q_f32(x + i), m));
        float32x4_t b = neon_exp(vsubq_f32(vld1q_f32(x + i + 4), m));
        vst1q_f32(x + i, a);
        vst1q_f32(x + i + 4, b);
        s0 = vaddq_f32(s0, a);
        s1 = vaddq_f32(s1, b);
    }
    float sum = vaddvq_f32(vaddq_f32(s0, s1));
    for (; i < n; i++) {
        float t[4] = {x[i] - max, 0, 0, 0};
        x[i] = vgetq_lane_f32(neon_exp(vld1q_f32(t)), 0);
        sum += x[i];
    }
    return sum;
}

static inline float32x4_t gelu4(float32x4_t v) {
    const float32x4_t v3 = vmulq_f32(vmulq_f32(v, v), v);
    const float32x4_t two_u = vmulq_n_f32(vfmaq_n_f32(v, v3, 0.044715f), 2.0f * 0.7978845608028654f);
    const float32x4_t e = neon_exp(two_u);
    return vmulq_f32(v, vdivq_f32(e, vaddq_f32(e, vdupq_n_f32(1.0f))));
}

void ev_neon_gelu_tanh_f32(float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(x + i, gelu4(vld1q_f32(x + i)));
    for (; i < n; i++) {
        float t[4] = {x[i], 0, 0, 0};
        x[i] = vgetq_lane_f32(gelu4(vld1q_f32(t)), 0);
    }
}

/* R rows (<= 4) x 16 columns over all of k */
static inline void sg_tile16(const int R, int64_t k, float alpha, const float *a, int64_t lda,
                             const float *b, int64_t ldb, float *c, int64_t ldc) {
    float32x4_t acc[4][4];
    for (int i = 0; i < R; i++)
        for (int j = 0; j < 4; j++) acc[i][j] = vdupq_n_f32(0.0f);
    for (int64_t p = 0; p < k; p++) {
        const float *bp = b + p * ldb;
        const float32x4_t b0 = vld1q_f32(bp), b1 = vld1q_f32(bp + 4);
        const float32x4_t b2 = vld1q_f32(bp + 8), b3 = vld1q_f32(bp + 12);
        for (int i = 0; i < R; i++) {
            const float av = a[i * lda + p];
            acc[i][0] = vfmaq_n_f32(acc[i][0], b0, av);
            acc[i][1] = vfmaq_n_f32(acc[i][1], b1, av);
            acc[i][2] = vfmaq_n_f32(acc[i][2], b2, av);
            acc[i][3] = vfmaq_n_f32(acc[i][3], b3, av);
        }
    }
    for (int i = 0; i < R; i++)
        for (int j = 0; j < 4; j++) vst1q_f32(c + i * ldc + 4 * j, vmulq_n_f32(acc[i][j], alpha));
}

static void sg_4x16(int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                    int64_t ldb, float *c, int64_t ldc) {
    sg_tile16(4, k, alpha, a, lda, b, ldb, c, ldc);
}

static void sg_1x16(int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                    int64_t ldb, float *c, int64_t ldc) {
    sg_tile16(1, k, alpha, a, lda, b, ldb, c, ldc);
}

/* the columns past the last multiple of 16, one row at a time */
static void sg_tail(int64_t n, int64_t k, float alpha, const float *a, const float *b,
                    int64_t ldb, float *c) {
    for (int64_t j = 0; j < n; j++) {
        float s = 0.0f;
        for (int64_t p = 0; p < k; p++) s += a[p] * b[p * ldb + j];
        c[j] = alpha * s;
    }
}

void ev_neon_sgemm_f32(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                       const float *b, int64_t ldb, float *c, int64_t ldc) {
    const int64_t n16 = n / 16 * 16;
    /* column blocks outside: B's 16-column slice stays in L1 across the row blocks (see
     * x86_avx2_vit.c) */
    for (int64_t j = 0; j < n16; j += 16) {
        int64_t i = 0;
        for (; i + 4 <= m; i += 4)
            sg_4x16(k, alpha, a + i * lda, lda, b + j, ldb, c + i * ldc + j, ldc);
        for (; i < m; i++)
            sg_1x16(k, alpha, a + i * lda, lda, b + j, ldb, c + i * ldc + j, ldc);
    }
    if (n16 < n)
        for (int64_t i = 0; i < m; i++)
            sg_tail(n - n16, k, alpha, a + i * lda, b + n16, ldb, c + i * ldc + n16);
}

#endif
