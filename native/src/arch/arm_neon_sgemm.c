/*
 * arm_neon_sgemm.c - the many-token matrix product on float32 activations for aarch64 (the
 * NEON twin of x86_avx2_sgemm.c; the loop nest is ev_gemm_dq_run in kernels.c): the panel
 * packer (weights of every type dequantised exactly into panels of 16 rows [k][16]) and a 6
 * tokens x 16 rows micro-kernel (24 accumulators of 4 lanes). Reference: the scalar set's
 * gemm_dq. Compiles to nothing off aarch64.
 */
#if defined(__aarch64__)

#include <arm_neon.h>
#include <string.h>

#include "arm_neon_kquants.h"
#include "arm_neon_sgemm.h"

#define PK_NR EV_GEMM_NR
#define PK_MR EV_GEMM_MR
#define PK_KC EV_GEMM_KC

/* one row's columns [k0, k0 + kc) (whole blocks) as float32 into dst[kc]: Q4_K / Q6_K by the
 * NEON dequantisers (arm_neon_kquants.c), every other type by the type table's to_float */
static void dq_row(const ev_type_traits *t, const uint8_t *row, int64_t k0, int kc, float *dst) {
    const uint8_t *blocks = row + k0 / t->block_size * t->type_size;
    if (t->type == EV_TYPE_Q4_K) ev_neon_dequantize_q4_K(blocks, dst, kc);
    else if (t->type == EV_TYPE_Q6_K) ev_neon_dequantize_q6_K(blocks, dst, kc);
    else t->to_float(blocks, dst, kc);
}

/* rows r..r+R-1 (the rest zeros), columns [k0, k0 + kc) into one panel [k][16]: each row
 * dequantised into tmp [16][kc] (dq_row), then written 4 columns x 4 rows at a time through a 4 x 4
 * transpose (4 vector stores instead of 16 scalar stores 64 bytes apart) */
static void pk_pack(float *panel, const ev_gemm_args *a, int64_t r, int R, int64_t k0, int kc) {
    const ev_type_traits *t = ev_type_get(a->w_type);
    float tmp[PK_NR][PK_KC] __attribute__((aligned(16)));   /* 16 KiB */
    for (int i = 0; i < PK_NR; i++) {
        if (i < R) {
            dq_row(t, a->w + (r + i) * a->w_stride, k0, kc, tmp[i]);
        } else {
            memset(tmp[i], 0, sizeof(float) * (size_t)kc);
        }
    }
    int k = 0;
    for (; k + 4 <= kc; k += 4) {
        for (int g = 0; g < PK_NR; g += 4) {
            const float32x4_t r0 = vld1q_f32(tmp[g] + k), r1 = vld1q_f32(tmp[g + 1] + k);
            const float32x4_t r2 = vld1q_f32(tmp[g + 2] + k), r3 = vld1q_f32(tmp[g + 3] + k);
            const float32x4_t t0 = vtrn1q_f32(r0, r1), t1 = vtrn2q_f32(r0, r1);
            const float32x4_t t2 = vtrn1q_f32(r2, r3), t3 = vtrn2q_f32(r2, r3);
            float *out = panel + (int64_t)k * PK_NR + g;   /* column k + j: out + j * PK_NR */
            vst1q_f32(out, vreinterpretq_f32_f64(vtrn1q_f64(vreinterpretq_f64_f32(t0),
                                                            vreinterpretq_f64_f32(t2))));
            vst1q_f32(out + PK_NR, vreinterpretq_f32_f64(vtrn1q_f64(vreinterpretq_f64_f32(t1),
                                                                    vreinterpretq_f64_f32(t3))));
            vst1q_f32(out + 2 * PK_NR, vreinterpretq_f32_f64(vtrn2q_f64(
                                           vreinterpretq_f64_f32(t0), vreinterpretq_f64_f32(t2))));
            vst1q_f32(out + 3 * PK_NR, vreinterpretq_f32_f64(vtrn2q_f64(
                                           vreinterpretq_f64_f32(t1), vreinterpretq_f64_f32(t3))));
        }
    }
    for (; k < kc; k++)
        for (int i = 0; i < PK_NR; i++) panel[(int64_t)k * PK_NR + i] = tmp[i][k];
}

/* M tokens x 16 rows over kc columns; R valid rows; first chunk: y = bias + sum, else += */
static inline void pk_tile(const int M, const float *x, const float *pw, int kc, float *y,
                           int64_t ldy, int R, int first, const float *bias) {
    float32x4_t acc[PK_MR][4];
    for (int m = 0; m < M; m++) {
        __builtin_prefetch(y + m * ldy, 1, 3);   /* y is megabytes: see x86_avx2_sgemm.c */
        __builtin_prefetch(y + m * ldy + R - 1, 1, 3);
        for (int j = 0; j < 4; j++) acc[m][j] = vdupq_n_f32(0.0f);
    }
    for (int k = 0; k < kc; k++) {
        const float *wk = pw + k * PK_NR;
        const float32x4_t w0 = vld1q_f32(wk), w1 = vld1q_f32(wk + 4);
        const float32x4_t w2 = vld1q_f32(wk + 8), w3 = vld1q_f32(wk + 12);
        for (int m = 0; m < M; m++) {
            const float xv = x[k * PK_MR + m];
            acc[m][0] = vfmaq_n_f32(acc[m][0], w0, xv);
            acc[m][1] = vfmaq_n_f32(acc[m][1], w1, xv);
            acc[m][2] = vfmaq_n_f32(acc[m][2], w2, xv);
            acc[m][3] = vfmaq_n_f32(acc[m][3], w3, xv);
        }
    }
    for (int m = 0; m < M; m++) {
        float out[PK_NR];
        for (int j = 0; j < 4; j++) vst1q_f32(out + 4 * j, acc[m][j]);
        float *yr = y + m * ldy;
        for (int i = 0; i < R; i++) yr[i] = out[i] + (first ? (bias ? bias[i] : 0.0f) : yr[i]);
    }
}

EV_GEMM_DQ_TILES(, pk_tile, pk_tile)

static const ev_gemm_dq_tile_fn TILES[EV_GEMM_MR + 1] = {NULL, pk_tile_1, pk_tile_2, pk_tile_3,
                                                           pk_tile_4, pk_tile_5, pk_tile_6};
static const ev_gemm_dq_ops OPS = {pk_pack, TILES, NULL, NULL};   /* tokens: the portable loop */

void ev_neon_gemm_dq(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    ev_gemm_dq_run(a, r0, r1, &OPS);
}

#endif
