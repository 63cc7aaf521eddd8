/*
 * x86_avx2_kquants.c - the AVX2 kernels of the K-quants: the Q8_K activation quantiser
 * (bit-identical to ev_quantize_row_q8_K), the Q4_K and Q6_K dot products against Q8_K, and
 * the row dequantisers the many-token panels use (bit-identical to the type table's).
 *
 * The dots follow ggml's AVX2 kernels (ggml-cpu/arch/x86/quants.c): the 4- or 6-bit codes
 * stay unsigned, `maddubs(code, q8)` gives 16 exact int16 pair sums of 32 products, one
 * `madd` with the sub-block scale widens them to int32, and a super-block's int32 sums are
 * converted once and multiplied by d_w * d_x. The offsets (Q4_K's mins, Q6_K's -32) come
 * from Q8_K's 16-element sums (bsums), not from the codes. Integer sums are exact; only the
 * float sums differ from the scalar reference (kernels_scalar_k.c): another order.
 *
 * Bounds that keep the integer steps exact (|q8| <= 127, Q8_K never holds -128):
 *  Q4_K: maddubs pairs <= 2*15*127 = 3810; x scale (< 64): < 2^19 a lane; a super-block's
 *        lane sums < 2^23.
 *  Q6_K: maddubs pairs <= 2*63*127 = 16002; x scale (|s| <= 128): < 2^22 a lane, per
 *        super-block 32 such pairs a lane < 2^27, the 32*sum(scale*bsums) term < 2^24.
 */
#if defined(__x86_64__)

#include <stddef.h>
#include <string.h>

#include "x86_avx2.h"

/* ---- Q8_K activations -------------------------------------------------------------------- */

/* The value of largest magnitude of 256 floats, the first one on a tie (the scalar loop's
 * strict `>`), NaNs skipped (a NaN compares false there); 0 when every value is 0 or NaN. */
EV_AVX2_INLINE float q8_K_extreme(const float *x) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 amax = _mm256_setzero_ps();
    for (int j = 0; j < EV_QK_K; j += 8)   /* max(v, acc) returns acc when v is NaN */
        amax = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), amax);
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float a = _mm_cvtss_f32(m);
    if (a == 0.0f) return 0.0f;
    const __m256 av = _mm256_set1_ps(a);
    for (int j = 0; j < EV_QK_K; j += 8) {
        const __m256 v = _mm256_loadu_ps(x + j);
        const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, v), av, _CMP_EQ_OQ));
        if (hit) return x[j + __builtin_ctz((unsigned)hit)];
    }
    return a;   /* unreachable: a is one of the |x| */
}

/* 8 values as ev_nearest_int(iscale * x), clamped above at 127, as int32: the same float
 * operations (a product, then + 1.5 * 2^23, then the low mantissa bits) */
EV_AVX2_INLINE __m256i q8_K_round8(const float *x, __m256 iscale) {
    const __m256 v = _mm256_add_ps(_mm256_mul_ps(iscale, _mm256_loadu_ps(x)),
                                   _mm256_set1_ps(12582912.0f));
    const __m256i bits = _mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x007fffff));
    return _mm256_min_epi32(_mm256_sub_epi32(bits, _mm256_set1_epi32(0x00400000)),
                            _mm256_set1_epi32(127));
}

/* 32 int32 (4 vectors, element order) truncated to int8 as the scalar (int8_t) cast does
 * (only a non-finite input leaves [-127, 127]) */
EV_AVX2_INLINE __m256i q8_K_narrow32(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i byte = _mm256_set1_epi32(0xff);
    const __m256i ab = _mm256_packus_epi32(_mm256_and_si256(a, byte), _mm256_and_si256(b, byte));
    const __m256i cd = _mm256_packus_epi32(_mm256_and_si256(c, byte), _mm256_and_si256(d, byte));
    const __m256i v = _mm256_packus_epi16(ab, cd);   /* dwords in lane order 0 2 4 6 1 3 5 7 */
    return _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* bsums[16] of qs[256]: byte pairs summed by maddubs, then three rounds of hadd leave, per
 * 128-bit lane, one sum of 16 bytes for each of the 8 vectors (low lane: bytes 0..15 of
 * each, high lane: 16..31), which one interleave puts in element order */
EV_AVX2_INLINE void q8_K_bsums(const __m256i q[8], int16_t *bsums) {
    const __m256i one = _mm256_set1_epi8(1);
    __m256i p[8];
    for (int v = 0; v < 8; v++) p[v] = _mm256_maddubs_epi16(one, q[v]);
    const __m256i h0 = _mm256_hadd_epi16(p[0], p[1]), h1 = _mm256_hadd_epi16(p[2], p[3]);
    const __m256i h2 = _mm256_hadd_epi16(p[4], p[5]), h3 = _mm256_hadd_epi16(p[6], p[7]);
    const __m256i s = _mm256_hadd_epi16(_mm256_hadd_epi16(h0, h1), _mm256_hadd_epi16(h2, h3));
    const __m128i lo = _mm256_castsi256_si128(s), hi = _mm256_extracti128_si256(s, 1);
    _mm_storeu_si128((__m128i *)bsums, _mm_unpacklo_epi16(lo, hi));
    _mm_storeu_si128((__m128i *)(bsums + 8), _mm_unpackhi_epi16(lo, hi));
}

/* x[n] -> y[n/256]: bit-identical to ev_quantize_row_q8_K for every input */
EV_AVX2 void ev_avx2_quantize_q8_K(const float *x, ev_block_q8_K *y, int64_t n) {
    for (int64_t i = 0; i < n / EV_QK_K; i++, x += EV_QK_K) {
        const float max = q8_K_extreme(x);
        if (max == 0.0f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -127.0f / max;
        const __m256 is = _mm256_set1_ps(iscale);
        __m256i q[8];
        for (int v = 0; v < 8; v++) {
            const float *xv = x + 32 * v;
            q[v] = q8_K_narrow32(q8_K_round8(xv, is), q8_K_round8(xv + 8, is),
                                 q8_K_round8(xv + 16, is), q8_K_round8(xv + 24, is));
            _mm256_storeu_si256((__m256i *)(y[i].qs + 32 * v), q[v]);
        }
        q8_K_bsums(q, y[i].bsums);
        y[i].d = 1.0f / iscale;
    }
}

/* ---- Q4_K -------------------------------------------------------------------------------- */

/* sum over the 8 sub-blocks of min[j] * (bsums[2j] + bsums[2j+1]), as 4 int32 lanes */
EV_AVX2_INLINE __m128i k4_min_sums(uint64_t mins, const int16_t *bsums) {
    const __m128i pair = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)bsums),
                                        _mm_loadu_si128((const __m128i *)(bsums + 8)));
    return _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)mins)), pair);
}

/* int16 lane pattern that makes shuffle_epi8 broadcast int16 element s of each 128-bit lane */
#define WORD_BROADCAST(s) _mm256_set1_epi16((short)(((2 * (s) + 1) << 8) | (2 * (s))))

/* The int32 lane sums of one Q4_K (qh NULL) or Q5_K super-block against x's codes, each
 * 32-element sub-block's dot times its scale (sc: the 8 scales as int16 in both lanes). */
EV_AVX2_INLINE __m256i k4_block_sums(const uint8_t *qs, const uint8_t *qh, __m256i sc,
                                     const int8_t *q8) {
    const __m256i low4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    const __m256i hbits = qh ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
    __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {   /* elements 64 c .. 64 c + 63: sub-blocks 2c, 2c + 1 */
        const __m256i q4 = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
        __m256i lo = _mm256_and_si256(q4, low4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), low4);
        if (qh) {   /* the 5th bit of sub-block s is bit s of qh[l]: + 16 */
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * c), one), 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * c + 1), one), 4));
        }
        const __m256i plo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(q8 + 64 * c)));
        const __m256i phi = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(q8 + 64 * c + 32)));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_shuffle_epi8(sc, WORD_BROADCAST(2 * c)), plo));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_shuffle_epi8(sc, WORD_BROADCAST(2 * c + 1)), phi));
    }
    return sumi;
}

/* Q4_K (w5 NULL) or Q5_K (w4 NULL) against Q8_K: the two share d, dmin and the scales */
EV_AVX2_INLINE float k4_dot(int64_t n, const ev_block_q4_K *w4, const ev_block_q5_K *w5,
                            const ev_block_q8_K *x) {
    __m256 acc = _mm256_setzero_ps();
    __m128 acc_min = _mm_setzero_ps();
    for (int64_t i = 0; i < n / EV_QK_K; i++) {
        uint64_t scales, mins;
        ev_k4_scales_mins(w4 ? w4[i].scales : w5[i].scales, &scales, &mins);
        const ev_fp16 wd = w4 ? w4[i].d : w5[i].d, wdmin = w4 ? w4[i].dmin : w5[i].dmin;
        const float d = x[i].d * avx2_fp16(wd), dmin = x[i].d * avx2_fp16(wdmin);
        acc_min = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(k4_min_sums(mins, x[i].bsums)),
                               acc_min);
        /* the 8 scales as int16, in both 128-bit lanes */
        const __m128i sc128 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)scales));
        const __m256i sumi = k4_block_sums(w4 ? w4[i].qs : w5[i].qs, w4 ? NULL : w5[i].qh,
                                           _mm256_set_m128i(sc128, sc128), x[i].qs);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    acc_min = _mm_add_ps(acc_min, _mm_movehl_ps(acc_min, acc_min));
    acc_min = _mm_add_ss(acc_min, _mm_movehdup_ps(acc_min));
    return avx2_hsum(acc) - _mm_cvtss_f32(acc_min);
}

EV_AVX2 void ev_avx2_vec_dot_q4_K_q8_K(int64_t n, float *out, const void *w_row, const void *x_row) {
    *out = k4_dot(n, w_row, NULL, x_row);
}

EV_AVX2 void ev_avx2_vec_dot_q5_K_q8_K(int64_t n, float *out, const void *w_row, const void *x_row) {
    *out = k4_dot(n, NULL, w_row, x_row);
}

/* ---- Q6_K -------------------------------------------------------------------------------- */

/* 16 int16: lanes 0..7 = scales[s], lanes 8..15 = scales[s + 1] (the 16 int8 scales of
 * 16-element sub-blocks in sc8: Q2_K, Q3_K, Q6_K) */
EV_AVX2_INLINE __m256i scale_pair16(__m128i sc8, int s) {
    const __m128i pick = _mm_set_epi64x((long long)(0x0101010101010101ull * (uint64_t)(s + 1)),
                                        (long long)(0x0101010101010101ull * (uint64_t)s));
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, pick));
}

/* The 128 codes (0..63, the -32 not applied) of half h of a Q6_K block, 32 a vector in
 * element order: q[j] = elements 128 h + 32 j .. + 31 (types.h). */
EV_AVX2_INLINE void q6_codes(const ev_block_q6_K *b, int h, __m256i q[4]) {
    const __m256i low4 = _mm256_set1_epi8(0x0f), bits45 = _mm256_set1_epi8(0x30);
    const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
    const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
    const __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
    /* the high 2 bits to bits 4..5 of each byte (16-bit shifts: the masks drop what crosses
     * from the neighbouring byte) */
    const __m256i h0 = _mm256_and_si256(_mm256_slli_epi16(qh, 4), bits45);
    const __m256i h1 = _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits45);
    const __m256i h2 = _mm256_and_si256(qh, bits45);
    const __m256i h3 = _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45);
    q[0] = _mm256_or_si256(_mm256_and_si256(ql0, low4), h0);
    q[1] = _mm256_or_si256(_mm256_and_si256(ql1, low4), h1);
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), h2);
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4), h3);
}

EV_AVX2 void ev_avx2_vec_dot_q6_K_q8_K(int64_t n, float *out, const void *w_row, const void *x_row) {
    const ev_block_q6_K *w = w_row;
    const ev_block_q8_K *x = x_row;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / EV_QK_K; i++) {
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)w[i].scales);
        /* sum((q - 32) s x) = sum(q s x) - 32 sum(s bsums): the offset per 16 elements */
        const __m256i offset = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8),
                                                 _mm256_loadu_si256((const __m256i *)x[i].bsums));
        __m256i sumi = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(offset, 5));
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256i q[4];
            q6_codes(&w[i], h, q);
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                const __m256i x8 = _mm256_loadu_si256((const __m256i *)(x[i].qs + 128 * h + 32 * j));
                const __m256i p = _mm256_maddubs_epi16(q[j], x8);
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(scale_pair16(sc8, 8 * h + 2 * j), p));
            }
        }
        const float d = x[i].d * avx2_fp16(w[i].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *out = avx2_hsum(acc);
}

/* ---- Q2_K, Q3_K: 2-bit fields (+ Q3_K's high bit), scales per 16 elements --------------- */

/* the 2-bit codes (0..3) of elements 128 h + 32 j .. + 31: bits 2j of the 32 bytes qs */
EV_AVX2_INLINE __m256i two_bit_codes(__m256i qs, int j) {
    return _mm256_and_si256(_mm256_srli_epi16(qs, 2 * j), _mm256_set1_epi8(3));
}

/* sum over the super-block of scale[e / 16] * code[e] * q8[e]; codes from qs (and, for Q3_K,
 * + 4 where hmask, else NULL, has the element's bit 4h + j) */
EV_AVX2_INLINE __m256i two_bit_block_sums(const uint8_t *qs, const uint8_t *hmask, __m128i sc8,
                                          const int8_t *q8) {
    const __m256i hm = hmask ? _mm256_loadu_si256((const __m256i *)hmask) : _mm256_setzero_si256();
    __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const __m256i qv = _mm256_loadu_si256((const __m256i *)(qs + 32 * h));
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            __m256i q = two_bit_codes(qv, j);
            if (hmask) {
                const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + j), _mm256_set1_epi8(1));
                q = _mm256_or_si256(q, _mm256_slli_epi16(hb, 2));
            }
            const __m256i x8 = _mm256_loadu_si256((const __m256i *)(q8 + 128 * h + 32 * j));
            const __m256i p = _mm256_maddubs_epi16(q, x8);
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(scale_pair16(sc8, 8 * h + 2 * j), p));
        }
    }
    return sumi;
}

/* Q2_K: d * sum(scale q x) - dmin * sum(min bsums), the 4-bit scales and mins of 16 bytes */
EV_AVX2 void ev_avx2_vec_dot_q2_K_q8_K(int64_t n, float *out, const void *w_row, const void *x_row) {
    const ev_block_q2_K *w = w_row;
    const ev_block_q8_K *x = x_row;
    const __m128i low4 = _mm_set1_epi8(0x0f);
    __m256 acc = _mm256_setzero_ps(), acc_min = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / EV_QK_K; i++) {
        const __m128i packed = _mm_loadu_si128((const __m128i *)w[i].scales);
        const __m128i sc8 = _mm_and_si128(packed, low4);
        const __m128i m8 = _mm_and_si128(_mm_srli_epi16(packed, 4), low4);
        const __m256i msum = _mm256_madd_epi16(_mm256_cvtepu8_epi16(m8),
                                               _mm256_loadu_si256((const __m256i *)x[i].bsums));
        const float d = x[i].d * avx2_fp16(w[i].d), dmin = x[i].d * avx2_fp16(w[i].dmin);
        acc_min = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(msum), acc_min);
        const __m256i sumi = two_bit_block_sums(w[i].qs, NULL, sc8, x[i].qs);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *out = avx2_hsum(acc) - avx2_hsum(acc_min);
}

/* Q3_K's 16 6-bit scales minus 32 as int8 (q3_K_scale in quants_k.c): low nibbles of bytes
 * 0..7 (sub-blocks 0..7) and their high nibbles (8..15), the high 2 bits from bytes 8..11 */
EV_AVX2_INLINE __m128i q3_scales(const uint8_t packed[12]) {
    uint32_t u[3], s[4];
    memcpy(u, packed, sizeof u);
    const uint32_t low4 = 0x0f0f0f0f, low2 = 0x03030303;
    s[0] = (u[0] & low4) | ((u[2] & low2) << 4);
    s[1] = (u[1] & low4) | (((u[2] >> 2) & low2) << 4);
    s[2] = ((u[0] >> 4) & low4) | (((u[2] >> 4) & low2) << 4);
    s[3] = ((u[1] >> 4) & low4) | (((u[2] >> 6) & low2) << 4);
    return _mm_sub_epi8(_mm_loadu_si128((const __m128i *)s), _mm_set1_epi8(32));
}

/* Q3_K: codes 0..7 (low | high bit << 2), the -4 through the bsums: sum((q - 4) s x) =
 * sum(q s x) - 4 sum(s bsums) */
EV_AVX2 void ev_avx2_vec_dot_q3_K_q8_K(int64_t n, float *out, const void *w_row, const void *x_row) {
    const ev_block_q3_K *w = w_row;
    const ev_block_q8_K *x = x_row;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / EV_QK_K; i++) {
        const __m128i sc8 = q3_scales(w[i].scales);
        const __m256i offset = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8),
                                                 _mm256_loadu_si256((const __m256i *)x[i].bsums));
        const __m256i sumi = _mm256_sub_epi32(two_bit_block_sums(w[i].qs, w[i].hmask, sc8, x[i].qs),
                                              _mm256_slli_epi32(offset, 2));
        const float d = x[i].d * avx2_fp16(w[i].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *out = avx2_hsum(acc);
}

/* ---- IQ4_XS: IQ4_NL's levels, a 6-bit scale per 32 elements ------------------------------ */

/* sub-block s's scale minus 32 */
static inline int iq4_xs_scale(const ev_block_iq4_xs *b, int s) {
    return (((b->scales_l[s / 2] >> (4 * (s % 2))) & 0x0f) | (((b->scales_h >> (2 * s)) & 3) << 4)) - 32;
}

/* the 32 levels of sub-block s in element order (low nibbles 0..15, high 16..31) */
EV_AVX2_INLINE __m256i iq4_xs_levels(const ev_block_iq4_xs *b, int s, __m256i table) {
    const __m128i q = _mm_loadu_si128((const __m128i *)(b->qs + 16 * s));
    const __m256i codes = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0f));
    return _mm256_shuffle_epi8(table, codes);
}

/* levels are signed (-127..113): |w| . sign(x, w) through maddubs (avx2_dot32's int16 step) */
EV_AVX2 void ev_avx2_vec_dot_iq4_xs_q8_K(int64_t n, float *out, const void *w_row, const void *x_row) {
    const ev_block_iq4_xs *w = w_row;
    const ev_block_q8_K *x = x_row;
    const __m128i t = _mm_loadu_si128((const __m128i *)ev_iq4nl_values);
    const __m256i table = _mm256_set_m128i(t, t);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / EV_QK_K; i++) {
        __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++) {
            const __m256i wv = iq4_xs_levels(&w[i], s, table);
            const __m256i x8 = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * s));
            const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(x8, wv));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, _mm256_set1_epi16((short)iq4_xs_scale(&w[i], s))));
        }
        const float d = x[i].d * avx2_fp16(w[i].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *out = avx2_hsum(acc);
}

/* ---- row dequantisers for the many-token panels ------------------------------------------ */

/* 32 signed byte codes (element order) as float32 into dst[32]: the first 16 as dl0 * code
 * (- ml0 when has_min), the last 16 with dl1 (and ml1): the scalar dequantisers' rounded
 * operations, in their order */
EV_AVX2_INLINE void dq_codes32(__m256i codes, float dl0, float ml0, float dl1, float ml1,
                               const int has_min, float *dst) {
    const __m128i lo = _mm256_castsi256_si128(codes), hi = _mm256_extracti128_si256(codes, 1);
    const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[g]));
        const __m256 v = _mm256_mul_ps(_mm256_set1_ps(g < 2 ? dl0 : dl1), q);
        _mm256_storeu_ps(dst + 8 * g, has_min ? _mm256_sub_ps(v, _mm256_set1_ps(g < 2 ? ml0 : ml1)) : v);
    }
}

/* Q4_K (qh NULL) / Q5_K super-blocks -> dst: bit-identical to ev_dequantize_row_q4_K / _q5_K
 * (dl * code, then - ml) */
EV_AVX2_INLINE void dequantize_k4(const uint8_t *block, int64_t block_bytes, int qh_at,
                                  int qs_at, float *dst, int64_t n) {
    const __m256i low4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    for (int64_t i = 0; i < n / EV_QK_K; i++, dst += EV_QK_K, block += block_bytes) {
        const ev_block_q4_K *head = (const ev_block_q4_K *)block;   /* d, dmin, scales */
        uint64_t scales, mins;
        ev_k4_scales_mins(head->scales, &scales, &mins);
        const float d = avx2_fp16(head->d), dmin = avx2_fp16(head->dmin);
        const __m256i hbits = qh_at ? _mm256_loadu_si256((const __m256i *)(block + qh_at))
                                    : _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            const __m256i q4 = _mm256_loadu_si256((const __m256i *)(block + qs_at + 32 * c));
            __m256i lo = _mm256_and_si256(q4, low4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), low4);
            if (qh_at) {
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * c), one), 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * c + 1), one), 4));
            }
            const int s = 2 * c;
            const float dl0 = d * (float)(uint8_t)(scales >> (8 * s));
            const float ml0 = dmin * (float)(uint8_t)(mins >> (8 * s));
            const float dl1 = d * (float)(uint8_t)(scales >> (8 * s + 8));
            const float ml1 = dmin * (float)(uint8_t)(mins >> (8 * s + 8));
            dq_codes32(lo, dl0, ml0, dl0, ml0, 1, dst + 64 * c);
            dq_codes32(hi, dl1, ml1, dl1, ml1, 1, dst + 64 * c + 32);
        }
    }
}

EV_AVX2 void ev_avx2_dequantize_q4_K(const void *src, float *dst, int64_t n) {
    dequantize_k4(src, sizeof(ev_block_q4_K), 0, offsetof(ev_block_q4_K, qs), dst, n);
}

EV_AVX2 void ev_avx2_dequantize_q5_K(const void *src, float *dst, int64_t n) {
    dequantize_k4(src, sizeof(ev_block_q5_K), offsetof(ev_block_q5_K, qh),
                  offsetof(ev_block_q5_K, qs), dst, n);
}

/* n/256 Q6_K super-blocks -> dst[n]: bit-identical to ev_dequantize_row_q6_K (d * scale,
 * then times (code - 32)) */
EV_AVX2 void ev_avx2_dequantize_q6_K(const void *src, float *dst, int64_t n) {
    const ev_block_q6_K *b = src;
    for (int64_t i = 0; i < n / EV_QK_K; i++, dst += EV_QK_K) {
        const float d = avx2_fp16(b[i].d);
        for (int h = 0; h < 2; h++) {
            __m256i q[4];
            q6_codes(&b[i], h, q);
            for (int j = 0; j < 4; j++) {
                const int s = 8 * h + 2 * j;   /* 16-element sub-blocks s and s + 1 */
                dq_codes32(_mm256_sub_epi8(q[j], _mm256_set1_epi8(32)), d * (float)b[i].scales[s],
                           0.0f, d * (float)b[i].scales[s + 1], 0.0f, 0, dst + 128 * h + 32 * j);
            }
        }
    }
}

/* Q2_K -> dst: bit-identical to ev_dequantize_row_q2_K (dl * code, then - ml) */
EV_AVX2 void ev_avx2_dequantize_q2_K(const void *src, float *dst, int64_t n) {
    const ev_block_q2_K *b = src;
    for (int64_t i = 0; i < n / EV_QK_K; i++, dst += EV_QK_K) {
        const float d = avx2_fp16(b[i].d), dmin = avx2_fp16(b[i].dmin);
        for (int h = 0; h < 2; h++) {
            const __m256i qv = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * h));
            for (int j = 0; j < 4; j++) {
                const uint8_t s0 = b[i].scales[8 * h + 2 * j], s1 = b[i].scales[8 * h + 2 * j + 1];
                dq_codes32(two_bit_codes(qv, j), d * (float)(s0 & 0x0f), dmin * (float)(s0 >> 4),
                           d * (float)(s1 & 0x0f), dmin * (float)(s1 >> 4), 1, dst + 128 * h + 32 * j);
            }
        }
    }
}

/* Q3_K -> dst: bit-identical to ev_dequantize_row_q3_K (d * scale, then times the code) */
EV_AVX2 void ev_avx2_dequantize_q3_K(const void *src, float *dst, int64_t n) {
    const ev_block_q3_K *b = src;
    for (int64_t i = 0; i < n / EV_QK_K; i++, dst += EV_QK_K) {
        const float d = avx2_fp16(b[i].d);
        int8_t sc[16];
        _mm_storeu_si128((__m128i *)sc, q3_scales(b[i].scales));
        const __m256i hm = _mm256_loadu_si256((const __m256i *)b[i].hmask);
        for (int h = 0; h < 2; h++) {
            const __m256i qv = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * h));
            for (int j = 0; j < 4; j++) {
                const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + j), _mm256_set1_epi8(1));
                const __m256i q = _mm256_sub_epi8(_mm256_or_si256(two_bit_codes(qv, j), _mm256_slli_epi16(hb, 2)),
                                                  _mm256_set1_epi8(4));
                const int s = 8 * h + 2 * j;
                dq_codes32(q, d * (float)sc[s], 0.0f, d * (float)sc[s + 1], 0.0f, 0,
                           dst + 128 * h + 32 * j);
            }
        }
    }
}

/* IQ4_XS -> dst: bit-identical to ev_dequantize_row_iq4_xs (d * scale, then times the level) */
EV_AVX2 void ev_avx2_dequantize_iq4_xs(const void *src, float *dst, int64_t n) {
    const ev_block_iq4_xs *b = src;
    const __m128i t = _mm_loadu_si128((const __m128i *)ev_iq4nl_values);
    const __m256i table = _mm256_set_m128i(t, t);
    for (int64_t i = 0; i < n / EV_QK_K; i++, dst += EV_QK_K) {
        const float d = avx2_fp16(b[i].d);
        for (int s = 0; s < 8; s++) {
            const float dl = d * (float)iq4_xs_scale(&b[i], s);
            dq_codes32(iq4_xs_levels(&b[i], s, table), dl, 0.0f, dl, 0.0f, 0, dst + 32 * s);
        }
    }
}

#endif
