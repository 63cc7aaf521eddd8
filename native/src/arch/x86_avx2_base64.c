/*
 * x86_avx2_base64.c - the AVX2 bulk base64 decoder (base64.h): 32 characters -> 24 bytes per
 * step, after W. Muła and D. Lemire, "Faster Base64 Encoding and Decoding Using AVX2
 * Instructions" (ACM TWEB 2018), as aklomp/base64 implements it.
 *
 * Validation: a character is in the standard alphabet exactly when the bit sets looked up by
 * its low nibble (lut_lo) and by its high nibble (lut_hi) are disjoint; every byte >= 0x80 and
 * '=' fail. Translation: one offset per high nibble (lut_roll; '/' picked out by compare).
 * Packing: maddubs/madd merge the 6-bit values pairwise, a byte shuffle and a lane permute
 * leave 24 bytes, and the 32-byte store writes 8 scratch bytes after them.
 * Compiles to nothing off x86-64; target attributes let baseline builds contain it.
 * Reference: decode_groups in base64.c.
 */
#if defined(__x86_64__)

#include <immintrin.h>

#include "../base64.h"

#define EV_B64_AVX2 __attribute__((target("avx2")))

EV_B64_AVX2 static size_t decode_avx2(const uint8_t *in, size_t n, uint8_t *out) {
    const __m256i lut_lo = _mm256_setr_epi8(
        0x15, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11,
        0x11, 0x11, 0x13, 0x1a, 0x1b, 0x1b, 0x1b, 0x1a,
        0x15, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11,
        0x11, 0x11, 0x13, 0x1a, 0x1b, 0x1b, 0x1b, 0x1a);
    const __m256i lut_hi = _mm256_setr_epi8(
        0x10, 0x10, 0x01, 0x02, 0x04, 0x08, 0x04, 0x08,
        0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10,
        0x10, 0x10, 0x01, 0x02, 0x04, 0x08, 0x04, 0x08,
        0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10);
    const __m256i lut_roll = _mm256_setr_epi8(
        0, 16, 19, 4, -65, -65, -71, -71, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 16, 19, 4, -65, -65, -71, -71, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m256i mask_2f = _mm256_set1_epi8(0x2f);
    const __m256i merge_ab_bc = _mm256_set1_epi32(0x01400140);
    const __m256i merge_abc = _mm256_set1_epi32(0x00011000);
    const __m256i pack = _mm256_setr_epi8(
        2, 1, 0, 6, 5, 4, 10, 9, 8, 14, 13, 12, -1, -1, -1, -1,
        2, 1, 0, 6, 5, 4, 10, 9, 8, 14, 13, 12, -1, -1, -1, -1);
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 3, 7);
    size_t i = 0;
    for (; i + 32 <= n; i += 32, out += 24) {
        __m256i s = _mm256_loadu_si256((const __m256i *)(in + i));
        __m256i hi_nib = _mm256_and_si256(_mm256_srli_epi32(s, 4), mask_2f);
        __m256i lo_nib = _mm256_and_si256(s, mask_2f);
        __m256i hi = _mm256_shuffle_epi8(lut_hi, hi_nib);
        __m256i lo = _mm256_shuffle_epi8(lut_lo, lo_nib);
        if (!_mm256_testz_si256(lo, hi)) break;       /* a character outside the alphabet */
        __m256i eq_2f = _mm256_cmpeq_epi8(s, mask_2f);
        __m256i roll = _mm256_shuffle_epi8(lut_roll, _mm256_add_epi8(eq_2f, hi_nib));
        __m256i v = _mm256_add_epi8(s, roll);         /* 32 values of 6 bits */
        v = _mm256_maddubs_epi16(v, merge_ab_bc);     /* 16 values of 12 bits */
        v = _mm256_madd_epi16(v, merge_abc);          /* 8 values of 24 bits */
        v = _mm256_shuffle_epi8(v, pack);             /* 12 bytes in each lane */
        v = _mm256_permutevar8x32_epi32(v, lanes);    /* 24 bytes, then 8 scratch */
        _mm256_storeu_si256((__m256i *)out, v);
    }
    return i;
}

static const ev_b64_bulk AVX2 = {"avx2", decode_avx2};

const ev_b64_bulk *ev_b64_bulk_x86_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") ? &AVX2 : NULL;
}

#endif
