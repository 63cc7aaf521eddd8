/*
 * base64.c - strict base64 decoding (edgevlm_base64_decode): the scalar reference decoder and
 * the dispatch to the SIMD bulk decoders of arch/ (base64.h).
 *
 * The language is CPython's binascii.a2b_base64(strict_mode=True) on texts whose length is a
 * multiple of 4: groups of 4 characters of the standard alphabet (A-Z a-z 0-9 + /), the last
 * group optionally "xx==" or "xxx="; nothing else anywhere (no whitespace, no URL-safe '-' '_',
 * no '=' before the end). Like binascii, the unused low bits of the last data character before
 * the padding are ignored ("QR==" decodes to "A" as "QQ==" does).
 *
 * Scalar decoder: four 256-entry tables map a character at each position of a group straight
 * to its bits inside the 24-bit little-endian output word (B64_BAD for a character outside the
 * alphabet), so a group is 4 loads, 3 ORs and one 4-byte store that overlaps the next group's
 * output by one byte. Errors are OR-ed over a block of 64 characters and checked once per
 * block; only a failing block is rescanned for the offset of its first bad character.
 */
#include <string.h>

#include "base64.h"
#include "edgevlm.h"

#define B64_BAD 0x01000000u                  /* above the 24 data bits of a group */
#define B64_BLOCK 64                         /* characters per error check */

/* The 6-bit value of character c, -1 outside the standard alphabet. */
#define B64_V(c) ((c) >= 'A' && (c) <= 'Z'   ? (c) - 'A'                                    \
                  : (c) >= 'a' && (c) <= 'z' ? (c) - 'a' + 26                               \
                  : (c) >= '0' && (c) <= '9' ? (c) - '0' + 52                               \
                  : (c) == '+'               ? 62                                           \
                  : (c) == '/'               ? 63                                           \
                                             : -1)
/* Group "abcd" (values va..vd) is 3 bytes: va<<2 | vb>>4, (vb&15)<<4 | vc>>2, (vc&3)<<6 | vd,
 * stored as bits 0-7, 8-15 and 16-23 of a little-endian word. */
#define B64_U(c) ((uint32_t)B64_V(c))
#define B64_T0(c) (B64_V(c) < 0 ? B64_BAD : B64_U(c) << 2)
#define B64_T1(c) (B64_V(c) < 0 ? B64_BAD : B64_U(c) >> 4 | (B64_U(c) & 15) << 12)
#define B64_T2(c) (B64_V(c) < 0 ? B64_BAD : B64_U(c) >> 2 << 8 | (B64_U(c) & 3) << 22)
#define B64_T3(c) (B64_V(c) < 0 ? B64_BAD : B64_U(c) << 16)

#define B64_R4(F, n) F(n), F(n + 1), F(n + 2), F(n + 3)
#define B64_R16(F, n) B64_R4(F, n), B64_R4(F, n + 4), B64_R4(F, n + 8), B64_R4(F, n + 12)
#define B64_R64(F, n) B64_R16(F, n), B64_R16(F, n + 16), B64_R16(F, n + 32), B64_R16(F, n + 48)
#define B64_R256(F) B64_R64(F, 0), B64_R64(F, 64), B64_R64(F, 128), B64_R64(F, 192)

static const uint32_t dec0[256] = {B64_R256(B64_T0)};
static const uint32_t dec1[256] = {B64_R256(B64_T1)};
static const uint32_t dec2[256] = {B64_R256(B64_T2)};
static const uint32_t dec3[256] = {B64_R256(B64_T3)};

static inline uint32_t group_word(const uint8_t *p) {
    return dec0[p[0]] | dec1[p[1]] | dec2[p[2]] | dec3[p[3]];
}

static inline void put3(uint8_t *o, uint32_t w) {
    o[0] = (uint8_t)w;
    o[1] = (uint8_t)(w >> 8);
    o[2] = (uint8_t)(w >> 16);
}

/* Writes the 3 bytes of w and one scratch byte after them. */
static inline void put4(uint8_t *o, uint32_t w) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(o, &w, 4);
#else
    put3(o, w);
#endif
}

static inline int in_alphabet(uint8_t c) {
    return !(dec0[c] & B64_BAD);
}

static size_t first_bad(const uint8_t *p, size_t n) {
    size_t i = 0;
    while (i < n && in_alphabet(p[i])) i++;
    return i;
}

/* Decodes the groups of in[0, n) (n a multiple of 4, no padding) to out[0, 3n/4), writing one
 * scratch byte at out[3n/4]. Returns n, or the offset of the first bad character. */
static size_t decode_groups(const uint8_t *in, size_t n, uint8_t *out) {
    size_t i = 0;
    for (; i + B64_BLOCK <= n; i += B64_BLOCK) {
        const uint8_t *p = in + i;
        uint8_t *o = out + i / 4 * 3;
        uint32_t err = 0;
        for (int g = 0; g < B64_BLOCK / 4; g++) {
            uint32_t w = group_word(p + 4 * g);
            err |= w;
            put4(o + 3 * g, w);
        }
        if (err & B64_BAD) return i + first_bad(p, B64_BLOCK);
    }
    for (; i < n; i += 4) {
        uint32_t w = group_word(in + i);
        if (w & B64_BAD) return i + first_bad(in + i, 4);
        put4(out + i / 4 * 3, w);
    }
    return n;
}

static const ev_b64_bulk *bulk_best(void) {
#if defined(__x86_64__)
    return ev_b64_bulk_x86_avx2();
#elif defined(__aarch64__)
    return ev_b64_bulk_arm_neon();
#else
    return NULL;
#endif
}

const char *edgevlm_base64_kernels(int32_t kernels) {
    const ev_b64_bulk *bulk = kernels == EDGEVLM_KERNELS_SCALAR ? NULL : bulk_best();
    return bulk ? bulk->name : "scalar";
}

edgevlm_status edgevlm_base64_decode(const char *text, size_t text_len, uint8_t *out,
                                     size_t out_cap, int32_t kernels, size_t *out_len,
                                     size_t *error_offset) {
    if (!out_len || !error_offset || (text_len && !text) ||
        (kernels != EDGEVLM_KERNELS_BEST && kernels != EDGEVLM_KERNELS_SCALAR &&
         kernels != EDGEVLM_KERNELS_FAST))
        return EDGEVLM_ERR_ARGUMENT;
    *out_len = 0;
    *error_offset = 0;
    if (text_len % 4 != 0) {
        *error_offset = text_len;
        return EDGEVLM_ERR_INVALID_INPUT;
    }
    if (text_len == 0) return EDGEVLM_OK;
    const uint8_t *in = (const uint8_t *)text;
    const uint8_t *last = in + text_len - 4;           /* the group that may hold padding */
    size_t pad = last[3] == '=' ? (last[2] == '=' ? 2 : 1) : 0;
    size_t decoded = text_len / 4 * 3 - pad;
    if (!out || out_cap < decoded) {
        *out_len = decoded;
        return EDGEVLM_ERR_ARGUMENT;
    }

    /* Every group before the last: the bulk decoder while it can, the scalar one after it.
     * The bulk decoder stops 16 characters (>= 10 output bytes) before the last group, so
     * its scratch bytes land inside out; the scalar one's single scratch byte likewise. */
    size_t body = text_len - 4, done = 0;
    const ev_b64_bulk *bulk = kernels == EDGEVLM_KERNELS_SCALAR ? NULL : bulk_best();
    if (bulk && body > 16) done = bulk->decode(in, body - 16, out);
    size_t stop = done + decode_groups(in + done, body - done, out + done / 4 * 3);
    if (stop != body) {
        *error_offset = stop;
        return EDGEVLM_ERR_INVALID_INPUT;
    }

    /* The last group: "abcd", "abc=" or "ab==". */
    uint8_t *o = out + body / 4 * 3;
    size_t bad = text_len;
    if (!in_alphabet(last[0])) {
        bad = body;
    } else if (!in_alphabet(last[1])) {
        bad = body + 1;
    } else if (pad == 2) {
        o[0] = (uint8_t)(dec0[last[0]] | dec1[last[1]]);
    } else if (!in_alphabet(last[2])) {
        bad = body + 2;                                /* '=' before a non-'=' included */
    } else if (pad == 1) {
        uint32_t w = dec0[last[0]] | dec1[last[1]] | dec2[last[2]];
        o[0] = (uint8_t)w;
        o[1] = (uint8_t)(w >> 8);
    } else if (!in_alphabet(last[3])) {
        bad = body + 3;
    } else {
        put3(o, group_word(last));
    }
    if (bad != text_len) {
        *error_offset = bad;
        return EDGEVLM_ERR_INVALID_INPUT;
    }
    *out_len = decoded;
    return EDGEVLM_OK;
}
