/*
 * arm_neon_q.h - the quantised NEON kernels, a template included twice by arm_neon.c: once
 * with NEON_DOT 0 (plain NEON: int8 widening multiplies) and once with NEON_DOT 1 inside
 * `#pragma GCC target("+dotprod")` (SDOT). NQ(name) gives each instantiation its own names.
 * Reference: kernels_scalar.c (vec_dot_q8_0 / vec_dot_q4_0: int32 per block, then float).
 */

/* sum over 32 int8 pairs (w0|w1) . (x0|x1) as 4 int32 lanes */
static inline __attribute__((always_inline)) int32x4_t NQ(dot32)(int8x16_t w0, int8x16_t w1,
                                                                  int8x16_t x0, int8x16_t x1) {
#if NEON_DOT
    return vdotq_s32(vdotq_s32(vdupq_n_s32(0), w0, x0), w1, x1);
#else
    int32x4_t p = vpaddlq_s16(vmull_s8(vget_low_s8(w0), vget_low_s8(x0)));
    p = vpadalq_s16(p, vmull_high_s8(w0, x0));
    p = vpadalq_s16(p, vmull_s8(vget_low_s8(w1), vget_low_s8(x1)));
    return vpadalq_s16(p, vmull_high_s8(w1, x1));
#endif
}

static void NQ(vec_dot_q8_0)(int64_t n, float *out, const void *w_row, const void *x_row) {
    const ev_block_q8_0 *w = w_row, *x = x_row;
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < n / EV_QK; b++) {
        int32x4_t p = NQ(dot32)(vld1q_s8(w[b].qs), vld1q_s8(w[b].qs + 16), vld1q_s8(x[b].qs),
                                vld1q_s8(x[b].qs + 16));
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(p), neon_fp16(w[b].d) * neon_fp16(x[b].d));
    }
    *out = vaddvq_f32(acc);
}

static void NQ(vec_dot_q4_0)(int64_t n, float *out, const void *w_row, const void *x_row) {
    const ev_block_q4_0 *w = w_row;
    const ev_block_q8_0 *x = x_row;
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < n / EV_QK; b++) {
        int8x16_t lo, hi;
        neon_unpack_q4_0(w[b].qs, &lo, &hi);
        int32x4_t p = NQ(dot32)(lo, hi, vld1q_s8(x[b].qs), vld1q_s8(x[b].qs + 16));
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(p), neon_fp16(w[b].d) * neon_fp16(x[b].d));
    }
    *out = vaddvq_f32(acc);
}

/* R rows x C tokens over all blocks (R, C <= 4, compile-time after inlining): each weight
 * block is loaded (and for Q4_0 unpacked) once for the C tokens. The 4 row scales live in one
 * vector; the 4 x 3 shape in use (12 accumulators, 8 weight vectors, 2 activation vectors,
 * scales and temporaries) fits the 32 registers, where 4 x 4 spills. */
static inline __attribute__((always_inline)) void NQ(q_tile)(const ev_gemm_args *a, int64_t r,
                                                             int64_t t, const int R,
                                                             const int C, const int q4) {
    const int64_t nb = a->n_in / EV_QK;
    float32x4_t acc[4][4];
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int j = 0; j < C; j++) acc[i][j] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nb; b++) {
        int8x16_t w0[4], w1[4];
        uint16x4_t dh = vdup_n_u16(0);
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
            const uint8_t *row = a->w + (r + i) * a->w_stride;
            if (q4) {
                const ev_block_q4_0 *wb = (const ev_block_q4_0 *)row + b;
                neon_unpack_q4_0(wb->qs, &w0[i], &w1[i]);
                dh = neon_set_lane_u16(dh, wb->d, i);
            } else {
                const ev_block_q8_0 *wb = (const ev_block_q8_0 *)row + b;
                w0[i] = vld1q_s8(wb->qs);
                w1[i] = vld1q_s8(wb->qs + 16);
                dh = neon_set_lane_u16(dh, wb->d, i);
            }
        }
        const float32x4_t dw = vcvt_f32_f16(vreinterpret_f16_u16(dh));
#pragma GCC unroll 4
        for (int j = 0; j < C; j++) {
            const ev_block_q8_0 *xb = (const ev_block_q8_0 *)(a->x + (t + j) * a->x_stride) + b;
            const int8x16_t x0 = vld1q_s8(xb->qs), x1 = vld1q_s8(xb->qs + 16);
            const float32x4_t sc = vmulq_n_f32(dw, a->x_scale[(t + j) * nb + b]);
#pragma GCC unroll 4
            for (int i = 0; i < R; i++)
                acc[i][j] = neon_fma_lane(acc[i][j], vcvtq_f32_s32(NQ(dot32)(w0[i], w1[i], x0, x1)),
                                          sc, i);
        }
    }
    float sum[4][4];
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int j = 0; j < C; j++) sum[i][j] = vaddvq_f32(acc[i][j]);
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++)
            a->y[(t + j) * a->n_out + r + i] = sum[i][j] + (a->bias ? a->bias[r + i] : 0.0f);
}

/* each tile shape its own function: inlined into the loop nest, GCC spills accumulators */
#define NQ_TILE(NAME, R, C, Q4)                                                             \
    static __attribute__((noinline)) void NQ(NAME)(const ev_gemm_args *a, int64_t r, int64_t t) { \
        NQ(q_tile)(a, r, t, R, C, Q4);                                                      \
    }
NQ_TILE(q8_43, 4, 3, 0)
NQ_TILE(q8_41, 4, 1, 0)
NQ_TILE(q8_11, 1, 1, 0)
NQ_TILE(q4_43, 4, 3, 1)
NQ_TILE(q4_41, 4, 1, 1)
NQ_TILE(q4_11, 1, 1, 1)
#undef NQ_TILE

typedef void (*NQ(tile_fn))(const ev_gemm_args *a, int64_t r, int64_t t);

static void NQ(q_gemm)(const ev_gemm_args *a, int64_t r0, int64_t r1, NQ(tile_fn) t43,
                       NQ(tile_fn) t41, NQ(tile_fn) t11) {
    for (int64_t t0 = 0; t0 < a->n_tok; t0 += NEON_TOKEN_BLOCK) {
        const int64_t t1 = t0 + NEON_TOKEN_BLOCK < a->n_tok ? t0 + NEON_TOKEN_BLOCK : a->n_tok;
        int64_t r = r0;
        for (; r + 4 <= r1; r += 4) {
            int64_t t = t0;
            for (; t + 3 <= t1; t += 3) t43(a, r, t);
            for (; t < t1; t++) t41(a, r, t);
        }
        for (; r < r1; r++)
            for (int64_t t = t0; t < t1; t++) t11(a, r, t);
    }
}

static void NQ(gemm_q8_0)(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    NQ(q_gemm)(a, r0, r1, NQ(q8_43), NQ(q8_41), NQ(q8_11));
}

static void NQ(gemm_q4_0)(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    NQ(q_gemm)(a, r0, r1, NQ(q4_43), NQ(q4_41), NQ(q4_11));
}
