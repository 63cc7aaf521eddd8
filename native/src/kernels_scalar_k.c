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

/* The codes of one super-block, unpacked into q[256] (int8, element order): what ggml's
 * generic kernels build in aux8 before their integer sums. */

/* Q2_K/Q3_K: the 2-bit fields (element 128 h + 32 j + l in bits 2j of qs[32 h + l]) */
static void unpack_2bit(const uint8_t *qs, int8_t *q) {
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) q[128 * h + 32 * j + l] = (int8_t)((qs[32 * h + l] >> (2 * j)) & 3);
}

/* Q4_K/Q5_K: the nibbles (element 64 c + l low, 64 c + 32 + l high nibble of qs[32 c + l]),
 * plus 16 where qh (Q5_K, else NULL) has the element's 5th bit (bit e/32 of qh[e % 32]) */
static void unpack_k4(const uint8_t *qs, const uint8_t *qh, int8_t *q) {
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            q[64 * c + l] = (int8_t)(qs[32 * c + l] & 0x0f);
            q[64 * c + 32 + l] = (int8_t)(qs[32 * c + l] >> 4);
        }
    if (!qh) return;
    for (int e = 0; e < EV_QK_K; e++) q[e] = (int8_t)(q[e] + ((qh[e % 32] >> (e / 32)) & 1) * 16);
}

/* ggml's integer step of Q3_K..Q6_K: lane_sums[l] += scale of e's group (group = 16 or 32
 * elements) * q8[e] * q[e], over the elements e = l (mod 8) of a super-block */
static void lane_sums_of(const int8_t *q, const int8_t *q8, const int *scale, int group,
                         int32_t *lane_sums) {
    for (int g = 0; g < EV_QK_K; g += group) {
        const int sc = scale[g / group];
        for (int e = g; e < g + group; e += LANES)
            for (int l = 0; l < LANES; l++) lane_sums[l] += sc * (q8[e + l] * q[e + l]);
    }
}

/* ggml_vec_dot_q2_K_q8_K_generic */
void ev_vec_dot_q2_K_q8_K(int64_t n, float *out, const void *w_row, const void *x_row) {
    const ev_block_q2_K *w = w_row;
    const ev_block_q8_K *x = x_row;
    int8_t q[EV_QK_K];
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / EV_QK_K; i++) {
        int summs = 0;   /* sum over sub-blocks of (their activation sum) x (min code) */
        for (int j = 0; j < 16; j++) summs += x[i].bsums[j] * (w[i].scales[j] >> 4);
        const float dall = x[i].d * ev_fp16_to_f32(w[i].d);
        const float dmin = x[i].d * ev_fp16_to_f32(w[i].dmin);
        unpack_2bit(w[i].qs, q);
        int isum = 0;
        for (int j = 0; j < 16; j++) {
            int isuml = 0;
            for (int l = 16 * j; l < 16 * j + 16; l++) isuml += x[i].qs[l] * q[l];
            isum += (w[i].scales[j] & 0x0f) * isuml;
        }
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

/* ggml_vec_dot_q3_K_q8_K_generic */
void ev_vec_dot_q3_K_q8_K(int64_t n, float *out, const void *w_row, const void *x_row) {
    const ev_block_q3_K *w = w_row;
    const ev_block_q8_K *x = x_row;
    int8_t q[EV_QK_K];
    int scale[16];
    float lanes[LANES] = {0};
    for (int64_t i = 0; i < n / EV_QK_K; i++) {
        unpack_2bit(w[i].qs, q);
        for (int e = 0; e < EV_QK_K; e++)   /* minus 4 where the high bit is clear */
            q[e] = (int8_t)(q[e] - (((w[i].hmask[e % 32] >> (e / 32)) & 1) ? 0 : 4));
        for (int j = 0; j < 16; j++) {
            const int low = j < 8 ? w[i].scales[j] & 0x0f : w[i].scales[j - 8] >> 4;
            const int high = (w[i].scales[8 + j % 4] >> (2 * (j / 4))) & 3;
            scale[j] = (low | (high << 4)) - 32;
        }
        int32_t lane_sums[LANES] = {0};
        lane_sums_of(q, x[i].qs, scale, 16, lane_sums);
        add_lanes(lanes, ev_fp16_to_f32(w[i].d) * x[i].d, lane_sums);
    }
    *out = finish_lanes(0.0f, lanes);
}

/* ggml_vec_dot_q4_K_q8_K_generic (q5: ggml_vec_dot_q5_K_q8_K_generic, the 5th bit in qh) */
static float k4_dot(int64_t n, const ev_block_q4_K *w4, const ev_block_q5_K *w5,
                    const ev_block_q8_K *x) {
    int8_t q[EV_QK_K];
    int scale[8];
    float lanes[LANES] = {0}, sumf = 0.0f;
    for (int64_t i = 0; i < n / EV_QK_K; i++) {
        const uint8_t *scales = w4 ? w4[i].scales : w5[i].scales;
        unpack_k4(w4 ? w4[i].qs : w5[i].qs, w4 ? NULL : w5[i].qh, q);
        int sumi = 0;   /* sum over sub-blocks of (their activation sums) x (min code) */
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            ev_k4_scale_min(j, scales, &sc, &m);
            scale[j] = sc;
            sumi += (x[i].bsums[2 * j] + x[i].bsums[2 * j + 1]) * m;
        }
        int32_t lane_sums[LANES] = {0};
        lane_sums_of(q, x[i].qs, scale, 32, lane_sums);
        const ev_fp16 d = w4 ? w4[i].d : w5[i].d, dmin = w4 ? w4[i].dmin : w5[i].dmin;
        add_lanes(lanes, ev_fp16_to_f32(d) * x[i].d, lane_sums);
        const float dm = ev_fp16_to_f32(dmin) * x[i].d;
        sumf -= dm * (float)sumi;
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
    int8_t q[EV_QK_K];
    int scale[16];
    float lanes[LANES] = {0};
    for (int64_t i = 0; i < n / EV_QK_K; i++) {
        for (int h = 0; h < 2; h++) {   /* elements 128 h + 32 j + l (types.h) */
            const uint8_t *ql = w[i].ql + 64 * h, *qh = w[i].qh + 32 * h;
            int8_t *a = q + 128 * h;
            for (int l = 0; l < 32; l++) {
                a[l] = (int8_t)(((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32);
                a[l + 32] = (int8_t)(((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32);
                a[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
                a[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
            }
        }
        for (int j = 0; j < 16; j++) scale[j] = w[i].scales[j];
        int32_t lane_sums[LANES] = {0};
        lane_sums_of(q, x[i].qs, scale, 16, lane_sums);
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
