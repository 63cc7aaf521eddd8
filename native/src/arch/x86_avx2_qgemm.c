/*
 * x86_avx2_qgemm.c - the AVX2 set's many-token products of Q8_0/Q4_0 weights on int16
 * activations (gemm_q16x, the default "exact" precision): Y[t][r] = X[t] . W[r] (+ bias[r])
 * for one thread's rows [r0, r1). The AVX2 counterpart of x86_avx512_qgemm.c's q16x path.
 * Reference: the scalar set's gemm_dq on the same int16-rounded activations (test_kernels.c,
 * test_dispatch.c; test_avx2_q16x_ragged in test_kernels.c: ragged shapes and extremes).
 *
 * Arithmetic: each activation block of 32 rounded to int16 with its own scale d_x = amax /
 * 32767 (quantize_i16: a relative error of 2^-16, below float32's sum-order noise at these
 * lengths; llama.cpp's AVX2 path rounds to int8, 2^-8), the weights sign-extended to int16
 * (Q4_0: nibble - 8, Q8_0: q). vpmaddwd multiplies 16 int16 pairs into 8 int32 lanes: 16
 * products an instruction, twice a float FMA's 8. Per block the int32 sum is exact (|w| <=
 * 127, |x| <= 32767, 32 products: < 2^27; vpmaddwd's only overflow, -32768 x -32768 twice,
 * cannot occur with int8 weights), then converted and scaled once: facc += float(iacc) x
 * (d_w x d_x).
 *
 * Layout. Lane i of an 8-int32 accumulator is weight row i of a group of 8; a block's 32
 * columns are walked in 16 steps of 2 int16 columns, each step one vpmaddwd of the group's
 * [8 rows][2 int16] (32 bytes) by the token's 2 int16 (4 bytes) broadcast to every lane, and
 * one vpaddd into the int32 accumulator. Each thread unpacks PR = 16 rows (RG = 2 groups) at a
 * time, per K chunk of KCB blocks, into a panel in its pack buffer (a->pack):
 *     wq[KCB][16 steps][RG][8 rows][2] int16  (1 KiB a block, 16 KiB a chunk)
 *     dw[KCB][PR] float                       (the rows' block scales; missing rows 0)
 * (two 8 x 8 dword transposes per block and group), so each weight is decoded once per call
 * and reused by every token. A micro-kernel of RG = 2 row groups x MT = 6 tokens sweeps every
 * token over the panel: 12 int32 accumulators, the 2 weight vectors of a step and the
 * broadcast (with the product: AVX2's 16 ymm registers; the float sums are in a stack buffer
 * in L1, one load, FMA and store per block and (group, token)). Per step: 2 weight loads,
 * 6 broadcasts, 12 vpmaddwd, 12 vpaddd (192 products); per block and (group, token) one cvt,
 * one multiply, one FMA. 2 x 6, 2 x 3, 2 x 4 and 3 x 4 measured alike (+-5 %, a busy 2-core
 * host, 2026-12-03); 2 x 6 loads the fewest bytes a product.
 *
 * Loop nest (as x86_avx512_qgemm.c): rows in y blocks whose y over every token fits half of a
 * 512 KiB L2; K in chunks of KCB blocks; the block's rows in panels of PR; every token (the
 * chunk's activations, n_tok x KCB x 64 bytes, come from L2). The first chunk writes y (with
 * the bias), later ones add.
 */
#if defined(__x86_64__)

#include "x86_avx2.h"

#define RG 2                    /* row groups of 8 lanes per panel */
#define PR (8 * RG)             /* rows per panel */
#define MT 6                    /* tokens per micro-tile */
#define KCB 16                  /* blocks per K chunk */
#define STEPS 16                /* steps of 2 int16 columns per block of 32 */
#define STEP_BYTES (RG * 32)    /* one step: every group's 8 rows x 2 int16 */
#define BLOCK_BYTES (STEPS * STEP_BYTES)
#define Y_BLOCK_BYTES (256 * 1024) /* y of one row block: half of a 512 KiB L2 */

typedef struct q16_panel {
    _Alignas(64) uint8_t wq[KCB * BLOCK_BYTES];   /* [block][step][group][8 rows][2] int16 */
    _Alignas(64) float dw[KCB][PR];               /* d_w of the block for rows 0..PR-1 */
} q16_panel;
_Static_assert(sizeof(q16_panel) <= sizeof(float) * EV_GEMM_PACK_FLOATS, "q16_panel fits a->pack");

/* a weight row's block b as int16 columns 0..15 (lo) and 16..31 (hi) */
EV_AVX2_INLINE void w_block_i16(const uint8_t *row, int64_t b, const int q4, __m256i *lo,
                                __m256i *hi) {
    if (!row) {
        *lo = *hi = _mm256_setzero_si256();
        return;
    }
    if (q4) {   /* element j in the low nibble of byte j, j + 16 in the high */
        const __m128i v = _mm_loadu_si128((const __m128i *)((const ev_block_q4_0 *)row)[b].qs);
        const __m128i m = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
        *lo = _mm256_cvtepi8_epi16(_mm_sub_epi8(_mm_and_si128(v, m), eight));
        *hi = _mm256_cvtepi8_epi16(_mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), m), eight));
        return;
    }
    const int8_t *qs = ((const ev_block_q8_0 *)row)[b].qs;
    *lo = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)qs));
    *hi = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(qs + 16)));
}

/* r[i] = row i's 8 dwords; stores dword s of every row (8 x 4 bytes) at out + s * stride */
EV_AVX2_INLINE void transpose_8x8_store(const __m256i r[8], uint8_t *out, size_t stride) {
    const __m256i t0 = _mm256_unpacklo_epi32(r[0], r[1]), t1 = _mm256_unpackhi_epi32(r[0], r[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(r[2], r[3]), t3 = _mm256_unpackhi_epi32(r[2], r[3]);
    const __m256i t4 = _mm256_unpacklo_epi32(r[4], r[5]), t5 = _mm256_unpackhi_epi32(r[4], r[5]);
    const __m256i t6 = _mm256_unpacklo_epi32(r[6], r[7]), t7 = _mm256_unpackhi_epi32(r[6], r[7]);
    /* u0: rows 0..3 of dwords 0 | 4; u1: 1 | 5; u2: 2 | 6; u3: 3 | 7; u4..u7: rows 4..7 */
    const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
    const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
    const __m256i u4 = _mm256_unpacklo_epi64(t4, t6), u5 = _mm256_unpackhi_epi64(t4, t6);
    const __m256i u6 = _mm256_unpacklo_epi64(t5, t7), u7 = _mm256_unpackhi_epi64(t5, t7);
    _mm256_store_si256((__m256i *)(out + 0 * stride), _mm256_permute2x128_si256(u0, u4, 0x20));
    _mm256_store_si256((__m256i *)(out + 1 * stride), _mm256_permute2x128_si256(u1, u5, 0x20));
    _mm256_store_si256((__m256i *)(out + 2 * stride), _mm256_permute2x128_si256(u2, u6, 0x20));
    _mm256_store_si256((__m256i *)(out + 3 * stride), _mm256_permute2x128_si256(u3, u7, 0x20));
    _mm256_store_si256((__m256i *)(out + 4 * stride), _mm256_permute2x128_si256(u0, u4, 0x31));
    _mm256_store_si256((__m256i *)(out + 5 * stride), _mm256_permute2x128_si256(u1, u5, 0x31));
    _mm256_store_si256((__m256i *)(out + 6 * stride), _mm256_permute2x128_si256(u2, u6, 0x31));
    _mm256_store_si256((__m256i *)(out + 7 * stride), _mm256_permute2x128_si256(u3, u7, 0x31));
}

/* Rows r..r+R-1 (R <= PR; the rest zero weights, zero scales), blocks [kb, kb + n). */
EV_AVX2_INLINE void panel_pack(q16_panel *p, const ev_gemm_args *a, int64_t r, int R,
                               int64_t kb, int n, const int q4) {
    const uint8_t *row[PR];
    for (int i = 0; i < PR; i++) row[i] = i < R ? a->w + (r + i) * a->w_stride : NULL;
    for (int b = 0; b < n; b++) {
        uint8_t *blk = p->wq + (size_t)b * BLOCK_BYTES;
        for (int g = 0; g < RG; g++) {
            __m256i lo[8], hi[8];
            for (int i = 0; i < 8; i++) w_block_i16(row[8 * g + i], kb + b, q4, &lo[i], &hi[i]);
            transpose_8x8_store(lo, blk + g * 32, STEP_BYTES);                   /* steps 0..7 */
            transpose_8x8_store(hi, blk + 8 * STEP_BYTES + g * 32, STEP_BYTES);  /* 8..15 */
        }
        for (int i = 0; i < PR; i++)
            p->dw[b][i] = !row[i] ? 0.0f
                          : avx2_fp16(q4 ? ((const ev_block_q4_0 *)row[i])[kb + b].d
                                         : ((const ev_block_q8_0 *)row[i])[kb + b].d);
    }
}

/* 8 rows' sums s into y[r..r+m) (m < 8: the rows past the panel's last are not written);
 * the first K chunk writes s + bias, later ones add */
EV_AVX2_INLINE void store_y8(float *y, const float *bias, __m256 s, int m, int first) {
    if (m >= 8) {
        if (!first) s = _mm256_add_ps(s, _mm256_loadu_ps(y));
        else if (bias) s = _mm256_add_ps(s, _mm256_loadu_ps(bias));
        _mm256_storeu_ps(y, s);
        return;
    }
    _Alignas(32) float v[8];
    _mm256_store_ps(v, s);
    for (int i = 0; i < m; i++) y[i] = first ? v[i] + (bias ? bias[i] : 0.0f) : y[i] + v[i];
}

/* G row groups (1..RG) x T tokens (1..MT) from token t over the panel's n blocks. The float
 * sums live in a stack buffer (L1), one load, FMA and store per block and (group, token):
 * the 16 registers hold the int32 accumulators, the weights and the broadcast only. */
EV_AVX2_INLINE void q16_tile(const q16_panel *p, const ev_gemm_args *a, int64_t r, int R,
                             int64_t t, int64_t kb, int n, const int G, const int T) {
    const int64_t nb = a->n_in / EV_QK;
    const uint8_t *xq[MT];   /* token j's int16 blocks of this chunk: [n][32] */
    const float *dx[MT];
#pragma GCC unroll 8
    for (int j = 0; j < T; j++) {
        xq[j] = a->x + (t + j) * a->x_stride + kb * 64;
        dx[j] = a->x_scale + (t + j) * nb + kb;
    }
    _Alignas(32) float fsum[RG][MT][8];
#pragma GCC unroll 4
    for (int g = 0; g < G; g++)
#pragma GCC unroll 8
        for (int j = 0; j < T; j++) _mm256_store_ps(fsum[g][j], _mm256_setzero_ps());
    for (int b = 0; b < n; b++) {
        const uint8_t *wb = p->wq + (size_t)b * BLOCK_BYTES;
        __m256i iacc[RG][MT];
#pragma GCC unroll 4
        for (int g = 0; g < G; g++)
#pragma GCC unroll 8
            for (int j = 0; j < T; j++) iacc[g][j] = _mm256_setzero_si256();
        /* a fixed-count loop that unrolls completely: the accumulators stay in registers */
#pragma GCC unroll 16
        for (int s = 0; s < STEPS; s++) {
            __m256i w[RG];
#pragma GCC unroll 4
            for (int g = 0; g < G; g++) {
                w[g] = _mm256_load_si256((const __m256i *)(wb + s * STEP_BYTES + g * 32));
                __asm__("" : "+x"(w[g]));   /* one load, not one per token */
            }
#pragma GCC unroll 8
            for (int j = 0; j < T; j++) {
                int32_t x2;
                __builtin_memcpy(&x2, xq[j] + b * 64 + 4 * s, 4);
                const __m256i xv = _mm256_set1_epi32(x2);
#pragma GCC unroll 4
                for (int g = 0; g < G; g++) {
                    iacc[g][j] = _mm256_add_epi32(iacc[g][j], _mm256_madd_epi16(w[g], xv));
                    /* keeps the adds in step order: GCC otherwise reassociates the 16 steps'
                     * integer sums into a tree and spills the products */
                    __asm__("" : "+x"(iacc[g][j]));
                }
            }
        }
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) {
            const __m256 d = _mm256_load_ps(p->dw[b] + 8 * g);
#pragma GCC unroll 8
            for (int j = 0; j < T; j++)
                _mm256_store_ps(fsum[g][j],
                                _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc[g][j]),
                                                _mm256_mul_ps(d, _mm256_broadcast_ss(dx[j] + b)),
                                                _mm256_load_ps(fsum[g][j])));
        }
        __asm__("" : : "r"(fsum) : "memory");   /* fsum stays in memory, not in registers */
    }
#pragma GCC unroll 4
    for (int g = 0; g < G; g++) {
        const float *bias = a->bias ? a->bias + r + 8 * g : NULL;
#pragma GCC unroll 8
        for (int j = 0; j < T; j++)
            store_y8(a->y + (t + j) * a->n_out + r + 8 * g, bias, _mm256_load_ps(fsum[g][j]),
                     R - 8 * g, kb == 0);
    }
}

/* The tile shapes, each its own function (inlined into one loop, the accumulators spill). */
#define Q16_TILE(G, T)                                                                       \
    EV_AVX2 __attribute__((noinline)) static void tile_##G##x##T(                            \
        const q16_panel *p, const ev_gemm_args *a, int64_t r, int R, int64_t t, int64_t kb,   \
        int n) {                                                                             \
        q16_tile(p, a, r, R, t, kb, n, G, T);                                                \
    }
#define Q16_TILES(G) Q16_TILE(G, 1) Q16_TILE(G, 2) Q16_TILE(G, 3) Q16_TILE(G, 4) \
    Q16_TILE(G, 5) Q16_TILE(G, 6)
#define Q16_ROW(G) {NULL, tile_##G##x1, tile_##G##x2, tile_##G##x3, tile_##G##x4, \
    tile_##G##x5, tile_##G##x6}
Q16_TILES(1) Q16_TILES(2)
_Static_assert(RG == 2 && MT == 6, "TILES lists 1..2 groups x 1..6 tokens");

typedef void (*q16_tile_fn)(const q16_panel *p, const ev_gemm_args *a, int64_t r, int R,
                            int64_t t, int64_t kb, int n);
static const q16_tile_fn TILES[RG + 1][MT + 1] = {{NULL}, Q16_ROW(1), Q16_ROW(2)};

EV_AVX2_INLINE void q16_gemm(const ev_gemm_args *a, int64_t r0, int64_t r1, const int q4) {
    const int64_t nb = a->n_in / EV_QK;
    q16_panel *p = (q16_panel *)(void *)a->pack;   /* 64-byte aligned, 1.2 MiB (uses 17 KiB) */
    /* rows per y block: its y (rows x n_tok floats) stays in L2 across the K chunks */
    int64_t rows_per_yb = (int64_t)Y_BLOCK_BYTES / (4 * (a->n_tok > 0 ? a->n_tok : 1)) / PR * PR;
    if (rows_per_yb < PR) rows_per_yb = PR;
    for (int64_t rb = r0; rb < r1; rb += rows_per_yb) {
        const int64_t re = r1 - rb < rows_per_yb ? r1 : rb + rows_per_yb;
        for (int64_t kb = 0; kb < nb; kb += KCB) {
            const int n = (int)(nb - kb < KCB ? nb - kb : KCB);
            for (int64_t r = rb; r < re; r += PR) {
                const int R = (int)(re - r < PR ? re - r : PR);
                panel_pack(p, a, r, R, kb, n, q4);
                const q16_tile_fn *tiles = TILES[(R + 7) / 8];
                for (int64_t t = 0; t < a->n_tok; t += MT)
                    tiles[a->n_tok - t < MT ? a->n_tok - t : MT](p, a, r, R, t, kb, n);
            }
        }
    }
}

EV_AVX2 void ev_avx2_gemm_q16x_q8_0(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    q16_gemm(a, r0, r1, 0);
}

EV_AVX2 void ev_avx2_gemm_q16x_q4_0(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    q16_gemm(a, r0, r1, 1);
}

/* Each block of 32 of x[n] as int16 q[32] with d = amax / 32767 (d[n / 32]; x = d q), as
 * ev_avx512_quantize_i16: round to nearest even (the default MXCSR mode), |x id| <= 32767. */
EV_AVX2 void ev_avx2_quantize_i16(const float *x, int16_t *q, float *d, int64_t n) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < n / EV_QK; b++) {
        const float *xb = x + b * EV_QK;
        const __m256 v0 = _mm256_loadu_ps(xb), v1 = _mm256_loadu_ps(xb + 8);
        const __m256 v2 = _mm256_loadu_ps(xb + 16), v3 = _mm256_loadu_ps(xb + 24);
        const __m256 m = _mm256_max_ps(
            _mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
            _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        const float amax = _mm_cvtss_f32(h);
        const float db = amax / 32767.0f, id = amax > 0.0f ? 32767.0f / amax : 0.0f;
        d[b] = db;
        const __m256 s = _mm256_set1_ps(id);
        const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v0, s));
        const __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v1, s));
        const __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v2, s));
        const __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v3, s));
        /* packs works per 128-bit lane: [i0 lo, i1 lo | i0 hi, i1 hi] -> qwords 0, 2, 1, 3 */
        const __m256i p01 = _mm256_permute4x64_epi64(_mm256_packs_epi32(i0, i1), 0xd8);
        const __m256i p23 = _mm256_permute4x64_epi64(_mm256_packs_epi32(i2, i3), 0xd8);
        _mm256_storeu_si256((__m256i *)(q + b * EV_QK), p01);
        _mm256_storeu_si256((__m256i *)(q + b * EV_QK + 16), p23);
    }
}

#endif
