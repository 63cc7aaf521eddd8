/*
 * quants_iq4.c - IQ4_NL (32-element blocks) and IQ4_XS (256-element super-blocks): 4-bit
 * codes into a fixed non-linear grid of 16 levels, dequantisation and llama.cpp's quantisers
 * (types.h).
 *
 * Transcribed from ggml/src/ggml-quants.c (llama.cpp master, 2026): quantize_iq4_nl and
 * quantize_iq4_xs with no importance weights, i.e. quantize_row_iq4_nl_impl with ntry = 7,
 * which is what llama-quantize runs for these types without an importance matrix (and what
 * quantize_row_iq4_xs_ref runs). ggml's quantize_row_iq4_nl_ref, its CPU backend's fast row
 * quantiser (ntry = -1: no scale search), stores different bytes and is not followed here.
 * Float expressions keep llama.cpp's order (see quants_fit.h).
 */
#include <math.h>
#include <string.h>

#include "quants_fit.h"
#include "types.h"

const int8_t ev_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                    1,    13,   25,  38,  53,  69,  89,  113};

#define IQ4_TRIES 7      /* trial scales (itry + values[0]) / max, itry in [-7, 7] */

void ev_dequantize_row_iq4_nl(const ev_block_iq4_nl *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / EV_QK; i++, y += EV_QK) {
        const float d = ev_fp16_to_f32(x[i].d);
        for (int j = 0; j < EV_QK / 2; j++) {
            y[j] = d * (float)ev_iq4nl_values[x[i].qs[j] & 0x0f];
            y[j + EV_QK / 2] = d * (float)ev_iq4nl_values[x[i].qs[j] >> 4];
        }
    }
}

/* sub-block ib's (ib < 8) 6-bit scale, minus 32 */
static int iq4_xs_scale(const ev_block_iq4_xs *b, int ib) {
    const int low = (b->scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f;
    const int high = (b->scales_h >> (2 * ib)) & 3;
    return (low | (high << 4)) - 32;
}

void ev_dequantize_row_iq4_xs(const ev_block_iq4_xs *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / EV_QK_K; i++) {
        const float d = ev_fp16_to_f32(x[i].d);
        for (int ib = 0; ib < EV_QK_K / 32; ib++, y += 32) {
            const float dl = d * (float)iq4_xs_scale(&x[i], ib);
            const uint8_t *qs = x[i].qs + 16 * ib;
            for (int j = 0; j < 16; j++) {
                y[j] = dl * (float)ev_iq4nl_values[qs[j] & 0x0f];
                y[j + 16] = dl * (float)ev_iq4nl_values[qs[j] >> 4];
            }
        }
    }
}

/* sum w q x and sum w q^2 (w = x^2) of x[32] coded at scale 1/id; codes into L when not NULL */
static void iq4_sums(const float *x, float id, uint8_t *L, float *sumqx, float *sumq2) {
    float sqx = 0.0f, sq2 = 0.0f;
    for (int j = 0; j < 32; j++) {
        const int l = ev_nearest_level(16, ev_iq4nl_values, id * x[j]);
        if (L) L[j] = (uint8_t)l;
        const float q = (float)ev_iq4nl_values[l], w = x[j] * x[j];
        sqx += w * q * x[j];
        sq2 += w * q * q;
    }
    *sumqx = sqx;
    *sumq2 = sq2;
}

/* The least-squares scale of 32 values on the grid, best of the first guess max/127 and the
 * trials (itry + values[0]) / max (weights x^2); L[32] gets the first guess's codes. 0 for a
 * group below EV_GROUP_MAX_EPS (codes 0). */
static float iq4_fit(const float *x, uint8_t *L) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    if (amax < EV_GROUP_MAX_EPS) {
        memset(L, 0, 32);
        return 0.0f;
    }
    const float d0 = -max / (float)ev_iq4nl_values[0];
    float sumqx, sumq2;
    iq4_sums(x, 1.0f / d0, L, &sumqx, &sumq2);
    float d = sumq2 > 0.0f ? sumqx / sumq2 : 0.0f;
    float best = d * sumqx;
    for (int itry = -IQ4_TRIES; itry <= IQ4_TRIES; itry++) {
        const float id = (float)(itry + ev_iq4nl_values[0]) / max;
        iq4_sums(x, id, NULL, &sumqx, &sumq2);
        if (sumq2 > 0.0f && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

/* llama.cpp: quantize_iq4_nl (quant_weights NULL) */
void ev_quantize_row_iq4_nl(const float *x, ev_block_iq4_nl *y, int64_t n) {
    uint8_t L[EV_QK];
    for (int64_t i = 0; i < n / EV_QK; i++, x += EV_QK) {
        const float d = iq4_fit(x, L);
        y[i].d = ev_f32_to_fp16(d);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;   /* requantise at the float scale */
        for (int j = 0; j < EV_QK; j++) L[j] = (uint8_t)ev_nearest_level(16, ev_iq4nl_values, id * x[j]);
        for (int j = 0; j < EV_QK / 2; j++) y[i].qs[j] = (uint8_t)(L[j] | (L[j + EV_QK / 2] << 4));
    }
}

/* llama.cpp: quantize_iq4_xs (quant_weights NULL) = quantize_row_iq4_xs_ref */
void ev_quantize_row_iq4_xs(const float *x, ev_block_iq4_xs *y, int64_t n) {
    uint8_t L[EV_QK_K];
    float scales[EV_QK_K / 32];
    for (int64_t i = 0; i < n / EV_QK_K; i++, x += EV_QK_K) {
        float max_scale = 0.0f, amax_scale = 0.0f;
        for (int ib = 0; ib < EV_QK_K / 32; ib++) {
            scales[ib] = iq4_fit(x + 32 * ib, L + 32 * ib);
            if (fabsf(scales[ib]) > amax_scale) {
                amax_scale = fabsf(scales[ib]);
                max_scale = scales[ib];
            }
        }
        /* 6-bit signed sub-block scales against d = -max_scale/32; codes at the stored scales */
        const float d = -max_scale / 32.0f;
        y[i].d = ev_f32_to_fp16(d);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].scales_h = 0;
        for (int ib = 0; ib < EV_QK_K / 32; ib++) {
            int l = ev_nearest_int(id * scales[ib]);
            l = l < -32 ? -32 : l > 31 ? 31 : l;
            const float dl = d * (float)l;
            const float idl = dl != 0.0f ? 1.0f / dl : 0.0f;
            for (int j = 0; j < 32; j++)
                L[32 * ib + j] = (uint8_t)ev_nearest_level(16, ev_iq4nl_values, idl * x[32 * ib + j]);
            l += 32;
            const uint8_t l_low = (uint8_t)(l & 0x0f), l_high = (uint8_t)(l >> 4);
            if (ib % 2 == 0) y[i].scales_l[ib / 2] = l_low;
            else y[i].scales_l[ib / 2] = (uint8_t)(y[i].scales_l[ib / 2] | (l_low << 4));
            y[i].scales_h = (uint16_t)(y[i].scales_h | (l_high << (2 * (ib % 8))));
        }
        for (int ib = 0; ib < EV_QK_K / 32; ib++)
            for (int j = 0; j < 16; j++)
                y[i].qs[16 * ib + j] = (uint8_t)(L[32 * ib + j] | (L[32 * ib + 16 + j] << 4));
    }
}
