/*
 * arm_neon_qgemm.c - the many-token products of Q8_0/Q4_0 weights on integer activations with
 * SDOT (armv8.2-a dotprod; the RK3588's Cortex-A76 has it, not i8mm): Y[t][r] = X[t] . W[r]
 * (+ bias[r]) for one thread's rows [r0, r1). The NEON counterpart of x86_avx2_qgemm.c.
 *  - gemm_q16x (the default "exact" precision): activations as int16 blocks of 32 from
 *    quantize_i16 (d_x = amax / 32767). SDOT multiplies signed bytes by signed bytes only, so
 *    each int16 x (|x| <= 32767) is split into two bytes: hi = x >> 8 (arithmetic, -128..127)
 *    and lo = (x & 0xff) - 128 (-128..127; as a byte, (x & 0xff) ^ 0x80), so that
 *    x = 256 hi + lo + 128 and, for a block's weights w (int8: Q8_0 q, Q4_0 nibble - 8),
 *        sum(w x) = 256 sum(w hi) + sum(w lo) + 128 sum(w).
 *    Every term is an exact int32 (|sum w hi|, |sum w lo| <= 32 x 128 x 128 = 2^19, the whole
 *    < 2^27), so each block's int32 is the same integer as the int16 product's: 2 SDOT chains
 *    (hi, lo; the lo chain starts at 128 sum(w), computed once per (row, block) when the
 *    weights are packed), one multiply-add by 256, then one float FMA with d_w x d_x. The
 *    result is the scalar reference's on the same int16 activations up to float sum order.
 *    (A split without the offset, hi = (x + 128) >> 8, would need hi = 128 at x >= 32640.)
 *  - gemm_q8x (the "fast" precision, only in the fast set): Q8_0 activations, one SDOT chain
 *    per block, no offset (signed x signed): ggml's arithmetic (its q4_0_4x4 / q8_0_4x4 gemm).
 * Reference: the scalar set's products on the same rounded activations (test_kernels.c:
 * test_neon_int_ragged, and the ev_matmul sweeps).
 *
 * Layout (ggml's 4x4 interleave). A panel holds PR = 4 weight rows of a K chunk of KCB blocks:
 *     wq[KCB][8 column groups][4 rows][4 int8]   (128 bytes a block: 8 registers)
 *     dw[KCB][4] float, wsum128[KCB][4] int32     (block scales; 128 x the block's weight sum)
 * so that one register is 4 consecutive columns of each of the 4 rows, and lane i of an int32
 * accumulator is row i: `vdotq_laneq_s32(acc, w[g], x, l)` adds, for every row, the dot of its
 * 4 columns with 4 activation bytes of one token (lane l of x: columns 4l..4l+3). The
 * activations of a token block (TB tokens, tiles of MT = 4) are split (q16x) or copied (q8x)
 * once per (token block, y block, K chunk) into
 *     xs[TB / 4][KCB][4 tokens][64 bytes]   (q16x: hi[32] | lo[32]; q8x: q[32], then unused)
 *     xd[TB / 4][KCB][4] float              (the 4 tokens' block scales: one vector)
 * the last tile zero-padded. The micro-kernel, 4 rows x T tokens (T = 1..4, each its own
 * function), keeps per block the 8 weight registers, the token's 2 or 4 activation registers,
 * one (q8x) or two (q16x) int32 chains and T float accumulators in registers (no stack
 * traffic in the loop: GCC 12, -O2 and -O3). A block of the 4 x 4 tile is 109 instructions
 * for q16x, 64 of them SDOT (per token beside its 16 SDOT: 4 loads, the chains' two starts,
 * MLA by 256, SCVTF, the d_w d_x multiply, FMA), and 66 for q8x, 32 SDOT: 0.21 and 0.13
 * instructions per weight x token (bench/neon_counts.py counts 0.223 and 0.138 with the
 * packing and the tile edges).
 *
 * Loop nest: tokens in blocks of TB; the rows in y blocks whose y over the token block fits
 * Y_BLOCK_BYTES; K in chunks of KCB blocks (the token block's split activations, 128 KiB,
 * stay in L2); the block's rows in panels of 4, each packed once and swept by every tile of
 * the token block. The first chunk writes y (with the bias), later ones add.
 */
#if defined(__aarch64__)

#include <arm_neon.h>
#include <string.h>

#include "arm_neon_qgemm.h"

#define PR 4                      /* weight rows per panel (the int32 lanes) */
#define MT 4                      /* tokens per micro-tile */
#define KCB 16                    /* blocks per K chunk */
#define TB 128                    /* tokens per token block (a multiple of MT) */
#define XB_MAX 64                 /* activation bytes per token and block (q16x: hi | lo) */
#define Y_BLOCK_BYTES (256 * 1024) /* y of one row block and token block: half of an A76 L2 */

typedef struct sdot_pack {
    _Alignas(64) int8_t xs[TB / MT][KCB][MT][XB_MAX]; /* tile, block, token: hi|lo or q */
    _Alignas(64) float xd[TB / MT][KCB][MT];          /* d_x of tile, block, token */
    _Alignas(64) int8_t wq[KCB][8][PR][4];            /* block, column group, row, 4 int8 */
    _Alignas(64) float dw[KCB][PR];                   /* d_w; missing rows 0 */
    _Alignas(64) int32_t wsum128[KCB][PR];            /* 128 x sum of the block's weights */
} sdot_pack;
_Static_assert(sizeof(sdot_pack) <= sizeof(float) * EV_GEMM_PACK_FLOATS, "sdot_pack fits a->pack");
_Static_assert(TB % MT == 0, "token blocks hold whole tiles");

static inline float fp16_to_f32(ev_fp16 h) {
    __fp16 v;
    memcpy(&v, &h, sizeof v);
    return (float)v;
}

/* ---- quantize_i16 (plain NEON) ---------------------------------------------------------- */

void ev_neon_quantize_i16(const float *x, int16_t *q, float *d, int64_t n) {
    for (int64_t b = 0; b < n / EV_QK; b++) {
        const float *xb = x + b * EV_QK;
        float32x4_t v[8], m = vdupq_n_f32(0.0f);
        for (int j = 0; j < 8; j++) {
            v[j] = vld1q_f32(xb + 4 * j);
            m = vmaxq_f32(m, vabsq_f32(v[j]));
        }
        const float amax = vmaxvq_f32(m);
        const float id = amax > 0.0f ? 32767.0f / amax : 0.0f;
        d[b] = amax / 32767.0f;
        for (int j = 0; j < 8; j += 2) {   /* FCVTNS: to nearest, ties to even, as rintf */
            const int32x4_t i0 = vcvtnq_s32_f32(vmulq_n_f32(v[j], id));
            const int32x4_t i1 = vcvtnq_s32_f32(vmulq_n_f32(v[j + 1], id));
            vst1q_s16(q + b * EV_QK + 4 * j, vcombine_s16(vqmovn_s32(i0), vqmovn_s32(i1)));
        }
    }
}

/* ---- the SDOT products ------------------------------------------------------------------ */

#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+dotprod")

#define AI static inline __attribute__((always_inline))

/* Tokens [t0, t0 + nt) (nt <= TB), blocks [kb, kb + n) into p->xs / p->xd, the last tile's
 * missing tokens zero. q16x: hi and lo bytes of the int16 activations; q8x: the Q8_0 q. */
AI void pack_tokens(sdot_pack *p, const ev_gemm_args *a, int64_t t0, int nt, int64_t kb, int n,
                    const int q16) {
    const int64_t nb = a->n_in / EV_QK;
    const int tiles = (nt + MT - 1) / MT;
    const int8x16_t flip = vdupq_n_s8((int8_t)0x80);   /* (x & 0xff) - 128 as a byte */
    for (int tt = 0; tt < tiles; tt++)
        for (int j = 0; j < MT; j++) {
            const int tok = tt * MT + j;
            for (int b = 0; b < n; b++) {
                int8_t *out = p->xs[tt][b][j];
                if (tok >= nt) {
                    memset(out, 0, q16 ? 64 : 32);
                    p->xd[tt][b][j] = 0.0f;
                    continue;
                }
                const int64_t t = t0 + tok;
                p->xd[tt][b][j] = a->x_scale[t * nb + kb + b];
                if (!q16) {
                    const ev_block_q8_0 *xb = (const ev_block_q8_0 *)(a->x + t * a->x_stride) + kb + b;
                    vst1q_s8(out, vld1q_s8(xb->qs));
                    vst1q_s8(out + 16, vld1q_s8(xb->qs + 16));
                    continue;
                }
                /* little-endian int16: byte 2i is x_i's low byte, 2i + 1 its high byte */
                const int8_t *xb = (const int8_t *)(a->x + t * a->x_stride) + (kb + b) * 64;
                const int8x16_t v0 = vld1q_s8(xb), v1 = vld1q_s8(xb + 16);
                const int8x16_t v2 = vld1q_s8(xb + 32), v3 = vld1q_s8(xb + 48);
                vst1q_s8(out, vuzp2q_s8(v0, v1));                        /* hi, columns 0..15 */
                vst1q_s8(out + 16, vuzp2q_s8(v2, v3));                   /* hi, 16..31 */
                vst1q_s8(out + 32, veorq_s8(vuzp1q_s8(v0, v1), flip));   /* lo, 0..15 */
                vst1q_s8(out + 48, veorq_s8(vuzp1q_s8(v2, v3), flip));   /* lo, 16..31 */
            }
        }
}

/* a weight row's block b as int8 columns 0..15 (lo) and 16..31 (hi) */
AI void w_block_i8(const uint8_t *row, int64_t b, const int q4, int8x16_t *lo, int8x16_t *hi) {
    if (q4) {   /* element j in the low nibble of byte j, j + 16 in the high */
        const uint8x16_t v = vld1q_u8(((const ev_block_q4_0 *)row)[b].qs);
        *lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0f))), vdupq_n_s8(8));
        *hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), vdupq_n_s8(8));
        return;
    }
    const int8_t *qs = ((const ev_block_q8_0 *)row)[b].qs;
    *lo = vld1q_s8(qs);
    *hi = vld1q_s8(qs + 16);
}

/* r[i] = row i's 4 column groups (4 int8 each); stores group g of the 4 rows at out[g] */
AI void transpose_4x4_store(const int8x16_t r[4], int8_t out[4][PR][4]) {
    const uint32x4_t r0 = vreinterpretq_u32_s8(r[0]), r1 = vreinterpretq_u32_s8(r[1]);
    const uint32x4_t r2 = vreinterpretq_u32_s8(r[2]), r3 = vreinterpretq_u32_s8(r[3]);
    const uint64x2_t t0 = vreinterpretq_u64_u32(vtrn1q_u32(r0, r1));   /* groups 0 | 2 */
    const uint64x2_t t1 = vreinterpretq_u64_u32(vtrn2q_u32(r0, r1));   /* 1 | 3 */
    const uint64x2_t t2 = vreinterpretq_u64_u32(vtrn1q_u32(r2, r3));
    const uint64x2_t t3 = vreinterpretq_u64_u32(vtrn2q_u32(r2, r3));
    vst1q_u64((uint64_t *)out[0], vtrn1q_u64(t0, t2));
    vst1q_u64((uint64_t *)out[1], vtrn1q_u64(t1, t3));
    vst1q_u64((uint64_t *)out[2], vtrn2q_u64(t0, t2));
    vst1q_u64((uint64_t *)out[3], vtrn2q_u64(t1, t3));
}

/* Rows r..r+R-1 (R <= 4; the rest zero weights, scales and sums), blocks [kb, kb + n). */
AI void pack_panel(sdot_pack *p, const ev_gemm_args *a, int64_t r, int R, int64_t kb, int n,
                   const int q4) {
    for (int b = 0; b < n; b++) {
        int8x16_t lo[PR], hi[PR];
        for (int i = 0; i < PR; i++) {
            if (i >= R) {
                lo[i] = hi[i] = vdupq_n_s8(0);
                p->dw[b][i] = 0.0f;
                p->wsum128[b][i] = 0;
                continue;
            }
            const uint8_t *row = a->w + (r + i) * a->w_stride;
            w_block_i8(row, kb + b, q4, &lo[i], &hi[i]);
            p->dw[b][i] = fp16_to_f32(q4 ? ((const ev_block_q4_0 *)row)[kb + b].d
                                         : ((const ev_block_q8_0 *)row)[kb + b].d);
            p->wsum128[b][i] = 128 * ((int32_t)vaddlvq_s8(lo[i]) + (int32_t)vaddlvq_s8(hi[i]));
        }
        transpose_4x4_store(lo, p->wq[b]);       /* column groups 0..3 */
        transpose_4x4_store(hi, p->wq[b] + 4);   /* 4..7 */
    }
}

/* acc + w[0..3] . x's 4 lanes + w[4..7] . y's: one block of 32 columns for 4 rows */
AI int32x4_t dot_block(int32x4_t acc, const int8x16_t w[8], int8x16_t x, int8x16_t y) {
    acc = vdotq_laneq_s32(acc, w[0], x, 0);
    acc = vdotq_laneq_s32(acc, w[1], x, 1);
    acc = vdotq_laneq_s32(acc, w[2], x, 2);
    acc = vdotq_laneq_s32(acc, w[3], x, 3);
    acc = vdotq_laneq_s32(acc, w[4], y, 0);
    acc = vdotq_laneq_s32(acc, w[5], y, 1);
    acc = vdotq_laneq_s32(acc, w[6], y, 2);
    return vdotq_laneq_s32(acc, w[7], y, 3);
}

/* d * s[j]; j is a compile-time constant after inlining (lanes must be literals) */
AI float32x4_t mul_lane(float32x4_t d, float32x4_t s, const int j) {
    switch (j) {
    case 0: return vmulq_laneq_f32(d, s, 0);
    case 1: return vmulq_laneq_f32(d, s, 1);
    case 2: return vmulq_laneq_f32(d, s, 2);
    default: return vmulq_laneq_f32(d, s, 3);
    }
}

/* 4 rows' sums s into y[0..R) (R < 4: the rows past the panel's last are not written); the
 * first K chunk writes s + bias, later ones add */
AI void store_y4(float *y, const float *bias, float32x4_t s, int R, int first) {
    if (R >= PR) {
        if (!first) s = vaddq_f32(s, vld1q_f32(y));
        else if (bias) s = vaddq_f32(s, vld1q_f32(bias));
        vst1q_f32(y, s);
        return;
    }
    float v[PR];
    vst1q_f32(v, s);
    for (int i = 0; i < R; i++) y[i] = first ? v[i] + (bias ? bias[i] : 0.0f) : y[i] + v[i];
}

/* The panel's 4 rows (R valid) x T tokens (1..4, from token t: tile tt of the token block)
 * over the chunk's n blocks. */
AI void sdot_tile(const sdot_pack *p, const ev_gemm_args *a, int64_t r, int R, int64_t t,
                  int tt, int64_t kb, int n, const int T, const int q16) {
    float32x4_t facc[MT];
#pragma GCC unroll 4
    for (int j = 0; j < T; j++) facc[j] = vdupq_n_f32(0.0f);
    for (int b = 0; b < n; b++) {
        int8x16_t w[8];
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) w[g] = vld1q_s8(p->wq[b][g][0]);
        const float32x4_t dw = vld1q_f32(p->dw[b]), dx = vld1q_f32(p->xd[tt][b]);
        const int32x4_t wsum128 = q16 ? vld1q_s32(p->wsum128[b]) : vdupq_n_s32(0);
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) {
            const int8_t *xj = p->xs[tt][b][j];
            int32x4_t s;
            if (q16) {   /* 256 sum(w hi) + (128 sum(w) + sum(w lo)) */
                const int32x4_t shi = dot_block(vdupq_n_s32(0), w, vld1q_s8(xj), vld1q_s8(xj + 16));
                const int32x4_t slo = dot_block(wsum128, w, vld1q_s8(xj + 32), vld1q_s8(xj + 48));
                s = vmlaq_n_s32(slo, shi, 256);
            } else {
                s = dot_block(vdupq_n_s32(0), w, vld1q_s8(xj), vld1q_s8(xj + 16));
            }
            facc[j] = vfmaq_f32(facc[j], vcvtq_f32_s32(s), mul_lane(dw, dx, j));
        }
    }
    const float *bias = a->bias ? a->bias + r : NULL;
#pragma GCC unroll 4
    for (int j = 0; j < T; j++) store_y4(a->y + (t + j) * a->n_out + r, bias, facc[j], R, kb == 0);
}

/* The tile shapes, each its own function (one loop over every shape spills). */
typedef void (*sdot_tile_fn)(const sdot_pack *p, const ev_gemm_args *a, int64_t r, int R,
                             int64_t t, int tt, int64_t kb, int n);
#define SDOT_TILE(NAME, T, Q16)                                                               \
    static __attribute__((noinline)) void NAME##_##T(const sdot_pack *p, const ev_gemm_args *a, \
                                                     int64_t r, int R, int64_t t, int tt,     \
                                                     int64_t kb, int n) {                     \
        sdot_tile(p, a, r, R, t, tt, kb, n, T, Q16);                                          \
    }
#define SDOT_TILES(NAME, Q16) SDOT_TILE(NAME, 1, Q16) SDOT_TILE(NAME, 2, Q16) \
    SDOT_TILE(NAME, 3, Q16) SDOT_TILE(NAME, 4, Q16)
SDOT_TILES(tile_q16, 1)
SDOT_TILES(tile_q8, 0)
_Static_assert(MT == 4, "the tile lists hold 1..4 tokens");
static const sdot_tile_fn TILES_Q16[MT + 1] = {NULL, tile_q16_1, tile_q16_2, tile_q16_3, tile_q16_4};
static const sdot_tile_fn TILES_Q8[MT + 1] = {NULL, tile_q8_1, tile_q8_2, tile_q8_3, tile_q8_4};

AI void sdot_gemm(const ev_gemm_args *a, int64_t r0, int64_t r1, const int q4, const int q16) {
    const int64_t nb = a->n_in / EV_QK;
    sdot_pack *p = (sdot_pack *)(void *)a->pack;   /* 64-byte aligned, 1.2 MiB (uses 141 KiB) */
    const sdot_tile_fn *tiles = q16 ? TILES_Q16 : TILES_Q8;
    for (int64_t t0 = 0; t0 < a->n_tok; t0 += TB) {
        const int nt = (int)(a->n_tok - t0 < TB ? a->n_tok - t0 : TB);
        /* rows per y block: its y (rows x nt floats) stays in L2 across the K chunks */
        int64_t rows_per_yb = (int64_t)Y_BLOCK_BYTES / (4 * nt) / PR * PR;
        if (rows_per_yb < PR) rows_per_yb = PR;
        for (int64_t rb = r0; rb < r1; rb += rows_per_yb) {
            const int64_t re = r1 - rb < rows_per_yb ? r1 : rb + rows_per_yb;
            for (int64_t kb = 0; kb < nb; kb += KCB) {
                const int n = (int)(nb - kb < KCB ? nb - kb : KCB);
                pack_tokens(p, a, t0, nt, kb, n, q16);
                for (int64_t r = rb; r < re; r += PR) {
                    const int R = (int)(re - r < PR ? re - r : PR);
                    pack_panel(p, a, r, R, kb, n, q4);
                    for (int tt = 0; tt * MT < nt; tt++) {
                        const int T = nt - tt * MT < MT ? nt - tt * MT : MT;
                        tiles[T](p, a, r, R, t0 + tt * MT, tt, kb, n);
                    }
                }
            }
        }
    }
}

void ev_neon_gemm_q16x_q8_0(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    sdot_gemm(a, r0, r1, 0, 1);
}
void ev_neon_gemm_q16x_q4_0(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    sdot_gemm(a, r0, r1, 1, 1);
}
void ev_neon_gemm_q8x_q8_0(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    sdot_gemm(a, r0, r1, 0, 0);
}
void ev_neon_gemm_q8x_q4_0(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    sdot_gemm(a, r0, r1, 1, 0);
}

#pragma GCC pop_options

#endif
