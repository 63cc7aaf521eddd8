/*
 * x86_avx512_sgemm.c - the micro-kernel of gemm_dq (the float product over weights
 * dequantised into panels: prefill of F16/BF16/F32 weights and of the types without an
 * integer product, the ViT's float towers) on 512-bit vectors. The panels and the packed
 * tokens are the AVX2 set's (x86_avx2_sgemm.c: panel [k][16], micro-tile [k][6]); the loop
 * nest is ev_gemm_dq_run. One zmm holds a column's 16 panel rows, so a 6-token tile is 6
 * accumulators a k; two interleaved k phases (even, odd columns) make 12, enough to keep two
 * FMA pipes busy across the FMA latency, summed once at the end. Per two columns: 2 panel
 * loads, 12 broadcasts, 12 FMAs of 16 lanes: twice the AVX2 tile's work per instruction,
 * and on cores with full-width 512-bit FMA units (Zen 5, Intel server parts) twice its
 * speed. Reference: the scalar set's gemm_dq (test_kernels.c); the sums are reordered (two
 * phases), as the AVX2 tile reorders them. Where 17+ rows are left, ev_gemm_dq_run takes two
 * panels at a time with the pair tile below (6 x 32, faster); this one does the last panel.
 */
#if defined(__x86_64__)

#include "x86_avx512.h"

#define PK_NR EV_GEMM_NR   /* panel rows: one zmm */
#define PK_MR EV_GEMM_MR   /* tokens per micro-tile */
_Static_assert(PK_NR == 16, "one 512-bit vector of panel rows");

/* M tokens (<= 6) x the panel's 16 rows over kc columns; R valid rows; `first`: the first K
 * chunk (y = bias + sum), otherwise y += sum. */
EV_AVX512_INLINE void zmm_tile(const int M, const float *x, const float *pw, int kc, float *y,
                               int64_t ldy, int R, int first, const float *bias) {
    __m512 acc[PK_MR][2];
#pragma GCC unroll 6
    for (int m = 0; m < M; m++) {
        __builtin_prefetch(y + m * ldy, 1, 3);   /* y: megabytes, not in cache (AVX2 tile) */
        acc[m][0] = acc[m][1] = _mm512_setzero_ps();
    }
    int k = 0;
#pragma GCC unroll 2
    for (; k + 2 <= kc; k += 2) {
#pragma GCC unroll 2
        for (int p = 0; p < 2; p++) {
            const __m512 w = _mm512_load_ps(pw + (k + p) * PK_NR);
#pragma GCC unroll 6
            for (int m = 0; m < M; m++)
                acc[m][p] = _mm512_fmadd_ps(_mm512_set1_ps(x[(k + p) * PK_MR + m]), w, acc[m][p]);
        }
    }
    if (k < kc) {   /* an odd column count */
        const __m512 w = _mm512_load_ps(pw + k * PK_NR);
#pragma GCC unroll 6
        for (int m = 0; m < M; m++)
            acc[m][0] = _mm512_fmadd_ps(_mm512_set1_ps(x[k * PK_MR + m]), w, acc[m][0]);
    }
    const __mmask16 mask = avx512_mask16(R);
#pragma GCC unroll 6
    for (int m = 0; m < M; m++)
        avx512_store_y(y + m * ldy, mask, _mm512_add_ps(acc[m][0], acc[m][1]), bias, first);
}

/* M tokens (<= 6) x two adjacent panels (32 rows: pw, then pw + kc * 16) over kc columns; R
 * valid rows, 17..32. Each broadcast token feeds two FMAs (one per panel): a column is 2
 * panel loads, M broadcasts and 2M FMAs. The sums go in the 16-row tile's order exactly (even
 * columns and odd columns apart, an odd last column with the even ones, added at the end), so
 * that an output is the same bits whichever tile computes it: which rows pair up depends on
 * where a thread's rows start, and the thread count must not change a bit
 * (tests/native/test_long_prompt.py). 24 accumulators, 27 of the 32 zmm registers. Alone in
 * L1 (a 256-column panel pair, 6 tokens): ~218 GFLOP/s a core against the 16-row tile's 192,
 * of a 224 FMA peak (Zen 5, /tmp harness, 2026-12-03). */
EV_AVX512_INLINE void zmm_tile_pair(const int M, const float *x, const float *pw, int kc,
                                    float *y, int64_t ldy, int R, int first, const float *bias) {
    const float *pw1 = pw + (int64_t)kc * PK_NR;
    __m512 acc[PK_MR][2][2];   /* [token][panel][k phase] */
#pragma GCC unroll 6
    for (int m = 0; m < M; m++) {
        __builtin_prefetch(y + m * ldy, 1, 3);
        __builtin_prefetch(y + m * ldy + PK_NR, 1, 3);
        acc[m][0][0] = acc[m][0][1] = acc[m][1][0] = acc[m][1][1] = _mm512_setzero_ps();
    }
    int k = 0;
#pragma GCC unroll 2
    for (; k + 2 <= kc; k += 2) {
#pragma GCC unroll 2
        for (int p = 0; p < 2; p++) {
            const __m512 w0 = _mm512_load_ps(pw + (k + p) * PK_NR);
            const __m512 w1 = _mm512_load_ps(pw1 + (k + p) * PK_NR);
#pragma GCC unroll 6
            for (int m = 0; m < M; m++) {
                const __m512 xb = _mm512_set1_ps(x[(k + p) * PK_MR + m]);
                acc[m][0][p] = _mm512_fmadd_ps(xb, w0, acc[m][0][p]);
                acc[m][1][p] = _mm512_fmadd_ps(xb, w1, acc[m][1][p]);
            }
        }
    }
    if (k < kc) {   /* an odd column count: with the even columns, as zmm_tile */
        const __m512 w0 = _mm512_load_ps(pw + k * PK_NR), w1 = _mm512_load_ps(pw1 + k * PK_NR);
#pragma GCC unroll 6
        for (int m = 0; m < M; m++) {
            const __m512 xb = _mm512_set1_ps(x[k * PK_MR + m]);
            acc[m][0][0] = _mm512_fmadd_ps(xb, w0, acc[m][0][0]);
            acc[m][1][0] = _mm512_fmadd_ps(xb, w1, acc[m][1][0]);
        }
    }
    const __mmask16 mask1 = avx512_mask16(R - PK_NR);
#pragma GCC unroll 6
    for (int m = 0; m < M; m++) {
        avx512_store_y(y + m * ldy, (__mmask16)0xffff,
                       _mm512_add_ps(acc[m][0][0], acc[m][0][1]), bias, first);
        avx512_store_y(y + m * ldy + PK_NR, mask1, _mm512_add_ps(acc[m][1][0], acc[m][1][1]),
                       bias ? bias + PK_NR : NULL, first);
    }
}

EV_GEMM_DQ_TILES(EV_AVX512, zmm_tile, zmm_tile)
EV_GEMM_DQ_TILES(EV_AVX512, zmm_tile_pair, zmm_tile_pair)

const ev_gemm_dq_tile_fn ev_avx512_dq_tiles[EV_GEMM_MR + 1] = {
    NULL, zmm_tile_1, zmm_tile_2, zmm_tile_3, zmm_tile_4, zmm_tile_5, zmm_tile_6};
const ev_gemm_dq_tile_fn ev_avx512_dq_pair_tiles[EV_GEMM_MR + 1] = {
    NULL, zmm_tile_pair_1, zmm_tile_pair_2, zmm_tile_pair_3, zmm_tile_pair_4, zmm_tile_pair_5,
    zmm_tile_pair_6};

#endif
