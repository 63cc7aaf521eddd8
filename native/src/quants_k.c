/*
 * quants_k.c - the K-quants (Q2_K .. Q6_K, 256-element super-blocks) and their activation
 * format Q8_K: dequantisation and llama.cpp's reference quantisers (types.h).
 *
 * Transcribed from ggml/src/ggml-quants.c (llama.cpp master, 2026): the quantisers are the
 * quantize_row_*_ref functions, which llama-quantize runs for these types when it has no
 * importance matrix; the dequantisers are dequantize_row_*. Float expressions keep llama.cpp's
 * order (see quants_fit.h), integer-to-uint8 stores keep its wrap-around.
 */
#include <math.h>
#include <string.h>

#include "quants_fit.h"
#include "types.h"

static inline float half(ev_fp16 h) {
    return ev_fp16_to_f32(h);
}

static inline int clamp_int(int v, int lo, int hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

/* L[256] (2-bit levels) into Q2_K/Q3_K's qs[64]: element 128 h + 32 j + l in bits 2j of
 * qs[32 h + l] */
static void pack_2bit(const int8_t *L, uint8_t *qs) {
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const int8_t *e = L + 128 * h + l;
            qs[32 * h + l] = (uint8_t)(e[0] | (e[32] << 2) | (e[64] << 4) | (e[96] << 6));
        }
}

/* ==== Q2_K ============================================================================ */

void ev_dequantize_row_q2_K(const ev_block_q2_K *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / EV_QK_K; i++, y += EV_QK_K) {
        const float d = half(x[i].d), dmin = half(x[i].dmin);
        for (int e = 0; e < EV_QK_K; e++) {
            const uint8_t sc = x[i].scales[e / 16];
            const float dl = d * (float)(sc & 0x0f), ml = dmin * (float)(sc >> 4);
            const int q = (x[i].qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3;
            const float v = dl * (float)q;
            y[e] = v - ml;
        }
    }
}

/* Scales and mins (4 bits each, against d = max/15 and dmin = maxmin/15) of the 16
 * sub-blocks fitted by ev_fit_scale_min; levels[256] gets the fits' levels. */
static void q2_K_scales(const float *x, ev_block_q2_K *y, int8_t *levels) {
    uint8_t L[16], Laux[16];
    float weights[16], mins[16], scales[16];
    float max_scale = 0.0f, max_min = 0.0f;   /* the mins are deducted: both are >= 0 */
    for (int j = 0; j < 16; j++) {
        for (int l = 0; l < 16; l++) weights[l] = fabsf(x[16 * j + l]);
        scales[j] = ev_fit_scale_min(16, 3, x + 16 * j, weights, L, &mins[j], Laux, -0.5f,
                                     0.1f, 15, 1);
        for (int l = 0; l < 16; l++) levels[16 * j + l] = (int8_t)L[l];
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float q4scale = 15.0f;
    if (max_scale > 0.0f) {
        const float iscale = q4scale / max_scale;
        for (int j = 0; j < 16; j++) y->scales[j] = (uint8_t)ev_nearest_int(iscale * scales[j]);
        y->d = ev_f32_to_fp16(max_scale / q4scale);
    } else {
        memset(y->scales, 0, sizeof y->scales);
        y->d = ev_f32_to_fp16(0.0f);
    }
    if (max_min > 0.0f) {
        const float iscale = q4scale / max_min;
        for (int j = 0; j < 16; j++)
            y->scales[j] = (uint8_t)(y->scales[j] | ((unsigned)ev_nearest_int(iscale * mins[j]) << 4));
        y->dmin = ev_f32_to_fp16(max_min / q4scale);
    } else {
        y->dmin = ev_f32_to_fp16(0.0f);
    }
}

/* llama.cpp: quantize_row_q2_K_ref */
void ev_quantize_row_q2_K(const float *x, ev_block_q2_K *y, int64_t n) {
    int8_t L[EV_QK_K];
    for (int64_t i = 0; i < n / EV_QK_K; i++, x += EV_QK_K) {
        q2_K_scales(x, &y[i], L);
        for (int j = 0; j < 16; j++) {   /* requantise against the stored scales */
            const float d = half(y[i].d) * (float)(y[i].scales[j] & 0x0f);
            if (d == 0.0f) continue;
            const float dm = half(y[i].dmin) * (float)(y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ii++)
                L[16 * j + ii] = (int8_t)clamp_int(ev_nearest_int((x[16 * j + ii] + dm) / d), 0, 3);
        }
        pack_2bit(L, y[i].qs);
    }
}

/* ==== Q3_K ============================================================================ */

/* sub-block j's 6-bit scale, minus 32 */
static int q3_K_scale(const uint8_t *scales, int j) {
    const int low = j < 8 ? scales[j] & 0x0f : scales[j - 8] >> 4;
    const int high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (int8_t)(low | (high << 4)) - 32;
}

void ev_dequantize_row_q3_K(const ev_block_q3_K *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / EV_QK_K; i++, y += EV_QK_K) {
        const float d_all = half(x[i].d);
        for (int e = 0; e < EV_QK_K; e++) {
            const float dl = d_all * (float)q3_K_scale(x[i].scales, e / 16);
            const int low = (x[i].qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3;
            const int high = (x[i].hmask[e % 32] >> (e / 32)) & 1;
            y[e] = dl * (float)(low - (high ? 0 : 4));
        }
    }
}

/* the 16 signed 6-bit scales (against d = 1/iscale) into y->scales and y->d */
static void q3_K_store_scales(const float *scales, ev_block_q3_K *y) {
    float max_scale = 0.0f, amax = 0.0f;
    for (int j = 0; j < 16; j++) {
        if (fabsf(scales[j]) > amax) {
            amax = fabsf(scales[j]);
            max_scale = scales[j];
        }
    }
    memset(y->scales, 0, sizeof y->scales);
    if (max_scale == 0.0f) {
        y->d = ev_f32_to_fp16(0.0f);
        return;
    }
    const float iscale = -32.0f / max_scale;
    for (int j = 0; j < 16; j++) {
        int8_t l = (int8_t)ev_nearest_int(iscale * scales[j]);
        l = (int8_t)(clamp_int(l, -32, 31) + 32);
        if (j < 8) y->scales[j] = (uint8_t)(l & 0x0f);
        else y->scales[j - 8] = (uint8_t)(y->scales[j - 8] | ((l & 0x0f) << 4));
        l = (int8_t)(l >> 4);
        y->scales[j % 4 + 8] = (uint8_t)(y->scales[j % 4 + 8] | (l << (2 * (j / 4))));
    }
    y->d = ev_f32_to_fp16(1.0f / iscale);
}

/* llama.cpp: quantize_row_q3_K_ref */
void ev_quantize_row_q3_K(const float *x, ev_block_q3_K *y, int64_t n) {
    int8_t L[EV_QK_K];
    float scales[16];
    for (int64_t i = 0; i < n / EV_QK_K; i++, x += EV_QK_K) {
        for (int j = 0; j < 16; j++) scales[j] = ev_fit_symmetric_refined(16, 4, x + 16 * j, L + 16 * j);
        q3_K_store_scales(scales, &y[i]);
        for (int j = 0; j < 16; j++) {   /* requantise against the stored scales */
            const float d = half(y[i].d) * (float)q3_K_scale(y[i].scales, j);
            if (d == 0.0f) continue;
            for (int ii = 0; ii < 16; ii++)
                L[16 * j + ii] = (int8_t)(clamp_int(ev_nearest_int(x[16 * j + ii] / d), -4, 3) + 4);
        }
        memset(y[i].hmask, 0, sizeof y[i].hmask);
        for (int e = 0; e < EV_QK_K; e++) {   /* the high bit of element e: hmask[e%32] bit e/32 */
            if (L[e] > 3) {
                y[i].hmask[e % 32] = (uint8_t)(y[i].hmask[e % 32] | (1 << (e / 32)));
                L[e] = (int8_t)(L[e] - 4);
            }
        }
        pack_2bit(L, y[i].qs);
    }
}

/* ==== Q4_K and Q5_K ==================================================================== */

void ev_dequantize_row_q4_K(const ev_block_q4_K *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / EV_QK_K; i++, y += EV_QK_K) {
        const float d = half(x[i].d), dmin = half(x[i].dmin);
        for (int j = 0; j < 8; j++) {   /* sub-block j: elements 32 j .. 32 j + 31 */
            uint8_t sc, m;
            ev_k4_scale_min(j, x[i].scales, &sc, &m);
            const float dl = d * (float)sc, ml = dmin * (float)m;
            const uint8_t *q = x[i].qs + 32 * (j / 2);
            for (int l = 0; l < 32; l++) {
                const float v = dl * (float)((q[l] >> (4 * (j % 2))) & 0x0f);
                y[32 * j + l] = v - ml;
            }
        }
    }
}

void ev_dequantize_row_q5_K(const ev_block_q5_K *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / EV_QK_K; i++, y += EV_QK_K) {
        const float d = half(x[i].d), dmin = half(x[i].dmin);
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            ev_k4_scale_min(j, x[i].scales, &sc, &m);
            const float dl = d * (float)sc, ml = dmin * (float)m;
            const uint8_t *q = x[i].qs + 32 * (j / 2);
            for (int l = 0; l < 32; l++) {
                const int q5 = ((q[l] >> (4 * (j % 2))) & 0x0f) + ((x[i].qh[l] >> j) & 1) * 16;
                const float v = dl * (float)q5;
                y[32 * j + l] = v - ml;
            }
        }
    }
}

/* The 8 sub-blocks' scales and mins of Q4_K/Q5_K (levels 0..nmax, weights av_x + |x|, the
 * trial scales of quantize_row_q{4,5}_K_ref), stored as 6-bit codes against d = max/63 and
 * dmin = maxmin/63 into packed[12], *d, *dmin; levels[256] gets the fits' levels. */
static void k4_scales(const float *x, int nmax, float rmin, int nstep, uint8_t *levels,
                      uint8_t *packed, ev_fp16 *d, ev_fp16 *dmin) {
    uint8_t Laux[32];
    float weights[32], mins[8], scales[8];
    float max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 8; j++) {
        const float *xb = x + 32 * j;
        float sum_x2 = 0.0f;
        for (int l = 0; l < 32; l++) sum_x2 += xb[l] * xb[l];
        const float av_x = sqrtf(sum_x2 / 32.0f);
        for (int l = 0; l < 32; l++) weights[l] = av_x + fabsf(xb[l]);
        scales[j] = ev_fit_scale_min(32, nmax, xb, weights, levels + 32 * j, &mins[j], Laux,
                                     rmin, 0.1f, nstep, 0);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
    for (int j = 0; j < 8; j++) {
        uint8_t ls = (uint8_t)ev_nearest_int(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)ev_nearest_int(inv_min * mins[j]);
        ls = ls < 63 ? ls : 63;
        lm = lm < 63 ? lm : 63;
        if (j < 4) {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (uint8_t)((ls & 0x0f) | ((lm & 0x0f) << 4));
            packed[j - 4] = (uint8_t)(packed[j - 4] | ((ls >> 4) << 6));
            packed[j] = (uint8_t)(packed[j] | ((lm >> 4) << 6));
        }
    }
    *d = ev_f32_to_fp16(max_scale / 63.0f);
    *dmin = ev_f32_to_fp16(max_min / 63.0f);
}

/* levels[256] in [0, nmax] of x against the stored scales and mins (the requantisation
 * step); a sub-block whose stored scale is 0 keeps the fit's levels, as in llama.cpp */
static void k4_levels(const float *x, const uint8_t *packed, ev_fp16 d16, ev_fp16 dmin16,
                      int nmax, uint8_t *levels) {
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        ev_k4_scale_min(j, packed, &sc, &m);
        const float d = half(d16) * (float)sc;
        if (d == 0.0f) continue;
        const float dm = half(dmin16) * (float)m;
        for (int ii = 0; ii < 32; ii++)
            levels[32 * j + ii] = (uint8_t)clamp_int(ev_nearest_int((x[32 * j + ii] + dm) / d), 0, nmax);
    }
}

/* llama.cpp: quantize_row_q4_K_ref */
void ev_quantize_row_q4_K(const float *x, ev_block_q4_K *y, int64_t n) {
    uint8_t L[EV_QK_K];
    for (int64_t i = 0; i < n / EV_QK_K; i++, x += EV_QK_K) {
        k4_scales(x, 15, -1.0f, 20, L, y[i].scales, &y[i].d, &y[i].dmin);
        k4_levels(x, y[i].scales, y[i].d, y[i].dmin, 15, L);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                y[i].qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    }
}

/* llama.cpp: quantize_row_q5_K_ref */
void ev_quantize_row_q5_K(const float *x, ev_block_q5_K *y, int64_t n) {
    uint8_t L[EV_QK_K];
    for (int64_t i = 0; i < n / EV_QK_K; i++, x += EV_QK_K) {
        k4_scales(x, 31, -0.5f, 15, L, y[i].scales, &y[i].d, &y[i].dmin);
        k4_levels(x, y[i].scales, y[i].d, y[i].dmin, 31, L);
        memset(y[i].qh, 0, sizeof y[i].qh);
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) {
                const int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
                y[i].qh[l] = (uint8_t)(y[i].qh[l] | ((lo > 15) << (2 * c)) | ((hi > 15) << (2 * c + 1)));
                y[i].qs[32 * c + l] = (uint8_t)((lo & 0x0f) | ((hi & 0x0f) << 4));
            }
        }
    }
}

/* ==== Q6_K ============================================================================ */

void ev_dequantize_row_q6_K(const ev_block_q6_K *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / EV_QK_K; i++, y += EV_QK_K) {
        const float d = half(x[i].d);
        for (int e = 0; e < EV_QK_K; e++) {
            const int h = e / 128, j = e % 128 / 32, l = e % 32;
            const int low = (x[i].ql[64 * h + 32 * (j % 2) + l] >> (4 * (j / 2))) & 0x0f;
            const int high = (x[i].qh[32 * h + l] >> (2 * j)) & 3;
            const float ds = d * (float)x[i].scales[e / 16];
            y[e] = ds * (float)((int8_t)(low | (high << 4)) - 32);
        }
    }
}

/* llama.cpp: quantize_row_q6_K_ref */
void ev_quantize_row_q6_K(const float *x, ev_block_q6_K *y, int64_t n) {
    int8_t L[EV_QK_K];
    float scales[16];
    for (int64_t i = 0; i < n / EV_QK_K; i++, x += EV_QK_K) {
        float max_scale = 0.0f, max_abs_scale = 0.0f;
        for (int ib = 0; ib < 16; ib++) {
            scales[ib] = ev_fit_symmetric(16, 32, x + 16 * ib, L + 16 * ib);
            if (fabsf(scales[ib]) > max_abs_scale) {
                max_abs_scale = fabsf(scales[ib]);
                max_scale = scales[ib];
            }
        }
        if (max_abs_scale < EV_GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof y[i]);
            y[i].d = ev_f32_to_fp16(0.0f);
            continue;
        }
        const float iscale = -128.0f / max_scale;
        y[i].d = ev_f32_to_fp16(1.0f / iscale);
        for (int ib = 0; ib < 16; ib++) {
            const int s = ev_nearest_int(iscale * scales[ib]);
            y[i].scales[ib] = (int8_t)(s < 127 ? s : 127);
        }
        for (int j = 0; j < 16; j++) {   /* requantise against the stored scales */
            const float d = half(y[i].d) * (float)y[i].scales[j];
            if (d == 0.0f) continue;
            for (int ii = 0; ii < 16; ii++)
                L[16 * j + ii] = (int8_t)(clamp_int(ev_nearest_int(x[16 * j + ii] / d), -32, 31) + 32);
        }
        for (int h = 0; h < 2; h++) {
            for (int l = 0; l < 32; l++) {
                const int8_t *e = L + 128 * h + l;   /* elements l, l+32, l+64, l+96 of half h */
                y[i].ql[64 * h + l] = (uint8_t)((e[0] & 0x0f) | ((e[64] & 0x0f) << 4));
                y[i].ql[64 * h + 32 + l] = (uint8_t)((e[32] & 0x0f) | ((e[96] & 0x0f) << 4));
                y[i].qh[32 * h + l] = (uint8_t)((e[0] >> 4) | ((e[32] >> 4) << 2) |
                                                ((e[64] >> 4) << 4) | ((e[96] >> 4) << 6));
            }
        }
    }
}

/* ==== Q8_K (activations) ============================================================== */

/* llama.cpp: quantize_row_q8_K_ref (the bsums of an all-zero block are zeroed here; llama.cpp
 * leaves them as they were, and multiplies them by d = 0) */
void ev_quantize_row_q8_K(const float *x, ev_block_q8_K *y, int64_t n) {
    for (int64_t i = 0; i < n / EV_QK_K; i++, x += EV_QK_K) {
        float max = 0.0f, amax = 0.0f;
        for (int j = 0; j < EV_QK_K; j++) {
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        if (amax == 0.0f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -127.0f / max;
        for (int j = 0; j < EV_QK_K; j++) {
            const int v = ev_nearest_int(iscale * x[j]);
            y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < EV_QK_K / 16; j++) {
            int sum = 0;
            for (int ii = 0; ii < 16; ii++) sum += y[i].qs[16 * j + ii];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1.0f / iscale;
    }
}

void ev_dequantize_row_q8_K(const ev_block_q8_K *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / EV_QK_K; i++)
        for (int j = 0; j < EV_QK_K; j++) y[i * EV_QK_K + j] = x[i].d * (float)x[i].qs[j];
}
