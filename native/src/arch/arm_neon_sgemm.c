/*
 * arm_neon_sgemm.c - the many-token matrix product on float32 activations for aarch64 (the
 * NEON twin of x86_avx2_sgemm.c, same BLIS blocking from kernels.h): weights of every type
 * dequantised exactly into panels of 16 rows [k][16], tokens packed into micro-tiles [k][6],
 * a 6 tokens x 16 rows micro-kernel (24 accumulators of 4 lanes). Reference: the scalar set's
 * gemm_dq. Compiles to nothing off aarch64.
 */
#if defined(__aarch64__)

#include <arm_neon.h>
#include <string.h>

#include "arm_neon_sgemm.h"

#define PK_NR 16
#define PK_MR 6
#define PK_KC EV_GEMM_KC
#define PK_MC (EV_GEMM_MC / PK_MR * PK_MR)
#define PK_NC EV_GEMM_NC

/* rows r..r+R-1 (the rest zeros), columns [k0, k0 + kc) into one panel [k][16] */
static void pk_pack(float *panel, const ev_gemm_args *a, int64_t r, int R, int64_t k0, int kc) {
    const ev_type_traits *t = ev_type_get(a->w_type);
    float tmp[PK_KC];
    for (int i = 0; i < PK_NR; i++) {
        if (i < R) {
            const uint8_t *row = a->w + (r + i) * a->w_stride;
            t->to_float(row + k0 / t->block_size * t->type_size, tmp, kc);
            for (int k = 0; k < kc; k++) panel[k * PK_NR + i] = tmp[k];
        } else {
            for (int k = 0; k < kc; k++) panel[k * PK_NR + i] = 0.0f;
        }
    }
}

/* tokens [t0, t1) x columns [k0, k0 + kc) as micro-tiles [tile][k][6], zero-padded */
static void pk_pack_x(float *xp, const ev_gemm_args *a, int64_t t0, int64_t t1, int64_t k0,
                      int kc) {
    for (int64_t t = t0; t < t1; t += PK_MR) {
        float *tile = xp + (t - t0) / PK_MR * (int64_t)kc * PK_MR;
        for (int m = 0; m < PK_MR; m++) {
            const float *xr = t + m < t1 ? (const float *)(a->x + (t + m) * a->x_stride) + k0 : NULL;
            for (int k = 0; k < kc; k++) tile[k * PK_MR + m] = xr ? xr[k] : 0.0f;
        }
    }
}

/* M tokens x 16 rows over kc columns; R valid rows; first chunk: y = bias + sum, else += */
static inline void pk_tile(const int M, const float *x, const float *pw, int kc, float *y,
                           int64_t ldy, int R, int first, const float *bias) {
    float32x4_t acc[PK_MR][4];
    for (int m = 0; m < M; m++)
        for (int j = 0; j < 4; j++) acc[m][j] = vdupq_n_f32(0.0f);
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

#define PK_TILE(M)                                                                           \
    __attribute__((noinline)) static void pk_tile_##M(const float *x, const float *pw,      \
                                                       int kc, float *y, int64_t ldy, int R, \
                                                       int first, const float *bias) {       \
        pk_tile(M, x, pw, kc, y, ldy, R, first, bias);                                      \
    }
PK_TILE(1)
PK_TILE(2)
PK_TILE(3)
PK_TILE(4)
PK_TILE(5)
PK_TILE(6)
#undef PK_TILE

typedef void (*pk_tile_fn)(const float *, const float *, int, float *, int64_t, int, int,
                           const float *);
static const pk_tile_fn PK_TILES[PK_MR + 1] = {NULL, pk_tile_1, pk_tile_2, pk_tile_3,
                                               pk_tile_4, pk_tile_5, pk_tile_6};

void ev_neon_gemm_dq(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    float *xp = a->pack, *wp = a->pack + PK_MC * PK_KC;
    for (int64_t k0 = 0; k0 < a->n_in; k0 += PK_KC) {
        const int kc = (int)(a->n_in - k0 < PK_KC ? a->n_in - k0 : PK_KC);
        for (int64_t jc = r0; jc < r1; jc += PK_NC) {
            const int64_t jc1 = jc + PK_NC < r1 ? jc + PK_NC : r1;
            for (int64_t r = jc; r < jc1; r += PK_NR)
                pk_pack(wp + (r - jc) * kc, a, r, (int)(jc1 - r < PK_NR ? jc1 - r : PK_NR), k0, kc);
            for (int64_t t0 = 0; t0 < a->n_tok; t0 += PK_MC) {
                const int64_t t1 = t0 + PK_MC < a->n_tok ? t0 + PK_MC : a->n_tok;
                pk_pack_x(xp, a, t0, t1, k0, kc);
                for (int64_t r = jc; r < jc1; r += PK_NR) {
                    const int R = (int)(jc1 - r < PK_NR ? jc1 - r : PK_NR);
                    const float *bias = a->bias ? a->bias + r : NULL;
                    for (int64_t t = t0; t < t1; t += PK_MR) {
                        const int M = (int)(t1 - t < PK_MR ? t1 - t : PK_MR);
                        PK_TILES[M](xp + (t - t0) * kc, wp + (r - jc) * kc, kc,
                                    a->y + t * a->n_out + r, a->n_out, R, k0 == 0, bias);
                    }
                }
            }
        }
    }
}

#endif
