/*
 * arm_neon_base64.c - the NEON bulk base64 decoder (base64.h): 64 characters -> 48 bytes per
 * step, the aarch64 table method of aklomp/base64.
 *
 * vld4q deinterleaves the 64 characters into the 4 positions of 16 groups. Two 64-entry table
 * lookups give every character's value: the first (vqtbl4q) covers characters 0-63 ('+', '/',
 * digits) and yields 0 from 64 up; the second covers 63-126 through the saturated index c-63
 * (letters) and, as vqtbx4q, keeps an index >= 64 itself (bytes >= 127). Every character
 * outside the alphabet ends up > 63. Shifts pack 4 values into 3 bytes; vst3q interleaves
 * them back: exactly 48 bytes written, no scratch. NEON is baseline on aarch64.
 * Compiles to nothing elsewhere. Reference: decode_groups in base64.c.
 */
#if defined(__aarch64__)

#include <arm_neon.h>

#include "../base64.h"

#define X 255                                 /* not in the alphabet */

/* value of character c in 0..63 */
static const uint8_t lut_low[64] = {
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, 62, X, X, X, 63,
    52, 53, 54, 55, 56, 57, 58, 59, 60, 61, X, X, X, X, X, X};

/* value of character c in 63..126, at index c - 63 (index 0: 0, '?' already fails above) */
static const uint8_t lut_high[64] = {
    0, X, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13,
    14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, X, X, X, X,
    X, X, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39,
    40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, X, X, X, X};

#undef X

static inline uint8x16_t neon_value(uint8x16x4_t lo_tab, uint8x16x4_t hi_tab, uint8x16_t c) {
    uint8x16_t idx = vqsubq_u8(c, vdupq_n_u8(63));
    return vorrq_u8(vqtbl4q_u8(lo_tab, c), vqtbx4q_u8(idx, hi_tab, idx));
}

static size_t decode_neon(const uint8_t *in, size_t n, uint8_t *out) {
    const uint8x16x4_t lo_tab = vld1q_u8_x4(lut_low);
    const uint8x16x4_t hi_tab = vld1q_u8_x4(lut_high);
    const uint8x16_t max_value = vdupq_n_u8(63);
    size_t i = 0;
    for (; i + 64 <= n; i += 64, out += 48) {
        uint8x16x4_t s = vld4q_u8(in + i);
        uint8x16_t a = neon_value(lo_tab, hi_tab, s.val[0]);
        uint8x16_t b = neon_value(lo_tab, hi_tab, s.val[1]);
        uint8x16_t c = neon_value(lo_tab, hi_tab, s.val[2]);
        uint8x16_t d = neon_value(lo_tab, hi_tab, s.val[3]);
        uint8x16_t bad = vorrq_u8(vorrq_u8(vcgtq_u8(a, max_value), vcgtq_u8(b, max_value)),
                                  vorrq_u8(vcgtq_u8(c, max_value), vcgtq_u8(d, max_value)));
        if (vmaxvq_u8(bad)) break;                    /* a character outside the alphabet */
        uint8x16x3_t o;
        o.val[0] = vorrq_u8(vshlq_n_u8(a, 2), vshrq_n_u8(b, 4));
        o.val[1] = vorrq_u8(vshlq_n_u8(b, 4), vshrq_n_u8(c, 2));
        o.val[2] = vorrq_u8(vshlq_n_u8(c, 6), d);
        vst3q_u8(out, o);
    }
    return i;
}

static const ev_b64_bulk NEON = {"neon", decode_neon};

const ev_b64_bulk *ev_b64_bulk_arm_neon(void) {
    return &NEON;
}

#endif
