/*
 * kernels_scalar_k.c - the scalar reference dot products of the K-quants and IQ4 weights
 * against their activation formats (Q8_K; Q8_0 for IQ4_NL), part of the scalar kernel set
 * (kernels_scalar.c) and so what every SIMD set runs until it has its own.
 *
 * Each computes what ggml's generic kernel (ggml-cpu/quants.c, ggml_vec_dot_*_q8_K_generic and
 * ggml_vec_dot_iq4_nl_q8_0_generic) computes, float operation for float operation: integer
 * block sums are exact, and the float sums run in ggml's order (for Q3_K..Q6_K eight partial
 * sums, element e of a block feeding lane e % 8, added up after the last block).
 */
#include "kernels.h"

#define LANES 8   /* ggml's partial float sums of Q3_K..Q6_K */

/* Q2_K/Q3_K 2-bit field of element e (Q2_K's qs layout, types.h) */
static inline int two_bits(const uint8_t *qs, int e) {
    return (qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3;
}

/* ggml_vec_dot_q2_K_q8_K_generic */
void ev_vec_dot_q2_K_q8_K(int64_t n, float *out, const void *w_row, const void *x_row) {
    const ev_block_q2_K *w = w_row;
    const ev_block_q8_K *x = x_row;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / EV_QK_K; i++) {
        int summs = 0;   /* sum over sub-blocks of (their activation sum) x (min code) */
        for (int j = 0; j < 16; j++) summs += x[i].bsums[j] * (w[i].scales[j] >> 4);
        const float dall = x[i].d * ev_fp16_to_f32(w[i].d);
        const float dmin = x[i].d * ev_fp16_to_f32(w[i].dmin);
        int isum = 0;
        for (int e = 0; e < EV_QK_K; e++)
            isum += (w[i].scales[e / 16] & 0x0f) * (x[i].qs[e] * two_bits(w[i].qs, e));
        const float scaled = dall * (float)isum, mins = dmin * (float)summs;
        sumf += scaled - mins;
    }
    *out = sumf;
}

/* lanes[l] += d * (float)lane_sums[l], ggml's per-block step of the eight partial sums */
static inline void add_lanes(float *lanes, float d, const int32_t *lane_sums) {
    for (int l = 0; l < LANES; l++) lanes[l] += d * (float)lane_sums[l];
}

/* sumf + lanes[0] + ... + lanes[7], in that order */
static inline float finish_lanes(float sumf, const float *lanes) {
    for (int l = 0; l < LANES; l++) sumf += lanes[l];
    return sumf;
}

/* Q3_K sub-block j's 6-bit scale, minus 32 (types.h) */
static inline int q3_K_scale(const uint8_t *scales, int j) {
    const int low = j < 8 ? scales[j] & 0x0f : scales[j - 8] >> 4;
    const int high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (low | (high << 4)) - 32;
}

/* ggml_vec_dot_q3_K_q8_K_generic */
void ev_vec_dot_q3_K_q8_K(int64_t n, float *out, const void *w_row, const void *x_row) {
    const ev_block_q3_K *w = w_row;
    const ev_block_q8_K *x = x_row;
    float lanes[LANES] = {0};
    for (int64_t i = 0; i < n / EV_QK_K; i++) {
        int32_t lane_sums[LANES] = {0};
        for (int e = 0; e < EV_QK_K; e++) {
            const int high = (w[i].hmask[e % 32] >> (e / 32)) & 1;
            const int q = two_bits(w[i].qs, e) - (high ? 0 : 4);
            lane_sums[e % LANES] += q3_K_scale(w[i].scales, e / 16) * (x[i].qs[e] * q);
        }
        add_lanes(lanes, ev_fp16_to_f32(w[i].d) * x[i].d, lane_sums);
    }
    *out = finish_lanes(0.0f, lanes);
}

/* Q4_K/Q5_K: sum of sub-block activation sums x min codes (ggml's sumi) */
static inline int k4_min_sum(const uint8_t *scales, const int16_t *bsums) {
    int sumi = 0;
    for (int j = 0; j < EV_QK_K / 16; j++) {
        uint8_t sc, m;
        ev_k4_scale_min(j / 2, scales, &sc, &m);
        sumi += bsums[j] * m;
    }
    return sumi;
}

/* ggml_vec_dot_q4_K_q8_K_generic (q5: ggml_vec_dot_q5_K_q8_K_generic, the 5th bit in qh) */
static float k4_dot(int64_t n, const ev_block_q4_K *w4, const ev_block_q5_K *w5,
                    const ev_block_q8_K *x) {
    float lanes[LANES] = {0}, sumf = 0.0f;
    for (int64_t i = 0; i < n / EV_QK_K; i++) {
        const uint8_t *scales = w4 ? w4[i].scales : w5[i].scales;
        const uint8_t *qs = w4 ? w4[i].qs : w5[i].qs;
        int32_t lane_sums[LANES] = {0};
        for (int e = 0; e < EV_QK_K; e++) {
            const int j = e / 32;   /* sub-block */
            uint8_t sc, m;
            ev_k4_scale_min(j, scales, &sc, &m);
            int q = (qs[32 * (j / 2) + e % 32] >> (4 * (j % 2))) & 0x0f;
            if (w5) q += ((w5[i].qh[e % 32] >> j) & 1) * 16;
            lane_sums[e % LANES] += sc * (x[i].qs[e] * q);
        }
        const ev_fp16 d = w4 ? w4[i].d : w5[i].d, dmin = w4 ? w4[i].dmin : w5[i].dmin;
        add_lanes(lanes, ev_fp16_to_f32(d) * x[i].d, lane_sums);
        const float dm = ev_fp16_to_f32(dmin) * x[i].d;
        sumf -= dm * (float)k4_min_sum(scales, x[i].bsums);
    }
    return finish_lanes(sumf, lanes);
}

void ev_vec_dot_q4_K_q8_K(int64_t n, float *out, const void *w_row, const void *x_row) {
    *out = k4_dot(n, w_row, NULL, x_row);
}

void ev_vec_dot_q5_K_q8_K(int64_t n, float *out, const void *w_row, const void *x_row) {
    *out = k4_dot(n, NULL, w_row, x_row);
}

/* ggml_vec_dot_q6_K_q8_K_generic */
void ev_vec_dot_q6_K_q8_K(int64_t n, float *out, const void *w_row, const void *x_row) {
    const ev_block_q6_K *w = w_row;
    const ev_block_q8_K *x = x_row;
    float lanes[LANES] = {0};
    for (int64_t i = 0; i < n / EV_QK_K; i++) {
        int32_t lane_sums[LANES] = {0};
        for (int e = 0; e < EV_QK_K; e++) {
            const int h = e / 128, j = e % 128 / 32, l = e % 32;
            const int low = (w[i].ql[64 * h + 32 * (j % 2) + l] >> (4 * (j / 2))) & 0x0f;
            const int high = (w[i].qh[32 * h + l] >> (2 * j)) & 3;
            const int q = (low | (high << 4)) - 32;
            lane_sums[e % LANES] += w[i].scales[e / 16] * (x[i].qs[e] * q);
        }
        add_lanes(lanes, ev_fp16_to_f32(w[i].d) * x[i].d, lane_sums);
    }
    *out = finish_lanes(0.0f, lanes);
}

/* ggml_vec_dot_iq4_nl_q8_0_generic */
void ev_vec_dot_iq4_nl_q8_0(int64_t n, float *out, const void *w_row, const void *x_row) {
    const ev_block_iq4_nl *w = w_row;
    const ev_block_q8_0 *x = x_row;
    float sumf = 0.0f;
    for (int64_t b = 0; b < n / EV_QK; b++) {
        const float d = ev_fp16_to_f32(x[b].d) * ev_fp16_to_f32(w[b].d);
        int32_t sumi = 0;
        for (int j = 0; j < EV_QK / 2; j++) {
            sumi += x[b].qs[j] * ev_iq4nl_values[w[b].qs[j] & 0x0f];
            sumi += x[b].qs[j + EV_QK / 2] * ev_iq4nl_values[w[b].qs[j] >> 4];
        }
        sumf += d * (float)sumi;
    }
    *out = sumf;
}

/* ggml_vec_dot_iq4_xs_q8_K_generic */
void ev_vec_dot_iq4_xs_q8_K(int64_t n, float *out, const void *w_row, const void *x_row) {
    const ev_block_iq4_xs *w = w_row;
    const ev_block_q8_K *x = x_row;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / EV_QK_K; i++) {
        const float d4d8 = ev_fp16_to_f32(w[i].d) * x[i].d;
        for (int ib = 0; ib < EV_QK_K / 32; ib++) {
            const int ls = ((w[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f) |
                           (((w[i].scales_h >> (2 * ib)) & 3) << 4);
            const float dl = d4d8 * (float)(ls - 32);
            const uint8_t *qs = w[i].qs + 16 * ib;
            const int8_t *q8 = x[i].qs + 32 * ib;
            int32_t sumi = 0;
            for (int j = 0; j < 16; j++) {
                sumi += q8[j] * ev_iq4nl_values[qs[j] & 0x0f];
                sumi += q8[j + 16] * ev_iq4nl_values[qs[j] >> 4];
            }
            sumf += dl * (float)sumi;
        }
    }
    *out = sumf;
}
