/*
 * arm_neon.c - the aarch64 kernel sets: "neon-dotprod" (SDOT, chosen when the CPU reports
 * HWCAP_ASIMDDP, e.g. the RK3588's Cortex-A76/A55) and "neon" (plain ASIMD, every aarch64).
 *
 * Tiles: float weights 4 rows x 4 tokens (16 FMLA per 8 loads), quantised 4 rows x 3 tokens
 * (SDOT pairs, row scales in one vector). Compiles to nothing off aarch64. The quantised kernels
 * are two templates (arm_neon_q.h: Q8_0/Q4_0, arm_neon_k.h: the K-quant dots against Q8_K)
 * instantiated twice; the dotprod copy is compiled under `#pragma GCC target`, so a baseline
 * armv8-a build still contains it and the CPU check decides at run time.
 * The dotprod set also multiplies many tokens of Q8_0/Q4_0 weights on integer activations
 * (arm_neon_qgemm.c: gemm_q16x, exact int16 activations split into two SDOT byte planes), and
 * its "fast" variant "neon-dotprod-fast" adds gemm_q8x (Q8_0 activations, llama.cpp's
 * rounding); the plain set has gemm_dq only.
 * Reference: kernels_scalar.c. Float sums are reordered (4 lanes, several accumulators).
 */
#if defined(__aarch64__)

#include <arm_neon.h>
#include <pthread.h>
#include <string.h>
#include <sys/auxv.h>

#include "../kernels.h"
#include "arm_neon_kquants.h"
#include "arm_neon_qgemm.h"
#include "arm_neon_sgemm.h"
#include "arm_neon_vit.h"

#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif

#define NEON_TOKEN_BLOCK 32        /* tokens whose activations stay in cache per row sweep */

static inline float neon_fp16(ev_fp16 h) {
    __fp16 v;
    memcpy(&v, &h, sizeof v);
    return (float)v;
}

/* h into lane i of v; i is a compile-time constant after inlining (lanes must be literals) */
static inline __attribute__((always_inline)) uint16x4_t neon_set_lane_u16(uint16x4_t v, uint16_t h,
                                                                          const int i) {
    switch (i) {
    case 0: return vset_lane_u16(h, v, 0);
    case 1: return vset_lane_u16(h, v, 1);
    case 2: return vset_lane_u16(h, v, 2);
    default: return vset_lane_u16(h, v, 3);
    }
}

/* acc + v * s[i] */
static inline __attribute__((always_inline)) float32x4_t neon_fma_lane(float32x4_t acc,
                                                                       float32x4_t v,
                                                                       float32x4_t s, const int i) {
    switch (i) {
    case 0: return vfmaq_laneq_f32(acc, v, s, 0);
    case 1: return vfmaq_laneq_f32(acc, v, s, 1);
    case 2: return vfmaq_laneq_f32(acc, v, s, 2);
    default: return vfmaq_laneq_f32(acc, v, s, 3);
    }
}

/* the 32 signed 4-bit weights of a Q4_0 block as int8 in [-8, 7]: elements 0..15, 16..31 */
static inline void neon_unpack_q4_0(const uint8_t *qs, int8x16_t *lo, int8x16_t *hi) {
    const uint8x16_t q = vld1q_u8(qs);
    *lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0f))), vdupq_n_s8(8));
    *hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), vdupq_n_s8(8));
}

/* 4 consecutive weights of a float-type row as float32 */
static inline float32x4_t load4_f32(const void *p, int64_t k) {
    return vld1q_f32((const float *)p + k);
}
static inline float32x4_t load4_f16(const void *p, int64_t k) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)p + k)));
}
static inline float32x4_t load4_bf16(const void *p, int64_t k) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16((const uint16_t *)p + k), 16));
}

/* ---- float weights against float32 activations ----------------------------------------- */

#define FLOAT_VEC_DOT(NAME, LOAD4, TO_F32, WTYPE)                                          \
    static void NAME(int64_t n, float *out, const void *w_row, const void *x_row) {         \
        const float *x = x_row;                                                            \
        float32x4_t s0 = vdupq_n_f32(0.0f), s1 = s0, s2 = s0, s3 = s0;                     \
        int64_t i = 0;                                                                     \
        for (; i + 16 <= n; i += 16) {                                                     \
            s0 = vfmaq_f32(s0, LOAD4(w_row, i), vld1q_f32(x + i));                         \
            s1 = vfmaq_f32(s1, LOAD4(w_row, i + 4), vld1q_f32(x + i + 4));                 \
            s2 = vfmaq_f32(s2, LOAD4(w_row, i + 8), vld1q_f32(x + i + 8));                 \
            s3 = vfmaq_f32(s3, LOAD4(w_row, i + 12), vld1q_f32(x + i + 12));               \
        }                                                                                  \
        for (; i + 4 <= n; i += 4) s0 = vfmaq_f32(s0, LOAD4(w_row, i), vld1q_f32(x + i));  \
        float sum = vaddvq_f32(vaddq_f32(vaddq_f32(s0, s1), vaddq_f32(s2, s3)));           \
        for (; i < n; i++) sum += TO_F32(((const WTYPE *)w_row)[i]) * x[i];                \
        *out = sum;                                                                        \
    }

#define F32_ID(v) (v)
FLOAT_VEC_DOT(vec_dot_f32, load4_f32, F32_ID, float)
FLOAT_VEC_DOT(vec_dot_f16, load4_f16, ev_fp16_to_f32, ev_fp16)
FLOAT_VEC_DOT(vec_dot_bf16, load4_bf16, ev_bf16_to_f32, ev_bf16)

static float dot_f32(int64_t n, const float *a, const float *b) {
    float out;
    vec_dot_f32(n, &out, a, b);
    return out;
}

static float dot_f16_f32(int64_t n, const ev_fp16 *a, const float *b) {
    float out;
    vec_dot_f16(n, &out, a, b);
    return out;
}

static void axpy_f32(int64_t n, float a, const float *x, float *y) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vfmaq_n_f32(vld1q_f32(y + i), vld1q_f32(x + i), a));
    for (; i < n; i++) y[i] += a * x[i];
}

static void axpy_f16_f32(int64_t n, float a, const ev_fp16 *x, float *y) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vfmaq_n_f32(vld1q_f32(y + i), load4_f16(x, i), a));
    for (; i < n; i++) y[i] += a * ev_fp16_to_f32(x[i]);
}

/* ---- activation quantiser: bit-identical to ev_quantize_row_q8_0 ------------------------ */

static void quantize_q8_0(const float *x, ev_block_q8_0 *y, int64_t n) {
    for (int64_t i = 0; i < n / EV_QK; i++) {
        const float *xb = x + i * EV_QK;
        float32x4_t v[8];
        float32x4_t m = vdupq_n_f32(0.0f);
        for (int j = 0; j < 8; j++) {
            v[j] = vld1q_f32(xb + 4 * j);
            m = vmaxq_f32(m, vabsq_f32(v[j]));
        }
        const float d = vmaxvq_f32(m) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = ev_f32_to_fp16(d);
        for (int j = 0; j < 8; j += 2) {
            /* FCVTAS rounds halves away from zero, as roundf */
            int32x4_t a = vcvtaq_s32_f32(vmulq_n_f32(v[j], id));
            int32x4_t b = vcvtaq_s32_f32(vmulq_n_f32(v[j + 1], id));
            int16x8_t h = vcombine_s16(vqmovn_s32(a), vqmovn_s32(b));
            vst1_s8(y[i].qs + 4 * j, vqmovn_s16(h));
        }
    }
}

/* ---- float weights: tiles of 4 rows x 4 tokens ------------------------------------------ */

static inline __attribute__((always_inline)) void float_tile(const ev_gemm_args *a, int64_t r,
                                                             int64_t t, const int R, const int C,
                                                             const int type) {
    const uint8_t *wr[4];
    const float *xr[4];
    float32x4_t acc[4][4];
#pragma GCC unroll 4
    for (int i = 0; i < R; i++) wr[i] = a->w + (r + i) * a->w_stride;
#pragma GCC unroll 4
    for (int j = 0; j < C; j++) xr[j] = (const float *)(a->x + (t + j) * a->x_stride);
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int j = 0; j < C; j++) acc[i][j] = vdupq_n_f32(0.0f);
    const int64_t n = a->n_in, n4 = n & ~(int64_t)3;
    for (int64_t k = 0; k < n4; k += 4) {
        float32x4_t xv[4];
#pragma GCC unroll 4
        for (int j = 0; j < C; j++) xv[j] = vld1q_f32(xr[j] + k);
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
            const float32x4_t wv = type == EV_TYPE_F32   ? load4_f32(wr[i], k)
                                   : type == EV_TYPE_F16 ? load4_f16(wr[i], k)
                                                         : load4_bf16(wr[i], k);
#pragma GCC unroll 4
            for (int j = 0; j < C; j++) acc[i][j] = vfmaq_f32(acc[i][j], wv, xv[j]);
        }
    }
    float sum[4][4];
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int j = 0; j < C; j++) sum[i][j] = vaddvq_f32(acc[i][j]);
    for (int i = 0; i < R; i++) {
        for (int j = 0; j < C; j++) {
            float s = sum[i][j];
            for (int64_t k = n4; k < n; k++) {
                float w = type == EV_TYPE_F32   ? ((const float *)wr[i])[k]
                          : type == EV_TYPE_F16 ? ev_fp16_to_f32(((const ev_fp16 *)wr[i])[k])
                                                : ev_bf16_to_f32(((const ev_bf16 *)wr[i])[k]);
                s += w * xr[j][k];
            }
            a->y[(t + j) * a->n_out + r + i] = s + (a->bias ? a->bias[r + i] : 0.0f);
        }
    }
}

#define FLOAT_TILES(SUFFIX, TYPE)                                                           \
    static __attribute__((noinline)) void SUFFIX##_44(const ev_gemm_args *a, int64_t r, int64_t t) { \
        float_tile(a, r, t, 4, 4, TYPE);                                                    \
    }                                                                                       \
    static __attribute__((noinline)) void SUFFIX##_41(const ev_gemm_args *a, int64_t r, int64_t t) { \
        float_tile(a, r, t, 4, 1, TYPE);                                                    \
    }                                                                                       \
    static __attribute__((noinline)) void SUFFIX##_11(const ev_gemm_args *a, int64_t r, int64_t t) { \
        float_tile(a, r, t, 1, 1, TYPE);                                                    \
    }
FLOAT_TILES(tile_f32, EV_TYPE_F32)
FLOAT_TILES(tile_f16, EV_TYPE_F16)
FLOAT_TILES(tile_bf16, EV_TYPE_BF16)

typedef void (*tile_fn)(const ev_gemm_args *a, int64_t r, int64_t t);

/* tiles of 4 rows x 4 tokens (one weight vector feeds 4 FMAs); edges in 4 x 1 and 1 x 1 */
static void float_gemm(const ev_gemm_args *a, int64_t r0, int64_t r1, tile_fn t44, tile_fn t41,
                       tile_fn t11) {
    for (int64_t t0 = 0; t0 < a->n_tok; t0 += NEON_TOKEN_BLOCK) {
        const int64_t t1 = t0 + NEON_TOKEN_BLOCK < a->n_tok ? t0 + NEON_TOKEN_BLOCK : a->n_tok;
        int64_t r = r0;
        for (; r + 4 <= r1; r += 4) {
            int64_t t = t0;
            for (; t + 4 <= t1; t += 4) t44(a, r, t);
            for (; t < t1; t++) t41(a, r, t);
        }
        for (; r < r1; r++)
            for (int64_t t = t0; t < t1; t++) t11(a, r, t);
    }
}

static void gemm_f32(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    float_gemm(a, r0, r1, tile_f32_44, tile_f32_41, tile_f32_11);
}
static void gemm_f16(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    float_gemm(a, r0, r1, tile_f16_44, tile_f16_41, tile_f16_11);
}
static void gemm_bf16(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    float_gemm(a, r0, r1, tile_bf16_44, tile_bf16_41, tile_bf16_11);
}

/* ---- the quantised kernels, twice ------------------------------------------------------- */

#define NEON_DOT 0
#define NQ(name) name##_plain
#include "arm_neon_q.h"
#include "arm_neon_k.h"
#undef NEON_DOT
#undef NQ

#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+dotprod")
#define NEON_DOT 1
#define NQ(name) name##_dot
#include "arm_neon_q.h"
#include "arm_neon_k.h"
#undef NEON_DOT
#undef NQ
#pragma GCC pop_options

/* ---- the sets --------------------------------------------------------------------------- */

#define NEON_SET(NAME, SUFFIX)                                                              \
    {                                                                                       \
        .name = NAME,                                                                       \
        .vec_dot = {[EV_TYPE_F32] = vec_dot_f32, [EV_TYPE_F16] = vec_dot_f16,               \
                    [EV_TYPE_BF16] = vec_dot_bf16, [EV_TYPE_Q8_0] = vec_dot_q8_0_##SUFFIX,  \
                    [EV_TYPE_Q4_0] = vec_dot_q4_0_##SUFFIX,                                 \
                    [EV_TYPE_Q4_K] = vec_dot_q4_K_##SUFFIX,                                 \
                    [EV_TYPE_Q6_K] = vec_dot_q6_K_##SUFFIX,                                 \
                    [EV_TYPE_Q5_K] = vec_dot_q5_K_##SUFFIX,                                 \
                    [EV_TYPE_IQ4_XS] = vec_dot_iq4_xs_##SUFFIX,                             \
                    [EV_TYPE_Q2_K] = vec_dot_q2_K_##SUFFIX,                                 \
                    [EV_TYPE_Q3_K] = vec_dot_q3_K_##SUFFIX},                                \
        .dot_f32 = dot_f32, .axpy_f32 = axpy_f32, .dot_f16_f32 = dot_f16_f32,               \
        .axpy_f16_f32 = axpy_f16_f32, .quantize_q8_0 = quantize_q8_0,                       \
        .quantize_q8_K = ev_neon_quantize_q8_K,                                             \
        .sgemm_f32 = ev_neon_sgemm_f32, .exp_sum_f32 = ev_neon_exp_sum_f32,                 \
        .gelu_tanh_f32 = ev_neon_gelu_tanh_f32,                                             \
        .gemm = {[EV_TYPE_F32] = gemm_f32, [EV_TYPE_F16] = gemm_f16,                        \
                 [EV_TYPE_BF16] = gemm_bf16, [EV_TYPE_Q8_0] = gemm_q8_0_##SUFFIX,           \
                 [EV_TYPE_Q4_0] = gemm_q4_0_##SUFFIX},                                      \
    }

/* what the two sets implement; the rest is the scalar set's (ev_kernels_derive) */
static const ev_kernels NEON_PLAIN_OWN = NEON_SET("neon", plain);
static const ev_kernels NEON_DOTPROD_OWN = NEON_SET("neon-dotprod", dot);
/* the dotprod set's integer many-token products of Q8_0/Q4_0 (arm_neon_qgemm.c): gemm_q16x,
 * the default "exact" precision, in it; gemm_q8x, llama.cpp's rounding, only in its "fast"
 * variant (every other entry the dotprod set's) */
static const ev_kernels NEON_DOTPROD_INT_OWN = {
    .gemm_q16x = {[EV_TYPE_Q8_0] = ev_neon_gemm_q16x_q8_0, [EV_TYPE_Q4_0] = ev_neon_gemm_q16x_q4_0},
    .quantize_i16 = ev_neon_quantize_i16,
};
static const ev_kernels NEON_DOTPROD_FAST_OWN = {
    .name = "neon-dotprod-fast",
    .gemm_q8x = {[EV_TYPE_Q8_0] = ev_neon_gemm_q8x_q8_0, [EV_TYPE_Q4_0] = ev_neon_gemm_q8x_q4_0},
};

static ev_kernels NEON_PLAIN, NEON_DOTPROD, NEON_DOTPROD_FAST;
static pthread_once_t built = PTHREAD_ONCE_INIT;

/* the sets' own kernels, and gemm_dq (dequantising through the type table) for every type */
static void build(void) {
    ev_kernels_derive(&NEON_PLAIN, ev_kernels_scalar(), &NEON_PLAIN_OWN);
    ev_kernels_derive(&NEON_DOTPROD, ev_kernels_scalar(), &NEON_DOTPROD_OWN);
    for (int i = 0; i < ev_type_count(); i++) {
        NEON_PLAIN.gemm_dq[ev_type_at(i)->type] = ev_neon_gemm_dq;
        NEON_DOTPROD.gemm_dq[ev_type_at(i)->type] = ev_neon_gemm_dq;
    }
    ev_kernels base = NEON_DOTPROD;
    ev_kernels_derive(&NEON_DOTPROD, &base, &NEON_DOTPROD_INT_OWN);
    ev_kernels_derive(&NEON_DOTPROD_FAST, &NEON_DOTPROD, &NEON_DOTPROD_FAST_OWN);
}

static int has_dotprod(void) {
    return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
}

const ev_kernels *ev_kernels_arm_neon(void) {
    pthread_once(&built, build);
    return has_dotprod() ? &NEON_DOTPROD : &NEON_PLAIN;
}

const ev_kernels *ev_kernels_arm_neon_fast(void) {
    pthread_once(&built, build);
    return has_dotprod() ? &NEON_DOTPROD_FAST : NULL;
}

const ev_kernels *ev_kernels_arm_neon_plain(void) {
    pthread_once(&built, build);
    return &NEON_PLAIN;
}

#endif
