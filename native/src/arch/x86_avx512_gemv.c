/*
 * x86_avx512_gemv.c - decode (one token) against F16/BF16 weights: y[r] = W[r] . x (+ bias[r])
 * for one thread's rows [r0, r1). A decode reads every weight byte once from DRAM, so what
 * counts is how many bytes the cores keep in flight, not the arithmetic (bench/README-kernels.md,
 * "One-token F16/BF16 rows", has the measurements behind each choice):
 *  - rows go one after the other, each thread's rows one sequential stream (as ggml's vec_dot
 *    rows): the hardware prefetchers follow it; four rows side by side with a software prefetch
 *    read ~20 % slower, a prefetch ahead of the one-row stream 15-25 % slower;
 *  - exact (float32 activations, gemm): 256-bit FMAs, 8 accumulators. On Zen 4 the 512-bit form
 *    of the same loop read 15-30 % slower (each 512-bit load or FMA is two 256-bit halves there);
 *    while the float activations (4 bytes a column) and the weight row (2) fit the 32 KiB L1d
 *    together, i.e. up to EXACT_ONE_ROW_MAX_IN columns, it reads as fast as ggml's f16 row.
 *    Longer rows (the 2B's 6144-column down projection: 24 KiB of activations + 12 KiB of row)
 *    push the activations out of L1 on every row, and the stream halves; there 4 rows go side
 *    by side, so each activation load serves 4 rows (0.49 -> 0.70 of ggml's f16-activation
 *    speed). That is the exact path's floor: any exact form of the activations is 4 bytes a
 *    column.
 *  - fast (gemv_x16, the fast sets): the activations rounded to the weight's own 16-bit type
 *    once per call (f16 for F16, bf16 for BF16: llama.cpp's vec_dot_f16 / vec_dot_bf16
 *    arithmetic), half the bytes, so every row length fits L1 with its row; BF16 multiplies
 *    with vdpbf16ps (32 products an instruction). Sums stay float32.
 * More tokens: the AVX2 set's tiles. Reference: the scalar set's vec_dot (test_kernels.c), on
 * the rounded activations for gemv_x16.
 */
#if defined(__x86_64__)

#include "x86_avx512.h"

/* Rows of at most this many columns go one at a time on the exact path: 4 + 2 bytes a column
 * = 18 KiB of the 32 KiB L1d (at 4096 columns, 24 KiB, the stream already read 0.85-0.99 of
 * the f16 row's speed; at 5120, 0.57). */
#define EXACT_ONE_ROW_MAX_IN 3072
/* gemv_x16 rounds at most this many activations (on the stack, 32 KiB); longer rows take the
 * exact path. */
#define X16_MAX_IN 16384

/* 8 weights of a row from column k as float32 (f16: vcvtph2ps; bf16: a 16-bit shift). */
EV_AVX512_INLINE __m256 load8_w(const uint8_t *row, int64_t k, const int f16) {
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + k));
    if (f16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* 16 weights of a row from column k as float32 (lanes past mask zero). */
EV_AVX512_INLINE __m512 load16_w(const uint8_t *row, int64_t k, __mmask16 m, const int f16) {
    const __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)row + k);
    if (f16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Columns [k, n) of one row (fewer than 64) into a 512-bit sum, 16 at a time, masked. */
EV_AVX512_INLINE __m512 row_tail(const uint8_t *w, const float *x, int64_t k, int64_t n,
                                 const int f16) {
    __m512 s = _mm512_setzero_ps();
    for (; k < n; k += 16) {
        const __mmask16 m = avx512_mask16(n - k);
        s = _mm512_fmadd_ps(load16_w(w, k, m, f16), _mm512_maskz_loadu_ps(m, x + k), s);
    }
    return s;
}

EV_AVX512_INLINE float sum8(__m256 v) {
    return _mm512_reduce_add_ps(_mm512_castps256_ps512(v));
}

/* Row r, exact: 8 accumulators of 8 lanes over 64 columns a step (the FMA latency). */
EV_AVX512_INLINE void exact_row(const ev_gemm_args *a, int64_t r, const int f16) {
    const float *x = (const float *)a->x;
    const int64_t n = a->n_in;
    const uint8_t *w = a->w + r * a->w_stride;
    __m256 acc[8];
#pragma GCC unroll 8
    for (int h = 0; h < 8; h++) acc[h] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 64 <= n; k += 64) {
#pragma GCC unroll 8
        for (int h = 0; h < 8; h++)
            acc[h] = _mm256_fmadd_ps(load8_w(w, k + 8 * h, f16), _mm256_loadu_ps(x + k + 8 * h),
                                     acc[h]);
    }
#pragma GCC unroll 4
    for (int h = 0; h < 4; h++) acc[h] = _mm256_add_ps(acc[h], acc[h + 4]);
    const __m256 s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    a->y[r] = sum8(s) + _mm512_reduce_add_ps(row_tail(w, x, k, n, f16)) +
              (a->bias ? a->bias[r] : 0.0f);
}

/* Rows r..r+3, exact, side by side: one load of 16 activations serves the 4 rows (rows longer
 * than EXACT_ONE_ROW_MAX_IN, whose activations do not stay in L1). acc[i][h]: row i, columns
 * 8h..8h+7 of each 16. */
EV_AVX512_INLINE void exact_rows4(const ev_gemm_args *a, int64_t r, const int f16) {
    const float *x = (const float *)a->x;
    const int64_t n = a->n_in;
    const uint8_t *w = a->w + r * a->w_stride;
    const int64_t ws = a->w_stride;
    __m256 acc[4][2];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) {
        const __m256 x0 = _mm256_loadu_ps(x + k), x1 = _mm256_loadu_ps(x + k + 8);
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            acc[i][0] = _mm256_fmadd_ps(load8_w(w + i * ws, k, f16), x0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(load8_w(w + i * ws, k + 8, f16), x1, acc[i][1]);
        }
    }
    for (int i = 0; i < 4; i++)
        a->y[r + i] = sum8(_mm256_add_ps(acc[i][0], acc[i][1])) +
                      _mm512_reduce_add_ps(row_tail(w + i * ws, x, k, n, f16)) +
                      (a->bias ? a->bias[r + i] : 0.0f);
}

EV_AVX512_INLINE void exact_gemv(const ev_gemm_args *a, int64_t r0, int64_t r1, const int f16) {
    int64_t r = r0;
    if (a->n_in > EXACT_ONE_ROW_MAX_IN)
        for (; r + 4 <= r1; r += 4) exact_rows4(a, r, f16);
    for (; r < r1; r++) exact_row(a, r, f16);
}

EV_AVX512 void ev_avx512_gemm_f16(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    if (a->n_tok == 1) exact_gemv(a, r0, r1, 1);
    else ev_avx2_gemm_f16(a, r0, r1);
}

EV_AVX512 void ev_avx512_gemm_bf16(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    if (a->n_tok == 1) exact_gemv(a, r0, r1, 0);
    else ev_avx2_gemm_bf16(a, r0, r1);
}

/* ---- gemv_x16: the activations rounded to the weight's 16-bit type ------------------------ */

/* F16 rows on f16 activations xh[n_in] (zero past n_in up to a multiple of 16): ggml's
 * vec_dot_f16 on AVX-512, both sides widened exactly, 4 accumulators over 64 columns. */
EV_AVX512_INLINE void x16_rows_f16(const ev_gemm_args *a, const uint16_t *xh, int64_t r0,
                                   int64_t r1) {
    const int64_t n = a->n_in;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *w = a->w + r * a->w_stride;
        __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                         _mm512_setzero_ps()};
        int64_t k = 0;
        for (; k + 64 <= n; k += 64) {
#pragma GCC unroll 4
            for (int h = 0; h < 4; h++)
                acc[h] = _mm512_fmadd_ps(
                    load16_w(w, k + 16 * h, (__mmask16)0xffff, 1),
                    _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(xh + k + 16 * h))), acc[h]);
        }
        for (; k < n; k += 16) {
            const __mmask16 m = avx512_mask16(n - k);
            acc[0] = _mm512_fmadd_ps(load16_w(w, k, m, 1),
                                     _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(xh + k))),
                                     acc[0]);
        }
        const __m512 s = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
        a->y[r] = _mm512_reduce_add_ps(s) + (a->bias ? a->bias[r] : 0.0f);
    }
}

EV_AVX512 void ev_avx512_gemv_x16_f16(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    if (a->n_tok != 1 || a->n_in > X16_MAX_IN) {
        ev_avx512_gemm_f16(a, r0, r1);
        return;
    }
    _Alignas(64) uint16_t xh[X16_MAX_IN];
    const float *x = (const float *)a->x;
    for (int64_t k = 0; k < a->n_in; k += 16) {   /* round to nearest even, zeros past n_in */
        const __mmask16 m = avx512_mask16(a->n_in - k);
        _mm256_store_si256((__m256i *)(xh + k),
                           _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + k), _MM_FROUND_TO_NEAREST_INT));
    }
    x16_rows_f16(a, xh, r0, r1);
}

#define EV_AVX512BF16 __attribute__((target(EV_AVX512_TARGET ",avx512bf16")))

/* BF16 rows on bf16 activations: ggml's vec_dot_bf16 with AVX-512 BF16, one vdpbf16ps per 32
 * columns (pairs of products into float lanes), 4 accumulators over 128 columns; the columns
 * past n_in are zero on both sides (masked loads). */
EV_AVX512BF16 void ev_avx512_gemv_x16_bf16(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    if (a->n_tok != 1 || a->n_in > X16_MAX_IN) {
        ev_avx512_gemm_bf16(a, r0, r1);
        return;
    }
    _Alignas(64) uint16_t xb[X16_MAX_IN];
    const float *x = (const float *)a->x;
    const int64_t n = a->n_in;
    for (int64_t k = 0; k < n; k += 32) {          /* round to nearest even, zeros past n */
        const __m512 lo = _mm512_maskz_loadu_ps(avx512_mask16(n - k), x + k);
        const __m512 hi = _mm512_maskz_loadu_ps(avx512_mask16(n - k - 16 > 0 ? n - k - 16 : 0),
                                                x + k + 16);
        const __m512bh b = _mm512_cvtne2ps_pbh(hi, lo);
        __m512i bits;
        __builtin_memcpy(&bits, &b, sizeof bits);
        _mm512_store_si512((__m512i *)(xb + k), bits);   /* k + 32 <= X16_MAX_IN */
    }
    for (int64_t r = r0; r < r1; r++) {
        const uint16_t *w = (const uint16_t *)(a->w + r * a->w_stride);
        __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                         _mm512_setzero_ps()};
        int64_t k = 0;
        for (; k + 128 <= n; k += 128) {
#pragma GCC unroll 4
            for (int h = 0; h < 4; h++) {
                const __m512i wv = _mm512_loadu_si512((const void *)(w + k + 32 * h));
                const __m512i xv = _mm512_load_si512((const void *)(xb + k + 32 * h));
                __m512bh wb, xbh;
                __builtin_memcpy(&wb, &wv, sizeof wb);
                __builtin_memcpy(&xbh, &xv, sizeof xbh);
                acc[h] = _mm512_dpbf16_ps(acc[h], wb, xbh);
            }
        }
        for (; k < n; k += 32) {
            const __mmask32 m = n - k >= 32 ? (__mmask32)0xffffffffu
                                            : (__mmask32)((1u << (n - k)) - 1u);
            const __m512i wv = _mm512_maskz_loadu_epi16(m, w + k);
            const __m512i xv = _mm512_load_si512((const void *)(xb + k));
            __m512bh wb, xbh;
            __builtin_memcpy(&wb, &wv, sizeof wb);
            __builtin_memcpy(&xbh, &xv, sizeof xbh);
            acc[0] = _mm512_dpbf16_ps(acc[0], wb, xbh);
        }
        const __m512 s = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
        a->y[r] = _mm512_reduce_add_ps(s) + (a->bias ? a->bias[r] : 0.0f);
    }
}

#endif
