/*
 * kernels_scalar.c - the scalar reference kernel set: plain C, always compiled, the yardstick
 * every SIMD kernel is tested against.
 *
 * Numerics follow ggml's generic kernels: float weights accumulate in double; Q8_0/Q4_0
 * weights against Q8_0 activations sum each 32-element block exactly in int32 and add
 * sumi * (d_w * d_x) to a float total.
 */
#include "kernels.h"

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

static const ev_kernels SCALAR = {
    .name = "scalar",
    .vec_dot = {
        [EV_TYPE_F32] = vec_dot_f32,
        [EV_TYPE_F16] = vec_dot_f16,
        [EV_TYPE_BF16] = vec_dot_bf16,
        [EV_TYPE_Q8_0] = vec_dot_q8_0,
        [EV_TYPE_Q4_0] = vec_dot_q4_0,
    },
    .dot_f32 = dot_f32,
    .axpy_f32 = axpy_f32,
    .dot_f16_f32 = dot_f16_f32,
    .axpy_f16_f32 = axpy_f16_f32,
    .quantize_q8_0 = ev_quantize_row_q8_0,
    .gemm = {0},   /* ev_matmul's generic loop over vec_dot */
};

const ev_kernels *ev_kernels_scalar(void) {
    return &SCALAR;
}
