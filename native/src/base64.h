/*
 * base64.h - the SIMD bulk decoders behind edgevlm_base64_decode (base64.c).
 *
 * A bulk decoder takes the middle of a strict base64 text (no padding may occur there) and
 * decodes whole blocks while every character of the block is in the standard alphabet. It
 * stops before the first block holding anything else and returns the characters consumed;
 * base64.c's scalar reference decodes the rest and finds the exact offset of a bad character.
 * Selected at run time (the CPU's best, or none for the scalar reference); tests compare them.
 */
#ifndef EDGEVLM_BASE64_H
#define EDGEVLM_BASE64_H

#include <stddef.h>
#include <stdint.h>

/* Bytes a bulk decoder may write past the 3/4 * consumed bytes it decoded. */
#define EV_B64_BULK_SLACK 8

/* Decodes blocks of in[0, n); returns the characters consumed (a multiple of 4, at most n)
 * and writes 3/4 of that many bytes to out (plus at most EV_B64_BULK_SLACK scratch bytes). */
typedef size_t (*ev_b64_bulk_fn)(const uint8_t *in, size_t n, uint8_t *out);

typedef struct ev_b64_bulk {
    const char *name;
    ev_b64_bulk_fn decode;
} ev_b64_bulk;

/* NULL when the CPU (or the build's architecture) lacks the extension. */
const ev_b64_bulk *ev_b64_bulk_x86_avx2(void);
const ev_b64_bulk *ev_b64_bulk_arm_neon(void);

#endif
