/*
 * x86_avx2_vit.c - the float kernels of the vision encoder's attention and MLP:
 *   sgemm_f32      C[m][n] = alpha * A[m][k] . B[k][n] (scores = Q.K^T, output = P.V)
 *   exp_sum_f32    the softmax numerator exp(x - max) and its sum
 *   gelu_tanh_f32  x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3): the tanh GELU written
 *                  without tanh (0.5 (1 + tanh u) = e / (e + 1), e = exp(2u))
 * Reference: kernels_scalar.c (double sums, libm expf/tanhf); the tests bound the difference.
 *
 * exp: Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, Cephes' degree-6 polynomial for
 * exp(r), 2^n through the exponent bits; inputs below -87.3 give 0 (the smallest normal float
 * is exp(-87.34)), inputs are clamped at 88. Relative error about 2 ulp.
 */
#if defined(__x86_64__)

#include "x86_avx2.h"

EV_AVX2_INLINE __m256 avx2_exp(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.33654475f);
    const __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_GE_OQ);   /* 0 where x < lo or NaN */
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.0f)), lo);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n),
                                                         _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), underflow);
}

/* lanes [0, n) set, for the masked tail of a row (n < 8) */
EV_AVX2_INLINE __m256i tail_mask(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

EV_AVX2 float ev_avx2_exp_sum_f32(float *x, int64_t n, float max) {
    const __m256 m = _mm256_set1_ps(max);
    __m256 s0 = _mm256_setzero_ps(), s1 = s0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 a = avx2_exp(_mm256_sub_ps(_mm256_loadu_ps(x + i), m));
        __m256 b = avx2_exp(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), m));
        _mm256_storeu_ps(x + i, a);
        _mm256_storeu_ps(x + i + 8, b);
        s0 = _mm256_add_ps(s0, a);
        s1 = _mm256_add_ps(s1, b);
    }
    for (; i < n; i += 8) {
        const __m256i mask = tail_mask(n - i);
        __m256 a = avx2_exp(_mm256_sub_ps(_mm256_maskload_ps(x + i, mask), m));
        a = _mm256_and_ps(a, _mm256_castsi256_ps(mask));
        _mm256_maskstore_ps(x + i, mask, a);
        s0 = _mm256_add_ps(s0, a);
    }
    return avx2_hsum(_mm256_add_ps(s0, s1));
}

EV_AVX2_INLINE __m256 gelu8(__m256 v) {
    const __m256 c2 = _mm256_set1_ps(2.0f * 0.7978845608028654f);
    const __m256 v3 = _mm256_mul_ps(_mm256_mul_ps(v, v), v);
    const __m256 two_u = _mm256_mul_ps(c2, _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), v3, v));
    const __m256 e = avx2_exp(two_u);
    return _mm256_mul_ps(v, _mm256_div_ps(e, _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
}

EV_AVX2 void ev_avx2_gelu_tanh_f32(float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, gelu8(_mm256_loadu_ps(x + i)));
    if (i < n) {
        const __m256i mask = tail_mask(n - i);
        _mm256_maskstore_ps(x + i, mask, gelu8(_mm256_maskload_ps(x + i, mask)));
    }
}

/* ---- sgemm: 6 rows x 16 columns per tile (12 accumulators), A broadcast, B rows streamed --
 * Column blocks outside, row blocks inside: the B slice of a column block (k rows of 16
 * floats, ldb apart: Q.K^T reads 64 rows of K^T, 4 KiB) stays in L1 while every row block of
 * A passes over it, instead of all of B streaming from L2 once per row block. */

#define SG_MR 6

/* R rows x (8 V) columns of C over all of k; the last vector masked when `masked` (V == 1). */
EV_AVX2_INLINE void sg_tile(const int R, const int V, const int masked, int64_t k, float alpha,
                            const float *a, int64_t lda, const float *b, int64_t ldb, float *c,
                            int64_t ldc, __m256i mask) {
    __m256 acc[SG_MR][2];
#pragma GCC unroll 6
    for (int i = 0; i < R; i++)
#pragma GCC unroll 2
        for (int j = 0; j < V; j++) acc[i][j] = _mm256_setzero_ps();
#pragma GCC unroll 4
    for (int64_t p = 0; p < k; p++) {
        __m256 bv[2];
#pragma GCC unroll 2
        for (int j = 0; j < V; j++)
            bv[j] = masked ? _mm256_maskload_ps(b + p * ldb + 8 * j, mask)
                           : _mm256_loadu_ps(b + p * ldb + 8 * j);
#pragma GCC unroll 6
        for (int i = 0; i < R; i++) {
            const __m256 av = _mm256_broadcast_ss(a + i * lda + p);
#pragma GCC unroll 2
            for (int j = 0; j < V; j++) acc[i][j] = _mm256_fmadd_ps(av, bv[j], acc[i][j]);
        }
    }
    const __m256 al = _mm256_set1_ps(alpha);
#pragma GCC unroll 6
    for (int i = 0; i < R; i++)
#pragma GCC unroll 2
        for (int j = 0; j < V; j++) {
            const __m256 v = _mm256_mul_ps(acc[i][j], al);
            if (masked) _mm256_maskstore_ps(c + i * ldc + 8 * j, mask, v);
            else _mm256_storeu_ps(c + i * ldc + 8 * j, v);
        }
}

#define SG_TILE(NAME, R, V, MASKED)                                                          \
    EV_AVX2 __attribute__((noinline)) static void NAME(                                      \
        int64_t k, float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,   \
        float *c, int64_t ldc, __m256i mask) {                                              \
        sg_tile(R, V, MASKED, k, alpha, a, lda, b, ldb, c, ldc, mask);                      \
    }
SG_TILE(sg_6x16, 6, 2, 0)
SG_TILE(sg_6x8, 6, 1, 0)
SG_TILE(sg_6xm, 6, 1, 1)
SG_TILE(sg_4x16, 4, 2, 0)
SG_TILE(sg_4x8, 4, 1, 0)
SG_TILE(sg_4xm, 4, 1, 1)
SG_TILE(sg_1x16, 1, 2, 0)
SG_TILE(sg_1x8, 1, 1, 0)
SG_TILE(sg_1xm, 1, 1, 1)
#undef SG_TILE

typedef void (*sg_fn)(int64_t, float, const float *, int64_t, const float *, int64_t, float *,
                      int64_t, __m256i);

/* one column block (16, 8 or masked < 8 columns) down all m rows: 6-row tiles, then 4, then 1 */
EV_AVX2_INLINE void sg_cols(const sg_fn f6, const sg_fn f4, const sg_fn f1, int64_t m,
                            int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                            int64_t ldb, float *c, int64_t ldc, __m256i mask) {
    int64_t i = 0;
    for (; i + 6 <= m; i += 6) f6(k, alpha, a + i * lda, lda, b, ldb, c + i * ldc, ldc, mask);
    for (; i + 4 <= m; i += 4) f4(k, alpha, a + i * lda, lda, b, ldb, c + i * ldc, ldc, mask);
    for (; i < m; i++) f1(k, alpha, a + i * lda, lda, b, ldb, c + i * ldc, ldc, mask);
}

EV_AVX2 void ev_avx2_sgemm_f32(int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                               int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc) {
    const __m256i none = _mm256_setzero_si256();
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        sg_cols(sg_6x16, sg_4x16, sg_1x16, m, k, alpha, a, lda, b + j, ldb, c + j, ldc, none);
    for (; j + 8 <= n; j += 8)
        sg_cols(sg_6x8, sg_4x8, sg_1x8, m, k, alpha, a, lda, b + j, ldb, c + j, ldc, none);
    if (j < n)
        sg_cols(sg_6xm, sg_4xm, sg_1xm, m, k, alpha, a, lda, b + j, ldb, c + j, ldc,
                tail_mask(n - j));
}

#endif
