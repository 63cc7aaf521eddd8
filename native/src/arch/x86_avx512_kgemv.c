/*
 * x86_avx512_kgemv.c - decode (one token) against Q4_K, Q6_K and IQ4_XS weights with 512-bit
 * VNNI: y[r] = W[r] . x (+ bias[r]) for one thread's rows [r0, r1), x one token of Q8_K
 * activations (the kernel set's gemm; Q6_K's and IQ4_XS's row kernels are described at
 * q6_gemv_row and iq4_gemv_row below).
 *
 * Q4_K: the AVX2 dot (x86_avx2_kquants.c: per 32 products a maddubs, a shuffle that broadcasts the
 * sub-block's scale and a madd) ran Q4_K decode at 20-21 GB/s from DRAM on one Zen 4 core,
 * ~18 cycles per 144-byte super-block, below Q4_0's row kernel (22-24 GB/s) and the stream
 * ceiling (36 GB/s): it was bound by its instruction count. Here, per super-block of a row:
 *  1. the 128 code bytes are 2 loads of 64 bytes; and / shift + and give 4 registers of 64
 *     codes (lo0 = sub-blocks 0 | 2 in its 256-bit halves, hi0 = 1 | 3, lo1 = 4 | 6,
 *     hi1 = 5 | 7: qs[32 c + l] holds element 64 c + l low, 64 c + 32 + l high);
 *  2. 4 vpdpbusd against the activations, rearranged once per call into that order (k4_gx),
 *     give int32 lanes of 4 products each (|lane| <= 4 x 15 x 127 = 7620);
 *  3. 2 packs_epi32 put two registers' lanes into int16 (exact: 7620 < 2^15), and 2 vpdpwssd
 *     with the 8 scales laid out to match (one vpshufb each from the scales broadcast)
 *     multiply by the scales and sum: 16 int32 lanes, |lane| <= 4 x 7620 x 63 < 2^21;
 *  4. one conversion and one FMA with d_w * d_x; the mins' term sum(min[s] * sum(x of s))
 *     is a madd of the 8 mins with the 8 sub-block sums prepared once, into its own
 *     accumulator with dmin_w * d_x.
 * About 60 instructions a super-block (6 multiplies), where the AVX2 dot's loop runs 140 (16
 * multiplies, 8 shuffles): 1.4-2.2x the super-blocks a second with the rows in L2 (Zen 4,
 * bench/README-kernels.md).
 * Integer sums are exact; the float sums are another order than the scalar reference's
 * (kernels_scalar_k.c), within test_kquants_simd.c's and test_dispatch.c's tolerance. Rows
 * go one at a time (one sequential stream per thread, as q4_gemv_row in x86_avx2_gemm.c).
 * More than one token, or rows longer than K4_GX_MAX_SB super-blocks: the AVX2 vec_dot per
 * (token, row), as ev_matmul's generic path.
 */
#if defined(__x86_64__)

#include <string.h>

#include "x86_avx512.h"

#define K4_GX_MAX_SB 128   /* n_in <= 32768 (the rearranged activations: 35 KiB of stack) */

/* More than one token, or rows longer than the prepared activations hold: the AVX2 vec_dot
 * per (token, row), as ev_matmul's generic path. */
static void gemm_per_pair(const ev_gemm_args *a, int64_t r0, int64_t r1, ev_vec_dot_fn dot) {
    for (int64_t t = 0; t < a->n_tok; t++)
        for (int64_t r = r0; r < r1; r++) {
            float v;
            dot(a->n_in, &v, a->w + r * a->w_stride, a->x + t * a->x_stride);
            a->y[t * a->n_out + r] = v + (a->bias ? a->bias[r] : 0.0f);
        }
}

/* One token's Q8_K activations in the order the row kernel reads them. */
typedef struct k4_gx {
    /* [super-block][register j][64]: j = 0: x[0..31] | x[64..95], 1: x[32..63] | x[96..127],
     * 2: x[128..159] | x[192..223], 3: x[160..191] | x[224..255] (the codes of lo0, hi0,
     * lo1, hi1) */
    _Alignas(64) int8_t x[K4_GX_MAX_SB][4][64];
    _Alignas(16) int16_t sum32[K4_GX_MAX_SB][8];   /* sum of x over each 32-element sub-block */
    float d[K4_GX_MAX_SB];                          /* the super-block's d_x */
} k4_gx;

/* Super-block i's sub-block sums (sum32) and d_x: bsums are sums of 16, neighbours added
 * (|sum| <= 32 x 128, an int16). */
EV_AVX512_INLINE void k_gx_sums(const ev_block_q8_K *x, int64_t i, k4_gx *px) {
    const __m256i b16 = _mm256_loadu_si256((const __m256i *)x[i].bsums);
    const __m256i b32 = _mm256_madd_epi16(b16, _mm256_set1_epi16(1));   /* 8 int32 */
    _mm_store_si128((__m128i *)px->sum32[i],
            _mm_packs_epi32(_mm256_castsi256_si128(b32), _mm256_extracti128_si256(b32, 1)));
    px->d[i] = x[i].d;
}

EV_AVX512_INLINE void k4_gx_prepare(const ev_block_q8_K *x, int64_t nsb, k4_gx *px) {
    for (int64_t i = 0; i < nsb; i++) {
        for (int j = 0; j < 4; j++) {
            const int8_t *src = x[i].qs + 128 * (j / 2) + 32 * (j % 2);
            _mm256_store_si256((__m256i *)px->x[i][j], _mm256_loadu_si256((const __m256i *)src));
            _mm256_store_si256((__m256i *)(px->x[i][j] + 32),
                               _mm256_loadu_si256((const __m256i *)(src + 64)));
        }
        k_gx_sums(x, i, px);
    }
}

/* vpshufb control that turns the scales' 8 bytes (broadcast to every 64 bits) into the int16
 * scale of each lane of packs_epi32(dA, dB): 128-bit lane k holds dA's int32 lanes 4k..4k+3
 * then dB's, i.e. sub-blocks a (k < 2) or a + 2 (k >= 2), then b or b + 2. */
EV_AVX512_INLINE __m512i k4_scale_pick(int a, int b) {
    const long long lo = (long long)(0x8000800080008000ull | 0x0001000100010001ull * (uint64_t)a);
    const long long hi = (long long)(0x8000800080008000ull | 0x0001000100010001ull * (uint64_t)b);
    const long long lo2 = (long long)(0x8000800080008000ull | 0x0001000100010001ull * (uint64_t)(a + 2));
    const long long hi2 = (long long)(0x8000800080008000ull | 0x0001000100010001ull * (uint64_t)(b + 2));
    return _mm512_set_epi64(hi2, lo2, hi2, lo2, hi, lo, hi, lo);
}

/* one row against the prepared token */
EV_AVX512_INLINE float k4_gemv_row(const ev_block_q4_K *w, int64_t nsb, const k4_gx *px) {
    const __m512i low4 = _mm512_set1_epi8(0x0f), zero = _mm512_setzero_si512();
    const __m512i pick01 = k4_scale_pick(0, 1), pick23 = k4_scale_pick(4, 5);
    __m512 acc = _mm512_setzero_ps();
    __m128 acc_min = _mm_setzero_ps();
    for (int64_t i = 0; i < nsb; i++) {
        uint64_t scales, mins;
        ev_k4_scales_mins(w[i].scales, &scales, &mins);
        const __m512i v0 = _mm512_loadu_si512(w[i].qs), v1 = _mm512_loadu_si512(w[i].qs + 64);
        const __m512i lo0 = _mm512_and_si512(v0, low4);
        const __m512i hi0 = _mm512_and_si512(_mm512_srli_epi16(v0, 4), low4);
        const __m512i lo1 = _mm512_and_si512(v1, low4);
        const __m512i hi1 = _mm512_and_si512(_mm512_srli_epi16(v1, 4), low4);
        const __m512i d0 = _mm512_dpbusd_epi32(zero, lo0, _mm512_load_si512(px->x[i][0]));
        const __m512i d1 = _mm512_dpbusd_epi32(zero, hi0, _mm512_load_si512(px->x[i][1]));
        const __m512i d2 = _mm512_dpbusd_epi32(zero, lo1, _mm512_load_si512(px->x[i][2]));
        const __m512i d3 = _mm512_dpbusd_epi32(zero, hi1, _mm512_load_si512(px->x[i][3]));
        const __m512i sc = _mm512_set1_epi64((long long)scales);
        __m512i sumi = _mm512_dpwssd_epi32(zero, _mm512_packs_epi32(d0, d1),
                                           _mm512_shuffle_epi8(sc, pick01));
        sumi = _mm512_dpwssd_epi32(sumi, _mm512_packs_epi32(d2, d3), _mm512_shuffle_epi8(sc, pick23));
        /* [d_w, dmin_w] x d_x */
        uint32_t dd;
        memcpy(&dd, &w[i].d, sizeof dd);
        const __m128 f = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128((int)dd)), _mm_set1_ps(px->d[i]));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_broadcastss_ps(f), acc);
        const __m128i msum = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)mins)),
                                            _mm_load_si128((const __m128i *)px->sum32[i]));
        acc_min = _mm_fmadd_ps(_mm_cvtepi32_ps(msum), _mm_shuffle_ps(f, f, 0x55), acc_min);
    }
    acc_min = _mm_add_ps(acc_min, _mm_movehl_ps(acc_min, acc_min));
    acc_min = _mm_add_ss(acc_min, _mm_movehdup_ps(acc_min));
    return _mm512_reduce_add_ps(acc) - _mm_cvtss_f32(acc_min);
}

EV_AVX512 void ev_avx512_gemm_q4_K(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    const int64_t nsb = a->n_in / EV_QK_K;
    if (a->n_tok == 1 && nsb <= K4_GX_MAX_SB) {
        k4_gx px;   /* this thread's rearranged activations */
        k4_gx_prepare((const ev_block_q8_K *)a->x, nsb, &px);
        for (int64_t r = r0; r < r1; r++) {
            const float v = k4_gemv_row((const ev_block_q4_K *)(a->w + r * a->w_stride), nsb, &px);
            a->y[r] = v + (a->bias ? a->bias[r] : 0.0f);
        }
        return;
    }
    gemm_per_pair(a, r0, r1, ev_avx2_vec_dot_q4_K_q8_K);
}

/* ---- Q6_K -------------------------------------------------------------------------------- */

/* One Q6_K row against one token of Q8_K activations, read as they are (natural order). Per
 * half h of a super-block (128 elements):
 *  1. ql[64 h .. 64 h + 63] is one load L, qh[32 h .. 32 h + 31] one load broadcast to both
 *     256-bit halves; A = L's low nibbles | qh's bits (0-1 | 2-3) at bits 4-5 are the codes
 *     (0..63) of elements 128 h + 0..63 in order, B = L's high nibbles | qh's bits (4-5 |
 *     6-7) those of 128 h + 64..127 (variable 16-bit shifts per 256-bit half, a mask, and
 *     one vpternlog that takes bits 0-3 from the nibbles and 4-5 from qh);
 *  2. 2 vpdpbusd against x[128 h ..] give int32 lanes of 4 products (<= 4 x 63 x 127 =
 *     32004, an int16), one packs_epi32 puts them in int16 (128-bit lane k: A's 16-element
 *     group k, then B's), one vpdpwssd with the 16 scales (sign-extended, vpermw to that
 *     layout) multiplies and sums: |lane| <= 2 x 2 x 32004 x 128 < 2^24 a super-block;
 *  3. the -32 of every code is 32 sum(scale x bsums), one madd per super-block; one
 *     conversion and one FMA with d_w * d_x.
 * 52 instructions a super-block (7 multiplies; the AVX2 dot's loop: 82, 17 multiplies):
 * 1.5-1.6x the super-blocks a second with the rows in L2. The activations need no
 * rearranging: A and B are already in element order.
 */
EV_AVX512_INLINE float q6_gemv_row(const ev_block_q6_K *w, const ev_block_q8_K *x, int64_t nsb) {
    const __m512i low4 = _mm512_set1_epi8(0x0f), bits45 = _mm512_set1_epi8(0x30);
    const __m512i zero = _mm512_setzero_si512();
    const __m512i shl_a = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i shr_b = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    /* vpermw indices: in 128-bit lane k, 4 x scale 8 h + k, then 4 x scale 8 h + 4 + k */
    const __m512i pick0 = _mm512_set_epi16(7, 7, 7, 7, 3, 3, 3, 3, 6, 6, 6, 6, 2, 2, 2, 2,
                                           5, 5, 5, 5, 1, 1, 1, 1, 4, 4, 4, 4, 0, 0, 0, 0);
    const __m512i pick1 = _mm512_add_epi16(pick0, _mm512_set1_epi16(8));
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < nsb; i++) {
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w[i].scales));
        const __m512i sc = _mm512_castsi256_si512(sc16);   /* vpermw reads lanes 0..15 only */
        __m512i sumi = zero;
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m512i l = _mm512_loadu_si512(w[i].ql + 64 * h);
            const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(w[i].qh + 32 * h)));
            const __m512i ha = _mm512_and_si512(_mm512_sllv_epi16(qh, shl_a), bits45);
            const __m512i hb = _mm512_and_si512(_mm512_srlv_epi16(qh, shr_b), bits45);
            /* 0xe4: bits where low4 is set from the first operand, the others from hb / ha */
            const __m512i a = _mm512_ternarylogic_epi32(l, ha, low4, 0xe4);
            const __m512i b = _mm512_ternarylogic_epi32(_mm512_srli_epi16(l, 4), hb, low4, 0xe4);
            const __m512i da = _mm512_dpbusd_epi32(zero, a, _mm512_loadu_si512(x[i].qs + 128 * h));
            const __m512i db = _mm512_dpbusd_epi32(zero, b, _mm512_loadu_si512(x[i].qs + 128 * h + 64));
            sumi = _mm512_dpwssd_epi32(sumi, _mm512_packs_epi32(da, db),
                                       _mm512_permutexvar_epi16(h ? pick1 : pick0, sc));
        }
        const __m256i offset = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)x[i].bsums));
        sumi = _mm512_sub_epi32(sumi, _mm512_zextsi256_si512(_mm256_slli_epi32(offset, 5)));
        const float d = x[i].d * avx2_fp16(w[i].d);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_set1_ps(d), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

EV_AVX512 void ev_avx512_gemm_q6_K(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    const int64_t nsb = a->n_in / EV_QK_K;
    if (a->n_tok == 1) {
        for (int64_t r = r0; r < r1; r++) {
            const float v = q6_gemv_row((const ev_block_q6_K *)(a->w + r * a->w_stride),
                                        (const ev_block_q8_K *)a->x, nsb);
            a->y[r] = v + (a->bias ? a->bias[r] : 0.0f);
        }
        return;
    }
    gemm_per_pair(a, r0, r1, ev_avx2_vec_dot_q6_K_q8_K);
}

/* ---- IQ4_XS ------------------------------------------------------------------------------ */

/* One token's Q8_K activations in the order iq4_gemv_row reads them (k4_gx's layout with
 * another order): register j of super-block i holds in its 128-bit lane k the 16 values
 * x[128 (j / 2) + 32 k + 16 (j % 2) ..]: j = 0 the first halves of sub-blocks 0..3 (the low
 * nibbles of qs[0..63]), 1 their second halves (the high nibbles), 2 and 3 the same for
 * sub-blocks 4..7 (qs[64..127]). */
EV_AVX512_INLINE void iq4_gx_prepare(const ev_block_q8_K *x, int64_t nsb, k4_gx *px) {
    for (int64_t i = 0; i < nsb; i++) {
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < 4; k++)
                _mm_store_si128((__m128i *)(px->x[i][j] + 16 * k),
                                _mm_loadu_si128((const __m128i *)(x[i].qs + 128 * (j / 2) + 32 * k +
                                                                  16 * (j % 2))));
        k_gx_sums(x, i, px);
    }
}

/* The 8 sub-block scales minus 32 (-32..31) as int8 in bytes 0..7, bytes 8..15 zero.
 * 16-bit lane k (k < 4) gets sub-blocks 2k (low byte) and 2k + 1: scales_l[k]'s two nibbles
 * and bits 4k..4k+3 of scales_h. */
EV_AVX512_INLINE __m128i iq4_xs_scales8(const ev_block_iq4_xs *b) {
    uint32_t l;
    memcpy(&l, b->scales_l, sizeof l);
    const __m128i lane4 = _mm_set_epi64x(0, -1);   /* 16-bit lanes 0..3 */
    /* each scales_l byte twice: 16-bit lane k = scales_l[k] | scales_l[k] << 8 */
    const __m128i lb = _mm_shuffle_epi8(_mm_cvtsi32_si128((int)l),
                                        _mm_set_epi8(-1, -1, -1, -1, -1, -1, -1, -1, 3, 3, 2, 2, 1, 1, 0, 0));
    const __m128i lo = _mm_or_si128(_mm_and_si128(lb, _mm_set1_epi16(0x000f)),
                                    _mm_and_si128(_mm_srli_epi16(lb, 4), _mm_set1_epi16(0x0f00)));
    /* lane k = scales_h >> 4k: bits 0-1 -> bits 4-5 (sub-block 2k), bits 2-3 -> bits 12-13 */
    const __m128i t = _mm_srlv_epi16(_mm_set1_epi16((short)b->scales_h), _mm_set_epi16(0, 0, 0, 0, 12, 8, 4, 0));
    const __m128i hi = _mm_or_si128(_mm_and_si128(_mm_slli_epi16(t, 4), _mm_set1_epi16(0x0030)),
                                    _mm_and_si128(_mm_slli_epi16(t, 10), _mm_set1_epi16(0x3000)));
    return _mm_and_si128(_mm_sub_epi8(_mm_or_si128(lo, hi), _mm_set1_epi8(32)), lane4);
}

/* One IQ4_XS row against the prepared token. Per super-block:
 *  1. the 128 code bytes are 2 loads of 64; and / shift + and give 4 registers of 64 codes
 *     (qs[16 s + l]: low nibble element 32 s + l, high nibble 32 s + 16 + l), and one vpshufb
 *     each maps them to IQ4_NL's levels plus 128 (1..241: vpdpbusd's unsigned operand);
 *  2. 4 vpdpbusd (2 a register) against the activations in that order give 16 int32 lanes
 *     per 4 sub-blocks, 4 lanes a sub-block (|lane| <= 8 x 241 x 128 < 2^18);
 *  3. 2 vpmulld by each lane's scale (vpermd of the 8 scales), and the +128 taken back as
 *     128 sum(scale x sum(x of s)), one madd of the scales with the sub-block sums;
 *  4. one conversion and one FMA with d_w * d_x.
 * About 40 instructions a super-block, where the AVX2 dot runs ~150 (8 sub-blocks of a
 * shuffle, 2 signs, a maddubs, a madd and the scale's bit picking). */
EV_AVX512_INLINE float iq4_gemv_row(const ev_block_iq4_xs *w, int64_t nsb, const k4_gx *px,
                                    __m512i levels_u) {
    const __m512i low4 = _mm512_set1_epi8(0x0f), zero = _mm512_setzero_si512();
    const __m512i pick0 = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    const __m512i pick1 = _mm512_add_epi32(pick0, _mm512_set1_epi32(4));
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < nsb; i++) {
        const __m512i v0 = _mm512_loadu_si512(w[i].qs), v1 = _mm512_loadu_si512(w[i].qs + 64);
        const __m512i lo0 = _mm512_shuffle_epi8(levels_u, _mm512_and_si512(v0, low4));
        const __m512i hi0 = _mm512_shuffle_epi8(levels_u, _mm512_and_si512(_mm512_srli_epi16(v0, 4), low4));
        const __m512i lo1 = _mm512_shuffle_epi8(levels_u, _mm512_and_si512(v1, low4));
        const __m512i hi1 = _mm512_shuffle_epi8(levels_u, _mm512_and_si512(_mm512_srli_epi16(v1, 4), low4));
        __m512i e0 = _mm512_dpbusd_epi32(zero, lo0, _mm512_load_si512(px->x[i][0]));
        e0 = _mm512_dpbusd_epi32(e0, hi0, _mm512_load_si512(px->x[i][1]));
        __m512i e1 = _mm512_dpbusd_epi32(zero, lo1, _mm512_load_si512(px->x[i][2]));
        e1 = _mm512_dpbusd_epi32(e1, hi1, _mm512_load_si512(px->x[i][3]));
        const __m128i ls = iq4_xs_scales8(&w[i]);
        const __m512i s32 = _mm512_cvtepi8_epi32(ls);   /* lanes 0..7: the scales */
        __m512i sumi = _mm512_add_epi32(_mm512_mullo_epi32(e0, _mm512_permutexvar_epi32(pick0, s32)),
                                        _mm512_mullo_epi32(e1, _mm512_permutexvar_epi32(pick1, s32)));
        /* |lane| <= 2 x 2^18 x 32 = 2^24, and 128 x |off| <= 128 x 2 x 32 x 4096 x 2 < 2^26 */
        const __m128i off = _mm_madd_epi16(_mm_cvtepi8_epi16(ls), _mm_load_si128((const __m128i *)px->sum32[i]));
        sumi = _mm512_sub_epi32(sumi, _mm512_zextsi128_si512(_mm_slli_epi32(off, 7)));
        const float d = px->d[i] * avx2_fp16(w[i].d);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_set1_ps(d), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

EV_AVX512 void ev_avx512_gemm_iq4_xs(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    const int64_t nsb = a->n_in / EV_QK_K;
    if (a->n_tok == 1 && nsb <= K4_GX_MAX_SB) {
        k4_gx px;   /* this thread's rearranged activations */
        iq4_gx_prepare((const ev_block_q8_K *)a->x, nsb, &px);
        const __m128i t = _mm_add_epi8(_mm_loadu_si128((const __m128i *)ev_iq4nl_values), _mm_set1_epi8(-128));
        const __m512i levels_u = _mm512_broadcast_i32x4(t);   /* level + 128, as uint8 */
        for (int64_t r = r0; r < r1; r++) {
            const float v = iq4_gemv_row((const ev_block_iq4_xs *)(a->w + r * a->w_stride), nsb, &px,
                                         levels_u);
            a->y[r] = v + (a->bias ? a->bias[r] : 0.0f);
        }
        return;
    }
    gemm_per_pair(a, r0, r1, ev_avx2_vec_dot_iq4_xs_q8_K);
}

#endif
