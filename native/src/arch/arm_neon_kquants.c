/*
 * arm_neon_kquants.c - the NEON Q8_K activation quantiser, bit-identical to
 * ev_quantize_row_q8_K for every input, and the Q4_K / Q6_K row dequantisers of the
 * many-token panels, bit-identical to the type table's to_float (the K-quant dot products
 * are the template arm_neon_k.h). Compiles to nothing off aarch64.
 */
#if defined(__aarch64__)

#include <arm_neon.h>
#include <string.h>

#include "arm_neon_kquants.h"

/* The value of largest magnitude of 256 floats, the first one on a tie (the scalar loop's
 * strict `>`), NaNs skipped (FMAXNM returns the number); 0 when every value is 0 or NaN. */
static float q8_K_extreme(const float *x) {
    float32x4_t amax = vdupq_n_f32(0.0f);
    for (int j = 0; j < EV_QK_K; j += 4) amax = vmaxnmq_f32(amax, vabsq_f32(vld1q_f32(x + j)));
    const float a = vmaxnmvq_f32(amax);
    if (a == 0.0f) return 0.0f;
    for (int j = 0; j < EV_QK_K; j += 4) {
        if (vmaxvq_u32(vceqq_f32(vabsq_f32(vld1q_f32(x + j)), vdupq_n_f32(a))) == 0) continue;
        for (int l = 0; l < 4; l++)
            if (__builtin_fabsf(x[j + l]) == a) return x[j + l];
    }
    return a;   /* unreachable: a is one of the |x| */
}

/* 4 values as ev_nearest_int(iscale * x) clamped above at 127, the same float operations
 * (a product, then + 1.5 * 2^23, then the low mantissa bits) */
static inline int32x4_t q8_K_round4(const float *x, float iscale) {
    const float32x4_t v = vaddq_f32(vmulq_n_f32(vld1q_f32(x), iscale), vdupq_n_f32(12582912.0f));
    const int32x4_t bits = vandq_s32(vreinterpretq_s32_f32(v), vdupq_n_s32(0x007fffff));
    return vminq_s32(vsubq_s32(bits, vdupq_n_s32(0x00400000)), vdupq_n_s32(127));
}

void ev_neon_quantize_q8_K(const float *x, ev_block_q8_K *y, int64_t n) {
    for (int64_t i = 0; i < n / EV_QK_K; i++, x += EV_QK_K) {
        const float max = q8_K_extreme(x);
        if (max == 0.0f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -127.0f / max;
        for (int g = 0; g < EV_QK_K; g += 16) {
            const float *xg = x + g;
            /* XTN truncates as the scalar (int8_t) cast does (only a non-finite input leaves
             * [-127, 127]) */
            const int16x8_t a = vcombine_s16(vmovn_s32(q8_K_round4(xg, iscale)),
                                             vmovn_s32(q8_K_round4(xg + 4, iscale)));
            const int16x8_t b = vcombine_s16(vmovn_s32(q8_K_round4(xg + 8, iscale)),
                                             vmovn_s32(q8_K_round4(xg + 12, iscale)));
            const int8x16_t q = vcombine_s8(vmovn_s16(a), vmovn_s16(b));
            vst1q_s8(y[i].qs + g, q);
            y[i].bsums[g / 16] = (int16_t)vaddlvq_s8(q);
        }
        y[i].d = 1.0f / iscale;
    }
}

/* ---- row dequantisers for the many-token panels (arm_neon_sgemm.c) ----------------------- */

/* 16 byte codes (unsigned, or signed when is_signed) as float32 into dst[16]: dl * code,
 * then - ml when has_min: the scalar dequantisers' two rounded operations, in their order */
static inline __attribute__((always_inline)) void dq16(uint8x16_t codes, const int is_signed,
                                                       float dl, float ml, const int has_min,
                                                       float *dst) {
    int32x4_t q[4];
    if (is_signed) {
        const int16x8_t lo = vmovl_s8(vget_low_s8(vreinterpretq_s8_u8(codes)));
        const int16x8_t hi = vmovl_high_s8(vreinterpretq_s8_u8(codes));
        q[0] = vmovl_s16(vget_low_s16(lo)), q[1] = vmovl_high_s16(lo);
        q[2] = vmovl_s16(vget_low_s16(hi)), q[3] = vmovl_high_s16(hi);
    } else {
        const uint16x8_t lo = vmovl_u8(vget_low_u8(codes)), hi = vmovl_high_u8(codes);
        q[0] = vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(lo)));
        q[1] = vreinterpretq_s32_u32(vmovl_high_u16(lo));
        q[2] = vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(hi)));
        q[3] = vreinterpretq_s32_u32(vmovl_high_u16(hi));
    }
    for (int g = 0; g < 4; g++) {
        const float32x4_t v = vmulq_n_f32(vcvtq_f32_s32(q[g]), dl);
        vst1q_f32(dst + 4 * g, has_min ? vsubq_f32(v, vdupq_n_f32(ml)) : v);
    }
}

/* n/256 Q4_K super-blocks -> dst[n]: bit-identical to ev_dequantize_row_q4_K */
void ev_neon_dequantize_q4_K(const void *src, float *dst, int64_t n) {
    const ev_block_q4_K *b = src;
    const uint8x16_t low4 = vdupq_n_u8(0x0f);
    for (int64_t i = 0; i < n / EV_QK_K; i++, dst += EV_QK_K) {
        const float d = ev_fp16_to_f32(b[i].d), dmin = ev_fp16_to_f32(b[i].dmin);
        for (int c = 0; c < 4; c++) {   /* sub-blocks 2c (low nibbles), 2c + 1 (high) */
            uint8_t sc0, m0, sc1, m1;
            ev_k4_scale_min(2 * c, b[i].scales, &sc0, &m0);
            ev_k4_scale_min(2 * c + 1, b[i].scales, &sc1, &m1);
            const float dl0 = d * (float)sc0, ml0 = dmin * (float)m0;
            const float dl1 = d * (float)sc1, ml1 = dmin * (float)m1;
            const uint8x16_t a = vld1q_u8(b[i].qs + 32 * c), e = vld1q_u8(b[i].qs + 32 * c + 16);
            float *o = dst + 64 * c;
            dq16(vandq_u8(a, low4), 0, dl0, ml0, 1, o);
            dq16(vandq_u8(e, low4), 0, dl0, ml0, 1, o + 16);
            dq16(vshrq_n_u8(a, 4), 0, dl1, ml1, 1, o + 32);
            dq16(vshrq_n_u8(e, 4), 0, dl1, ml1, 1, o + 48);
        }
    }
}

/* n/256 Q6_K super-blocks -> dst[n]: bit-identical to ev_dequantize_row_q6_K (d * scale,
 * then times (code - 32)) */
void ev_neon_dequantize_q6_K(const void *src, float *dst, int64_t n) {
    const ev_block_q6_K *b = src;
    const uint8x16_t low4 = vdupq_n_u8(0x0f), bits45 = vdupq_n_u8(0x30), m32 = vdupq_n_u8(32);
    for (int64_t i = 0; i < n / EV_QK_K; i++, dst += EV_QK_K) {
        const float d = ev_fp16_to_f32(b[i].d);
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l += 16) {   /* elements 128 h + 32 j + l .. + 15 */
                const uint8x16_t qa = vld1q_u8(b[i].ql + 64 * h + l);
                const uint8x16_t qb = vld1q_u8(b[i].ql + 64 * h + 32 + l);
                const uint8x16_t qh = vld1q_u8(b[i].qh + 32 * h + l);
                uint8x16_t q[4];
                q[0] = vorrq_u8(vandq_u8(qa, low4), vandq_u8(vshlq_n_u8(qh, 4), bits45));
                q[1] = vorrq_u8(vandq_u8(qb, low4), vandq_u8(vshlq_n_u8(qh, 2), bits45));
                q[2] = vorrq_u8(vshrq_n_u8(qa, 4), vandq_u8(qh, bits45));
                q[3] = vorrq_u8(vshrq_n_u8(qb, 4), vandq_u8(vshrq_n_u8(qh, 2), bits45));
                for (int j = 0; j < 4; j++) {
                    const int e = 128 * h + 32 * j + l;
                    dq16(vsubq_u8(q[j], m32), 1, d * (float)b[i].scales[e / 16], 0.0f, 0, dst + e);
                }
            }
    }
}

#endif
