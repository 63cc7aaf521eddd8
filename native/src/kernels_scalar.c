/*
 * kernels_scalar.c - the scalar reference kernel set: plain C, always compiled, the yardstick
 * every SIMD kernel is tested against.
 *
 * Numerics follow ggml's generic kernels: float weights accumulate in double; Q8_0/Q4_0/Q5_0
 * weights against Q8_0 activations sum each 32-element block exactly in int32 and add
 * sumi * (d_w * d_x) to a float total (Q4_1/Q5_1 add m_w times the activation block's sum);
 * the K-quants and IQ4 (kernels_scalar_k.c) compute what ggml's generic kernels for them
 * compute.
 */
#include "kernels.h"

#include <math.h>
#include <pthread.h>

/* ---- float weights against float32 activations ----------------------------------------- */

static void vec_dot_f32(int64_t n, float *out, const void *w_row, const void *x_row) {
    const float *w = w_row, *x = x_row;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)w[i] * (double)x[i];
    *out = (float)sum;
}

static void vec_dot_f16(int64_t n, float *out, const void *w_row, const void *x_row) {
    const ev_fp16 *w = w_row;
    const float *x = x_row;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)ev_fp16_to_f32(w[i]) * (double)x[i];
    *out = (float)sum;
}

static void vec_dot_bf16(int64_t n, float *out, const void *w_row, const void *x_row) {
    const ev_bf16 *w = w_row;
    const float *x = x_row;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)ev_bf16_to_f32(w[i]) * (double)x[i];
    *out = (float)sum;
}

/* ---- quantised weights against Q8_0 activations ---------------------------------------- */

static void vec_dot_q8_0(int64_t n, float *out, const void *w_row, const void *x_row) {
    const ev_block_q8_0 *w = w_row, *x = x_row;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / EV_QK; b++) {
        int32_t sumi = 0;
        for (int j = 0; j < EV_QK; j++) sumi += (int32_t)w[b].qs[j] * (int32_t)x[b].qs[j];
        sum += (float)sumi * (ev_fp16_to_f32(w[b].d) * ev_fp16_to_f32(x[b].d));
    }
    *out = sum;
}

static void vec_dot_q4_0(int64_t n, float *out, const void *w_row, const void *x_row) {
    const ev_block_q4_0 *w = w_row;
    const ev_block_q8_0 *x = x_row;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / EV_QK; b++) {
        int32_t sumi = 0;
        for (int j = 0; j < EV_QK / 2; j++) {
            sumi += ((w[b].qs[j] & 0x0f) - 8) * (int32_t)x[b].qs[j];
            sumi += ((w[b].qs[j] >> 4) - 8) * (int32_t)x[b].qs[j + EV_QK / 2];
        }
        sum += (float)sumi * (ev_fp16_to_f32(w[b].d) * ev_fp16_to_f32(x[b].d));
    }
    *out = sum;
}

/* ---- Q4_1 / Q5_0 / Q5_1 against Q8_0 activations -----------------------------------------
 * ggml's generic ggml_vec_dot_q4_1_q8_1 / q5_0_q8_0 / q5_1_q8_1: per block an exact int32
 * sum, then sumf += (d_w*d_x)*sumi (+ m_w*s_x). ggml's Q8_1 activations are Q8_0's d and qs
 * plus s = d*sum(q), d unrounded, the product rounded to float16; here the activations are
 * Q8_0 and s_x = d_x*sum(q_x) is computed from the qs, exactly (|sum(q_x)| <= 4064 and d_x a
 * half: the product fits a float's 24 bits), so the result differs from ggml's only through
 * ggml's s (at most ~2^-10 of |m_w s_x| a block; test_legacy_quants.c). */

/* over one block: *codes_x = sum of the weight codes times the activation codes, *sum_x =
 * sum of the activation codes. One pass, codes unpacked inline (2.3x faster than unpacking
 * them into an array first, same integers). */
static void q4_block_sums(const uint8_t qs[EV_QK / 2], const ev_block_q8_0 *x, int32_t *codes_x,
                          int32_t *sum_x) {
    int32_t cx = 0, sx = 0;
    for (int j = 0; j < EV_QK / 2; j++) {
        cx += (qs[j] & 0x0f) * (int32_t)x->qs[j] + (qs[j] >> 4) * (int32_t)x->qs[j + EV_QK / 2];
        sx += x->qs[j] + x->qs[j + EV_QK / 2];
    }
    *codes_x = cx;
    *sum_x = sx;
}

/* the same for 5-bit codes: the 5th bit of element e is bit e of qh (little-endian uint32) */
static void q5_block_sums(const uint8_t qs[EV_QK / 2], const uint8_t qh[4], const ev_block_q8_0 *x,
                          int32_t *codes_x, int32_t *sum_x) {
    const uint32_t high = (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 |
                          (uint32_t)qh[3] << 24;
    int32_t cx = 0, sx = 0;
    for (int j = 0; j < EV_QK / 2; j++) {
        const int32_t lo = (qs[j] & 0x0f) | (int32_t)((high >> j) & 1u) << 4;
        const int32_t hi = (qs[j] >> 4) | (int32_t)((high >> (j + EV_QK / 2)) & 1u) << 4;
        cx += lo * (int32_t)x->qs[j] + hi * (int32_t)x->qs[j + EV_QK / 2];
        sx += x->qs[j] + x->qs[j + EV_QK / 2];
    }
    *codes_x = cx;
    *sum_x = sx;
}

static void vec_dot_q4_1(int64_t n, float *out, const void *w_row, const void *x_row) {
    const ev_block_q4_1 *w = w_row;
    const ev_block_q8_0 *x = x_row;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / EV_QK; b++) {
        int32_t sumi, sum_x;
        q4_block_sums(w[b].qs, &x[b], &sumi, &sum_x);
        const float dx = ev_fp16_to_f32(x[b].d);
        const float sx = dx * (float)sum_x;
        sum += (ev_fp16_to_f32(w[b].d) * dx) * (float)sumi + ev_fp16_to_f32(w[b].m) * sx;
    }
    *out = sum;
}

static void vec_dot_q5_0(int64_t n, float *out, const void *w_row, const void *x_row) {
    const ev_block_q5_0 *w = w_row;
    const ev_block_q8_0 *x = x_row;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / EV_QK; b++) {
        int32_t codes_x, sum_x;
        q5_block_sums(w[b].qs, w[b].qh, &x[b], &codes_x, &sum_x);
        const int32_t sumi = codes_x - 16 * sum_x;   /* sum (q - 16) x, exact */
        sum += (ev_fp16_to_f32(w[b].d) * ev_fp16_to_f32(x[b].d)) * (float)sumi;
    }
    *out = sum;
}

static void vec_dot_q5_1(int64_t n, float *out, const void *w_row, const void *x_row) {
    const ev_block_q5_1 *w = w_row;
    const ev_block_q8_0 *x = x_row;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / EV_QK; b++) {
        int32_t sumi, sum_x;
        q5_block_sums(w[b].qs, w[b].qh, &x[b], &sumi, &sum_x);
        const float dx = ev_fp16_to_f32(x[b].d);
        const float sx = dx * (float)sum_x;
        sum += (ev_fp16_to_f32(w[b].d) * dx) * (float)sumi + ev_fp16_to_f32(w[b].m) * sx;
    }
    *out = sum;
}

/* ---- attention helpers ----------------------------------------------------------------- */

static float dot_f32(int64_t n, const float *a, const float *b) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)a[i] * (double)b[i];
    return (float)sum;
}

static void axpy_f32(int64_t n, float a, const float *x, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

static float dot_f16_f32(int64_t n, const ev_fp16 *a, const float *b) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)ev_fp16_to_f32(a[i]) * (double)b[i];
    return (float)sum;
}

static void axpy_f16_f32(int64_t n, float a, const ev_fp16 *x, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] += a * ev_fp16_to_f32(x[i]);
}

/* ---- the many-token product on float32 activations ------------------------------------- */

#define DQ_CHUNK 256   /* columns dequantised at a time (a multiple of every block size) */

static void gemm_dq(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    const ev_type_traits *t = ev_type_get(a->w_type);
    float w[DQ_CHUNK];
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = a->w + r * a->w_stride;
        for (int64_t tok = 0; tok < a->n_tok; tok++) {
            const float *x = (const float *)(a->x + tok * a->x_stride);
            double sum = 0.0;
            for (int64_t k0 = 0; k0 < a->n_in; k0 += DQ_CHUNK) {
                const int64_t kc = a->n_in - k0 < DQ_CHUNK ? a->n_in - k0 : DQ_CHUNK;
                t->to_float(row + k0 / t->block_size * t->type_size, w, kc);
                for (int64_t k = 0; k < kc; k++) sum += (double)w[k] * (double)x[k0 + k];
            }
            a->y[tok * a->n_out + r] = (float)sum + (a->bias ? a->bias[r] : 0.0f);
        }
    }
}

/* ---- the ViT's attention and MLP -------------------------------------------------------- */

static void sgemm_f32(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                      const float *b, int64_t ldb, float *c, int64_t ldc) {
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            double sum = 0.0;
            for (int64_t p = 0; p < k; p++) sum += (double)a[i * lda + p] * (double)b[p * ldb + j];
            c[i * ldc + j] = alpha * (float)sum;
        }
    }
}

static float exp_sum_f32(float *x, int64_t n, float max) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    return (float)sum;
}

/* The reference kernel of every type of the type table (types.c); tests/test_dispatch.c
 * checks that none is missing. */
static const ev_kernels SCALAR_OWN = {
    .name = "scalar",
    .vec_dot = {
        [EV_TYPE_F32] = vec_dot_f32,
        [EV_TYPE_F16] = vec_dot_f16,
        [EV_TYPE_BF16] = vec_dot_bf16,
        [EV_TYPE_Q8_0] = vec_dot_q8_0,
        [EV_TYPE_Q4_0] = vec_dot_q4_0,
        [EV_TYPE_Q4_1] = vec_dot_q4_1,
        [EV_TYPE_Q5_0] = vec_dot_q5_0,
        [EV_TYPE_Q5_1] = vec_dot_q5_1,
        [EV_TYPE_Q2_K] = ev_vec_dot_q2_K_q8_K,     /* kernels_scalar_k.c */
        [EV_TYPE_Q3_K] = ev_vec_dot_q3_K_q8_K,
        [EV_TYPE_Q4_K] = ev_vec_dot_q4_K_q8_K,
        [EV_TYPE_Q5_K] = ev_vec_dot_q5_K_q8_K,
        [EV_TYPE_Q6_K] = ev_vec_dot_q6_K_q8_K,
        [EV_TYPE_IQ4_NL] = ev_vec_dot_iq4_nl_q8_0,
        [EV_TYPE_IQ4_XS] = ev_vec_dot_iq4_xs_q8_K,
    },
    .dot_f32 = dot_f32,
    .axpy_f32 = axpy_f32,
    .dot_f16_f32 = dot_f16_f32,
    .axpy_f16_f32 = axpy_f16_f32,
    .sgemm_f32 = sgemm_f32,
    .exp_sum_f32 = exp_sum_f32,
    .gelu_tanh_f32 = ev_gelu_tanh,
    .quantize_q8_0 = ev_quantize_row_q8_0,
    .quantize_q8_K = ev_quantize_row_q8_K,
    .gemm = {0},   /* ev_matmul's generic loop over vec_dot */
};

static ev_kernels SCALAR;
static pthread_once_t built = PTHREAD_ONCE_INIT;

/* SCALAR_OWN, with gemm_dq (dequantise through the type table's to_float) for every type */
static void build(void) {
    SCALAR = SCALAR_OWN;
    for (int i = 0; i < ev_type_count(); i++) SCALAR.gemm_dq[ev_type_at(i)->type] = gemm_dq;
}

const ev_kernels *ev_kernels_scalar(void) {
    pthread_once(&built, build);
    return &SCALAR;
}
