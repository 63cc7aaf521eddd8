/*
 * x86_avx512_gemv.c - decode (one token) against F16/BF16 weights with 512-bit vectors:
 * y[r] = W[r] . x (+ bias[r]) for one thread's rows [r0, r1), float32 activations and sums,
 * the weights converted exactly (vcvtph2ps, or a 16-bit shift for bf16). Per 16 weights: one
 * load-and-widen, one shift (bf16) and one FMA, half the instructions of the AVX2 tile per
 * byte. Rows go one at a time, each thread's rows one sequential stream of bytes, as ggml's
 * vec_dot rows: until 2026-12-03 rows went 4 side by side (4 streams a page apart) with a
 * software prefetch of the next tile's rows, and a 2B BF16/F16 decode read its weights at
 * ~20 GB/s where this reads them at ~24-26 (5.6-6.1 -> 6.7-7.9 tok/s, the engine's decode,
 * 2 threads, runs alternating on a busy VM; bench/README-kernels.md). More tokens: the AVX2
 * set's tiles. Reference: the scalar set's vec_dot (test_kernels.c).
 */
#if defined(__x86_64__)

#include "x86_avx512.h"

/* 16 weights of a row from column k as float32 (lanes past mask zero). */
EV_AVX512_INLINE __m512 load16_w(const uint8_t *row, int64_t k, __mmask16 m, const int f16) {
    const __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)row + k);
    if (f16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Row r against the one token: 4 accumulators over 64 columns a step (the FMA latency), the
 * columns past the last multiple of 16 masked. */
EV_AVX512_INLINE void gemv_row(const ev_gemm_args *a, int64_t r, const int f16) {
    const float *x = (const float *)a->x;
    const int64_t n = a->n_in;
    const uint8_t *w = a->w + r * a->w_stride;
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                     _mm512_setzero_ps()};
    int64_t k = 0;
    for (; k + 64 <= n; k += 64) {
#pragma GCC unroll 4
        for (int h = 0; h < 4; h++)
            acc[h] = _mm512_fmadd_ps(load16_w(w, k + 16 * h, (__mmask16)0xffff, f16),
                                     _mm512_loadu_ps(x + k + 16 * h), acc[h]);
    }
    for (; k < n; k += 16) {
        const __mmask16 m = n - k >= 16 ? (__mmask16)0xffff : avx512_mask16(n - k);
        acc[0] = _mm512_fmadd_ps(load16_w(w, k, m, f16), _mm512_maskz_loadu_ps(m, x + k), acc[0]);
    }
    const __m512 sum = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
    a->y[r] = _mm512_reduce_add_ps(sum) + (a->bias ? a->bias[r] : 0.0f);
}

/* The thread's rows one after the other: adjacent rows are adjacent bytes, so the weights are
 * one sequential stream. */
EV_AVX512_INLINE void gemv(const ev_gemm_args *a, int64_t r0, int64_t r1, const int f16) {
    for (int64_t r = r0; r < r1; r++) gemv_row(a, r, f16);
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
