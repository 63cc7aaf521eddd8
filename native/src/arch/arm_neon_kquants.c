/*
 * arm_neon_kquants.c - the NEON Q8_K activation quantiser, bit-identical to
 * ev_quantize_row_q8_K for every input (the K-quant dot products are the template
 * arm_neon_k.h). Compiles to nothing off aarch64.
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

#endif
