/*
 * arm_neon_k.h - the NEON dot products of the K-quants against Q8_K, a template included
 * twice by arm_neon.c right after arm_neon_q.h (NEON_DOT 0: int8 widening multiplies,
 * NEON_DOT 1: SDOT; NQ(name) names each copy). Reference: kernels_scalar_k.c; the integer
 * sums of a super-block are exact, its float sums in another order (ggml's NEON kernels in
 * ggml-cpu/arch/arm/quants.c do the same).
 *
 * Bounds: a 16-element dot of codes |q| <= 32 (Q6_K, q - 32), <= 31 (Q5_K) or <= 127
 * (IQ4_XS levels) with |q8| <= 127 stays below 2^18; times a scale (<= 128 in magnitude),
 * summed over a super-block: < 2^29. The plain-NEON int16 products are exact (< 2^15).
 */

/* sum over 16 int8 pairs w . x as 4 int32 lanes */
static inline __attribute__((always_inline)) int32x4_t NQ(dot16)(int8x16_t w, int8x16_t x) {
#if NEON_DOT
    return vdotq_s32(vdupq_n_s32(0), w, x);
#else
    return vpadalq_s16(vpaddlq_s16(vmull_s8(vget_low_s8(w), vget_low_s8(x))),
                       vmull_high_s8(w, x));
#endif
}

/* Q4_K (w5 NULL) / Q5_K (w4 NULL): per 64 elements, the low nibbles of 32 bytes (sub-block
 * 2c) and their high nibbles (2c + 1), Q5_K's 5th bit (bit s of qh[l]) adding 16, each dot
 * times its 6-bit scale; the mins through Q8_K's 16-element sums */
static inline __attribute__((always_inline)) float NQ(k4_dot)(int64_t n, const ev_block_q4_K *w4,
                                                              const ev_block_q5_K *w5,
                                                              const ev_block_q8_K *x) {
    const uint8x16_t low4 = vdupq_n_u8(0x0f), bit4 = vdupq_n_u8(0x10);
    float32x4_t acc = vdupq_n_f32(0.0f);
    float sum_min = 0.0f;
    for (int64_t i = 0; i < n / EV_QK_K; i++) {
        const uint8_t *scales = w4 ? w4[i].scales : w5[i].scales;
        const uint8_t *qs = w4 ? w4[i].qs : w5[i].qs;
        uint8_t sc[8], m[8];
        for (int j = 0; j < 8; j++) ev_k4_scale_min(j, scales, &sc[j], &m[j]);
        /* sum over sub-blocks j of m[j] * (bsums[2j] + bsums[2j + 1]) */
        const int16x8_t pair = vpaddq_s16(vld1q_s16(x[i].bsums), vld1q_s16(x[i].bsums + 8));
        const int16x8_t mins = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(m)));
        const int32x4_t pm = vmlal_high_s16(vmull_s16(vget_low_s16(mins), vget_low_s16(pair)), mins, pair);
        const float d = x[i].d * neon_fp16(w4 ? w4[i].d : w5[i].d);
        const float dmin = x[i].d * neon_fp16(w4 ? w4[i].dmin : w5[i].dmin);
        sum_min += dmin * (float)vaddvq_s32(pm);
        uint8x16_t h0 = vdupq_n_u8(0), h1 = h0;   /* Q5_K: qh[0..15], qh[16..31] */
        if (w5) {
            h0 = vld1q_u8(w5[i].qh);
            h1 = vld1q_u8(w5[i].qh + 16);
        }
        int32x4_t sumi = vdupq_n_s32(0);
        for (int c = 0; c < 4; c++) {
            const int8_t *q8 = x[i].qs + 64 * c;
            const uint8x16_t a = vld1q_u8(qs + 32 * c), b = vld1q_u8(qs + 32 * c + 16);
            uint8x16_t lo0 = vandq_u8(a, low4), lo1 = vandq_u8(b, low4);
            uint8x16_t hi0 = vshrq_n_u8(a, 4), hi1 = vshrq_n_u8(b, 4);
            if (w5) {   /* bit 2c (low nibbles) and 2c + 1 (high) of qh, moved to bit 4 */
                const int8x16_t lo_shift = vdupq_n_s8((int8_t)(4 - 2 * c));
                const int8x16_t hi_shift = vdupq_n_s8((int8_t)(3 - 2 * c));
                lo0 = vorrq_u8(lo0, vandq_u8(vshlq_u8(h0, lo_shift), bit4));
                lo1 = vorrq_u8(lo1, vandq_u8(vshlq_u8(h1, lo_shift), bit4));
                hi0 = vorrq_u8(hi0, vandq_u8(vshlq_u8(h0, hi_shift), bit4));
                hi1 = vorrq_u8(hi1, vandq_u8(vshlq_u8(h1, hi_shift), bit4));
            }
            const int32x4_t plo = vaddq_s32(NQ(dot16)(vreinterpretq_s8_u8(lo0), vld1q_s8(q8)),
                                            NQ(dot16)(vreinterpretq_s8_u8(lo1), vld1q_s8(q8 + 16)));
            const int32x4_t phi = vaddq_s32(NQ(dot16)(vreinterpretq_s8_u8(hi0), vld1q_s8(q8 + 32)),
                                            NQ(dot16)(vreinterpretq_s8_u8(hi1), vld1q_s8(q8 + 48)));
            sumi = vmlaq_n_s32(sumi, plo, sc[2 * c]);
            sumi = vmlaq_n_s32(sumi, phi, sc[2 * c + 1]);
        }
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(sumi), d);
    }
    return vaddvq_f32(acc) - sum_min;
}

static void NQ(vec_dot_q4_K)(int64_t n, float *out, const void *w_row, const void *x_row) {
    *out = NQ(k4_dot)(n, w_row, NULL, x_row);
}

static void NQ(vec_dot_q5_K)(int64_t n, float *out, const void *w_row, const void *x_row) {
    *out = NQ(k4_dot)(n, NULL, w_row, x_row);
}

/* IQ4_XS: the levels looked up (TBL) from the nibbles, 32 per sub-block with a 6-bit scale
 * minus 32 */
static void NQ(vec_dot_iq4_xs)(int64_t n, float *out, const void *w_row, const void *x_row) {
    const ev_block_iq4_xs *w = w_row;
    const ev_block_q8_K *x = x_row;
    const int8x16_t levels = vld1q_s8(ev_iq4nl_values);
    const uint8x16_t low4 = vdupq_n_u8(0x0f);
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (int64_t i = 0; i < n / EV_QK_K; i++) {
        int32x4_t sumi = vdupq_n_s32(0);
        for (int s = 0; s < 8; s++) {
            const int ls = (((w[i].scales_l[s / 2] >> (4 * (s % 2))) & 0x0f) |
                            (((w[i].scales_h >> (2 * s)) & 3) << 4)) - 32;
            const uint8x16_t q = vld1q_u8(w[i].qs + 16 * s);
            const int8x16_t lo = vqtbl1q_s8(levels, vandq_u8(q, low4));
            const int8x16_t hi = vqtbl1q_s8(levels, vshrq_n_u8(q, 4));
            const int8_t *q8 = x[i].qs + 32 * s;
            const int32x4_t p = vaddq_s32(NQ(dot16)(lo, vld1q_s8(q8)), NQ(dot16)(hi, vld1q_s8(q8 + 16)));
            sumi = vmlaq_n_s32(sumi, p, ls);
        }
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(sumi), x[i].d * neon_fp16(w[i].d));
    }
    *out = vaddvq_f32(acc);
}

/* Q6_K: the codes minus 32 as int8, 16 at a time, each 16 with its own scale */
static void NQ(vec_dot_q6_K)(int64_t n, float *out, const void *w_row, const void *x_row) {
    const ev_block_q6_K *w = w_row;
    const ev_block_q8_K *x = x_row;
    const uint8x16_t low4 = vdupq_n_u8(0x0f), bits45 = vdupq_n_u8(0x30);
    const int8x16_t m32 = vdupq_n_s8(32);
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (int64_t i = 0; i < n / EV_QK_K; i++) {
        int32x4_t sumi = vdupq_n_s32(0);
        for (int h = 0; h < 2; h++) {
            for (int l = 0; l < 32; l += 16) {   /* elements 128 h + 32 j + l .. + 15 */
                const uint8x16_t qa = vld1q_u8(w[i].ql + 64 * h + l);
                const uint8x16_t qb = vld1q_u8(w[i].ql + 64 * h + 32 + l);
                const uint8x16_t qh = vld1q_u8(w[i].qh + 32 * h + l);
                uint8x16_t q[4];
                q[0] = vorrq_u8(vandq_u8(qa, low4), vandq_u8(vshlq_n_u8(qh, 4), bits45));
                q[1] = vorrq_u8(vandq_u8(qb, low4), vandq_u8(vshlq_n_u8(qh, 2), bits45));
                q[2] = vorrq_u8(vshrq_n_u8(qa, 4), vandq_u8(qh, bits45));
                q[3] = vorrq_u8(vshrq_n_u8(qb, 4), vandq_u8(vshrq_n_u8(qh, 2), bits45));
                for (int j = 0; j < 4; j++) {
                    const int e = 128 * h + 32 * j + l;
                    const int8x16_t c = vsubq_s8(vreinterpretq_s8_u8(q[j]), m32);
                    sumi = vmlaq_n_s32(sumi, NQ(dot16)(c, vld1q_s8(x[i].qs + e)), w[i].scales[e / 16]);
                }
            }
        }
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(sumi), x[i].d * neon_fp16(w[i].d));
    }
    *out = vaddvq_f32(acc);
}

/* Q2_K (hmask NULL, codes 0..3) / Q3_K (codes (low | high bit << 2) - 4): sum over the 16
 * sub-blocks of scale[s] * (codes . q8) over 16 elements; element 128 h + 32 j + l is bits 2j
 * of qs[32 h + l] (and bit 4 h + j of hmask[l]) */
static inline __attribute__((always_inline)) int32x4_t NQ(two_bit_sums)(const uint8_t *qs,
                                                                        const uint8_t *hmask,
                                                                        const int *scale,
                                                                        const int8_t *q8) {
    const uint8x16_t three = vdupq_n_u8(3), one = vdupq_n_u8(1);
    int32x4_t sumi = vdupq_n_s32(0);
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l += 16) {
            const uint8x16_t qv = vld1q_u8(qs + 32 * h + l);
            const uint8x16_t hm = hmask ? vld1q_u8(hmask + l) : vdupq_n_u8(0);
            for (int j = 0; j < 4; j++) {
                const int e = 128 * h + 32 * j + l;
                int8x16_t c = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(qv, vdupq_n_s8((int8_t)(-2 * j))), three));
                if (hmask) {
                    const uint8x16_t hb = vandq_u8(vshlq_u8(hm, vdupq_n_s8((int8_t)(-(4 * h + j)))), one);
                    c = vsubq_s8(vaddq_s8(c, vreinterpretq_s8_u8(vshlq_n_u8(hb, 2))), vdupq_n_s8(4));
                }
                sumi = vmlaq_n_s32(sumi, NQ(dot16)(c, vld1q_s8(q8 + e)), scale[e / 16]);
            }
        }
    return sumi;
}

/* Q2_K: d * sum(scale q x) - dmin * sum(min bsums) */
static void NQ(vec_dot_q2_K)(int64_t n, float *out, const void *w_row, const void *x_row) {
    const ev_block_q2_K *w = w_row;
    const ev_block_q8_K *x = x_row;
    float32x4_t acc = vdupq_n_f32(0.0f);
    float sum_min = 0.0f;
    for (int64_t i = 0; i < n / EV_QK_K; i++) {
        int scale[16];
        for (int s = 0; s < 16; s++) scale[s] = w[i].scales[s] & 0x0f;
        const uint8x16_t packed = vld1q_u8(w[i].scales);
        const int16x8_t m_lo = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(vshrq_n_u8(packed, 4))));
        const int16x8_t m_hi = vreinterpretq_s16_u16(vmovl_high_u8(vshrq_n_u8(packed, 4)));
        const int16x8_t b_lo = vld1q_s16(x[i].bsums), b_hi = vld1q_s16(x[i].bsums + 8);
        int32x4_t pm = vmull_s16(vget_low_s16(m_lo), vget_low_s16(b_lo));
        pm = vmlal_high_s16(pm, m_lo, b_lo);
        pm = vmlal_s16(pm, vget_low_s16(m_hi), vget_low_s16(b_hi));
        pm = vmlal_high_s16(pm, m_hi, b_hi);
        sum_min += x[i].d * neon_fp16(w[i].dmin) * (float)vaddvq_s32(pm);
        const int32x4_t sumi = NQ(two_bit_sums)(w[i].qs, NULL, scale, x[i].qs);
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(sumi), x[i].d * neon_fp16(w[i].d));
    }
    *out = vaddvq_f32(acc) - sum_min;
}

/* Q3_K: 16 signed 6-bit scales (q3_K_scale in quants_k.c) */
static void NQ(vec_dot_q3_K)(int64_t n, float *out, const void *w_row, const void *x_row) {
    const ev_block_q3_K *w = w_row;
    const ev_block_q8_K *x = x_row;
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (int64_t i = 0; i < n / EV_QK_K; i++) {
        int scale[16];
        for (int s = 0; s < 16; s++) {
            const int low = s < 8 ? w[i].scales[s] & 0x0f : w[i].scales[s - 8] >> 4;
            const int high = (w[i].scales[8 + s % 4] >> (2 * (s / 4))) & 3;
            scale[s] = (low | (high << 4)) - 32;
        }
        const int32x4_t sumi = NQ(two_bit_sums)(w[i].qs, w[i].hmask, scale, x[i].qs);
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(sumi), x[i].d * neon_fp16(w[i].d));
    }
    *out = vaddvq_f32(acc);
}
