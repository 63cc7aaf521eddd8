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
 * panels at a time (zmm_tile_pair_M: 6 x 32, faster); zmm_tile_M does a last single panel.
 */
#if defined(__x86_64__)

#include "x86_avx512.h"

#define PK_NR EV_GEMM_NR   /* panel rows: one zmm */
#define PK_MR EV_GEMM_MR   /* tokens per micro-tile */
_Static_assert(PK_NR == 16, "one 512-bit vector of panel rows");

/* M tokens (<= 6) x P adjacent panels (P = 1: 16 rows; P = 2: 32 rows, the second panel
 * kc * 16 floats after the first) over kc columns; R valid rows (P = 2: 17..32); `first`: the
 * first K chunk (y = bias + sum), otherwise y += sum. Each broadcast token feeds P FMAs. The
 * sums of each output go in one order whatever P is: even and odd columns apart (two k phases,
 * an odd last column with the even ones), added at the end. So an output is the same bits
 * whichever tile computes it: which rows pair up depends on where a thread's rows start, and
 * the thread count must not change a bit (tests/native/test_long_prompt.py). P = 1: 12
 * accumulators; P = 2: 24 (27 of the 32 zmm registers), one broadcast for two FMAs: ~218
 * GFLOP/s a core alone in L1 against P = 1's 192, of a 224 FMA peak (Zen 5, 2026-12-03). */
EV_AVX512_INLINE void zmm_panels(const int M, const int P, const float *x, const float *pw,
                                 int kc, float *y, int64_t ldy, int R, int first,
                                 const float *bias) {
    __m512 acc[PK_MR][2][2];   /* [token][panel][k phase] */
#pragma GCC unroll 6
    for (int m = 0; m < M; m++) {
#pragma GCC unroll 2
        for (int p = 0; p < P; p++) {
            __builtin_prefetch(y + m * ldy + p * PK_NR, 1, 3);   /* y: megabytes, not in cache */
            acc[m][p][0] = acc[m][p][1] = _mm512_setzero_ps();
        }
    }
    int k = 0;
#pragma GCC unroll 2
    for (; k + 2 <= kc; k += 2) {
#pragma GCC unroll 2
        for (int ph = 0; ph < 2; ph++) {
            __m512 w[2];
#pragma GCC unroll 2
            for (int p = 0; p < P; p++) w[p] = _mm512_load_ps(pw + ((int64_t)p * kc + k + ph) * PK_NR);
#pragma GCC unroll 6
            for (int m = 0; m < M; m++) {
                const __m512 xb = _mm512_set1_ps(x[(k + ph) * PK_MR + m]);
#pragma GCC unroll 2
                for (int p = 0; p < P; p++) acc[m][p][ph] = _mm512_fmadd_ps(xb, w[p], acc[m][p][ph]);
            }
        }
    }
    if (k < kc) {   /* an odd column count: with the even columns */
        __m512 w[2];
#pragma GCC unroll 2
        for (int p = 0; p < P; p++) w[p] = _mm512_load_ps(pw + ((int64_t)p * kc + k) * PK_NR);
#pragma GCC unroll 6
        for (int m = 0; m < M; m++) {
            const __m512 xb = _mm512_set1_ps(x[k * PK_MR + m]);
#pragma GCC unroll 2
            for (int p = 0; p < P; p++) acc[m][p][0] = _mm512_fmadd_ps(xb, w[p], acc[m][p][0]);
        }
    }
#pragma GCC unroll 6
    for (int m = 0; m < M; m++) {
#pragma GCC unroll 2
        for (int p = 0; p < P; p++)
            avx512_store_y(y + m * ldy + p * PK_NR, avx512_mask16(R - p * PK_NR),
                           _mm512_add_ps(acc[m][p][0], acc[m][p][1]),
                           bias ? bias + p * PK_NR : NULL, first);
    }
}

#define ZMM_ONE_PANEL(M, ...) zmm_panels(M, 1, __VA_ARGS__)
#define ZMM_TWO_PANELS(M, ...) zmm_panels(M, 2, __VA_ARGS__)
EV_GEMM_DQ_TILES(EV_AVX512, zmm_tile, ZMM_ONE_PANEL)
EV_GEMM_DQ_TILES(EV_AVX512, zmm_tile_pair, ZMM_TWO_PANELS)
#undef ZMM_ONE_PANEL
#undef ZMM_TWO_PANELS

const ev_gemm_dq_tile_fn ev_avx512_dq_tiles[EV_GEMM_MR + 1] = {
    NULL, zmm_tile_1, zmm_tile_2, zmm_tile_3, zmm_tile_4, zmm_tile_5, zmm_tile_6};
const ev_gemm_dq_tile_fn ev_avx512_dq_pair_tiles[EV_GEMM_MR + 1] = {
    NULL, zmm_tile_pair_1, zmm_tile_pair_2, zmm_tile_pair_3, zmm_tile_pair_4, zmm_tile_pair_5,
    zmm_tile_pair_6};

#endif
