/*
 * x86_avx512_bf16.c - the many-token product of BF16 weights with AVX-512 BF16 (vdpbf16ps:
 * 32 bf16 products into 16 float lanes a instruction, twice the products of a float FMA of
 * the same width). Y[t][r] = X[t] . W[r] (+ bias[r]) for one thread's rows [r0, r1). The
 * activations are rounded to bf16 (to nearest even) for the products, as llama.cpp does for
 * BF16 weights and as transformers' bf16 inference does everywhere; the sums stay float32.
 * Reference: the float product on the bf16-rounded activations (native/tests/test_kernels.c).
 *
 * Layout as in x86_avx512_q8x.c: lane i of a 16-float accumulator is weight row i of a group
 * of 16; the columns are walked in steps of 2 (one dword of two bf16), each step one vdpbf16ps
 * with the token's 2 bf16 broadcast to every lane. Per K chunk of KC columns and token block
 * of MC tokens, the block's activations are converted once into xb[MC][KC] (bf16, 512 KiB,
 * L2), and each thread repacks 32 weight rows at a time into a panel [step][group][16][2]
 * (32 KiB, L1-L2; a 16 x 8 dword transpose per 16 columns and group) that a micro-kernel of 2
 * row groups x 8 tokens (16 accumulators) sweeps over every token of the block. Columns past
 * n_in up to a multiple of 16 are zeros on both sides. The first chunk writes y (with the
 * bias), later chunks add.
 */
#if defined(__x86_64__)

#include "x86_avx512.h"

#define KC 512                  /* columns per chunk, a multiple of 16 */
#define MC 512                  /* tokens per block */
#define PR 32                   /* rows per panel: two groups of 16 lanes */
#define MT 8                    /* tokens per micro-tile */

typedef struct bf16x_pack {
    _Alignas(64) uint16_t xb[MC][KC];              /* the token block's activations, bf16 */
    _Alignas(64) uint16_t w[KC / 2][2][16][2];     /* panel: [step][group][row][2 columns] */
} bf16x_pack;

_Static_assert(sizeof(bf16x_pack) <= sizeof(float) * (size_t)EV_GEMM_PACK_FLOATS,
               "the pack buffer holds the bf16 token block and panel");

#define EV_AVX512BF16 __attribute__((target(EV_AVX512_TARGET ",avx512bf16")))
#define EV_AVX512BF16_INLINE static inline __attribute__((always_inline, target(EV_AVX512_TARGET ",avx512bf16")))

/* Tokens [t0, t1), columns [k0, k0 + kc) of the float activations into xb as bf16, each row
 * zero-padded to kcp (a multiple of 32 here: whole vector pairs). */
EV_AVX512BF16_INLINE void convert_tokens(bf16x_pack *p, const ev_gemm_args *a, int64_t t0,
                                         int64_t t1, int64_t k0, int kc, int kcp) {
    for (int64_t t = t0; t < t1; t++) {
        const float *x = (const float *)(a->x + t * a->x_stride) + k0;
        uint16_t *dst = p->xb[t - t0];
        for (int c = 0; c < kcp; c += 32) {
            const __m512 lo = _mm512_maskz_loadu_ps(avx512_mask16(kc - c), x + c);
            const __m512 hi = _mm512_maskz_loadu_ps(kc - c > 16 ? avx512_mask16(kc - c - 16) : 0, x + c + 16);
            _mm512_store_si512((__m512i *)(dst + c), (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
        }
    }
}

/* Rows r..r+R-1 (R <= 32; the rest zeros), columns [k0, k0 + kc) zero-padded to kcp16 (a
 * multiple of 16) into the panel. */
EV_AVX512BF16_INLINE void panel_pack(bf16x_pack *p, const ev_gemm_args *a, int64_t r, int R,
                                     int64_t k0, int kc, int kcp16) {
    for (int g = 0; g < 2; g++) {
        for (int c = 0; c < kcp16; c += 16) {   /* 16 columns: 8 steps */
            const __mmask16 m = avx512_mask16(kc - c);
            __m512i z[8];
            for (int k = 0; k < 8; k++) {
                const int ia = 16 * g + (k < 4 ? k : k + 4), ib = ia + 4;
                const __m256i va = ia < R ? _mm256_maskz_loadu_epi16(
                    m, (const ev_bf16 *)(a->w + (r + ia) * a->w_stride) + k0 + c) : _mm256_setzero_si256();
                const __m256i vb = ib < R ? _mm256_maskz_loadu_epi16(
                    m, (const ev_bf16 *)(a->w + (r + ib) * a->w_stride) + k0 + c) : _mm256_setzero_si256();
                z[k] = _mm512_inserti64x4(_mm512_castsi256_si512(va), vb, 1);
            }
            avx512_transpose_16x8(z, (uint8_t *)&p->w[c / 2][g][0][0], 128);
        }
    }
}

/* RG row groups (1 or 2) x T tokens (1..8) from token t (row t - t0 of xb) over the panel. */
EV_AVX512BF16_INLINE void bf16x_tile(const bf16x_pack *p, const ev_gemm_args *a, int64_t r,
                                     int R, int64_t t, int64_t t0, int steps, int first,
                                     const int RG, const int T) {
    __m512 acc[2][MT];
#pragma GCC unroll 2
    for (int g = 0; g < RG; g++)
#pragma GCC unroll 8
        for (int j = 0; j < T; j++) acc[g][j] = _mm512_setzero_ps();
    const uint16_t *xb = p->xb[t - t0];
    for (int s = 0; s < steps; s++) {
        __m512bh w[2];
#pragma GCC unroll 2
        for (int g = 0; g < RG; g++)
            w[g] = (__m512bh)_mm512_load_si512((const __m512i *)&p->w[s][g][0][0]);
#pragma GCC unroll 8
        for (int j = 0; j < T; j++) {
            int32_t x2;
            __builtin_memcpy(&x2, xb + j * KC + 2 * s, 4);
            const __m512bh xv = (__m512bh)_mm512_set1_epi32(x2);
#pragma GCC unroll 2
            for (int g = 0; g < RG; g++) acc[g][j] = _mm512_dpbf16_ps(acc[g][j], w[g], xv);
        }
    }
#pragma GCC unroll 2
    for (int g = 0; g < RG; g++) {
        const __mmask16 m = avx512_mask16(R - 16 * g);
        const float *bias = a->bias ? a->bias + r + 16 * g : NULL;
#pragma GCC unroll 8
        for (int j = 0; j < T; j++)
            avx512_store_y(a->y + (t + j) * a->n_out + r + 16 * g, m, acc[g][j], bias, first);
    }
}

#define BF16X_TILE(RG, T)                                                                    \
    EV_AVX512BF16 __attribute__((noinline)) static void tile_##RG##x##T(                     \
        const bf16x_pack *p, const ev_gemm_args *a, int64_t r, int R, int64_t t, int64_t t0, \
        int steps, int first) {                                                              \
        bf16x_tile(p, a, r, R, t, t0, steps, first, RG, T);                                  \
    }
BF16X_TILE(2, 1) BF16X_TILE(2, 2) BF16X_TILE(2, 3) BF16X_TILE(2, 4)
BF16X_TILE(2, 5) BF16X_TILE(2, 6) BF16X_TILE(2, 7) BF16X_TILE(2, 8)
BF16X_TILE(1, 1) BF16X_TILE(1, 2) BF16X_TILE(1, 3) BF16X_TILE(1, 4)
BF16X_TILE(1, 5) BF16X_TILE(1, 6) BF16X_TILE(1, 7) BF16X_TILE(1, 8)

typedef void (*bf16x_tile_fn)(const bf16x_pack *p, const ev_gemm_args *a, int64_t r, int R,
                              int64_t t, int64_t t0, int steps, int first);
static const bf16x_tile_fn TILES[3][MT + 1] = {
    {NULL},
    {NULL, tile_1x1, tile_1x2, tile_1x3, tile_1x4, tile_1x5, tile_1x6, tile_1x7, tile_1x8},
    {NULL, tile_2x1, tile_2x2, tile_2x3, tile_2x4, tile_2x5, tile_2x6, tile_2x7, tile_2x8},
};

EV_AVX512BF16 void ev_avx512_gemm_bf16x(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    bf16x_pack *p = (bf16x_pack *)(void *)a->pack;   /* 64-byte aligned */
    for (int64_t k0 = 0; k0 < a->n_in; k0 += KC) {
        const int kc = (int)(a->n_in - k0 < KC ? a->n_in - k0 : KC);
        const int kcp16 = (kc + 15) / 16 * 16, kcp32 = (kc + 31) / 32 * 32;
        for (int64_t t0 = 0; t0 < a->n_tok; t0 += MC) {
            const int64_t t1 = t0 + MC < a->n_tok ? t0 + MC : a->n_tok;
            convert_tokens(p, a, t0, t1, k0, kc, kcp32 < KC ? kcp32 : KC);
            for (int64_t r = r0; r < r1; r += PR) {
                const int R = (int)(r1 - r < PR ? r1 - r : PR);
                panel_pack(p, a, r, R, k0, kc, kcp16);
                const bf16x_tile_fn *tiles = TILES[R > 16 ? 2 : 1];
                int64_t t = t0;
                for (; t + MT <= t1; t += MT) tiles[MT](p, a, r, R, t, t0, kcp16 / 2, k0 == 0);
                if (t < t1) tiles[t1 - t](p, a, r, R, t, t0, kcp16 / 2, k0 == 0);
            }
        }
    }
}

#endif
