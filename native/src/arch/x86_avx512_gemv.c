/*
 * x86_avx512_gemv.c - decode (one token) against F16/BF16 weights with 512-bit vectors:
 * y[r] = W[r] . x (+ bias[r]) for one thread's rows [r0, r1), float32 activations and sums,
 * the weights converted exactly (vcvtph2ps, or a 16-bit shift for bf16). Per 16 weights and
 * row: one load-and-widen, one shift (bf16) and one FMA, half the instructions of the AVX2
 * tile per byte: the AVX2 decode of a 2B BF16 model ran below the memory's speed (6.2 tok/s
 * against llama.cpp's 10.8 on the same AVX-512 host, 2026-12-01). Rows go 4 at a time, as in
 * the AVX2 tiles; the columns past the last multiple of 16 are masked loads. More tokens: the
 * AVX2 set's tiles. Each 64 bytes of a row also prefetch the same columns of the next tile's
 * rows: rows of 2048 weights are one 4 KiB page, where the hardware prefetcher starts again
 * (x86_avx2_gemm.c float_gemv4). Reference: the scalar set's vec_dot (test_kernels.c).
 */
#if defined(__x86_64__)

#include "x86_avx512.h"

#define GEMV_R 4   /* rows per tile */

/* 16 weights of a row from column k as float32 (lanes past mask zero). */
EV_AVX512_INLINE __m512 load16_w(const uint8_t *row, int64_t k, __mmask16 m, const int f16) {
    const __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)row + k);
    if (f16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Rows r..r+R-1 (R <= 4, compile-time after inlining) against the one token. */
EV_AVX512_INLINE void gemv_tile(const ev_gemm_args *a, int64_t r, const int R, const int f16) {
    const float *x = (const float *)a->x;
    const int64_t n = a->n_in;
    const uint8_t *w[GEMV_R];
    __m512 acc[GEMV_R];
#pragma GCC unroll 4
    for (int i = 0; i < R; i++) {
        w[i] = a->w + (r + i) * a->w_stride;
        acc[i] = _mm512_setzero_ps();
    }
    const int64_t ahead = GEMV_R * a->w_stride;   /* the next tile's rows */
    int64_t k = 0;
    for (; k + 32 <= n; k += 32) {
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) _mm_prefetch((const char *)(w[i] + ahead + 2 * k), _MM_HINT_T0);
#pragma GCC unroll 2
        for (int h = 0; h < 32; h += 16) {
            const __m512 xv = _mm512_loadu_ps(x + k + h);
#pragma GCC unroll 4
            for (int i = 0; i < R; i++)
                acc[i] = _mm512_fmadd_ps(load16_w(w[i], k + h, (__mmask16)0xffff, f16), xv, acc[i]);
        }
    }
    for (; k + 16 <= n; k += 16) {
        const __m512 xv = _mm512_loadu_ps(x + k);
#pragma GCC unroll 4
        for (int i = 0; i < R; i++)
            acc[i] = _mm512_fmadd_ps(load16_w(w[i], k, (__mmask16)0xffff, f16), xv, acc[i]);
    }
    if (k < n) {
        const __mmask16 m = avx512_mask16(n - k);
        const __m512 xv = _mm512_maskz_loadu_ps(m, x + k);
#pragma GCC unroll 4
        for (int i = 0; i < R; i++)
            acc[i] = _mm512_fmadd_ps(load16_w(w[i], k, m, f16), xv, acc[i]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
        a->y[r + i] = _mm512_reduce_add_ps(acc[i]) + (a->bias ? a->bias[r + i] : 0.0f);
}

EV_AVX512_INLINE void gemv(const ev_gemm_args *a, int64_t r0, int64_t r1, const int f16) {
    int64_t r = r0;
    for (; r + GEMV_R <= r1; r += GEMV_R) gemv_tile(a, r, GEMV_R, f16);
    for (; r < r1; r++) gemv_tile(a, r, 1, f16);
}

EV_AVX512 void ev_avx512_gemm_f16(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    if (a->n_tok == 1) gemv(a, r0, r1, 1);
    else ev_avx2_gemm_f16(a, r0, r1);
}

EV_AVX512 void ev_avx512_gemm_bf16(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    if (a->n_tok == 1) gemv(a, r0, r1, 0);
    else ev_avx2_gemm_bf16(a, r0, r1);
}

#endif
