/* base64_reference.h - an independent bit-by-bit decoder of edgevlm's strict base64, shared
 * by native/tests/test_base64.c and tests/fuzz/fuzz_base64.c: the oracle both compare the
 * scalar and SIMD decoders against. */
#ifndef EDGEVLM_BASE64_REFERENCE_H
#define EDGEVLM_BASE64_REFERENCE_H

#include <stddef.h>
#include <stdint.h>

/* The alphabet value of c (0..63), -1 outside it. */
static int value_of(uint8_t c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* The reference: a character at offset i is fine when it is in the alphabet, or when it is a
 * '=' ending the text after 3 data characters of its group, or the first of a "==" ending it
 * after 2. Data bits are collected 6 at a time; leftover bits (< 8) are dropped. Returns 1
 * and fills out/out_len when valid, else 0 with *bad = the first offending offset. */
static int reference(const uint8_t *t, size_t n, uint8_t *out, size_t *out_len, size_t *bad) {
    if (n % 4) {
        *bad = n;
        return 0;
    }
    uint32_t acc = 0;
    int bits = 0;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int v = value_of(t[i]);
        if (v >= 0) {
            acc = (acc << 6 | (uint32_t)v) & 0xffffff;
            bits += 6;
            if (bits >= 8) {
                bits -= 8;
                out[o++] = (uint8_t)(acc >> bits);
            }
            continue;
        }
        int pad_ok = t[i] == '=' && ((i == n - 1 && i % 4 == 3) ||
                                     (i == n - 2 && i % 4 == 2 && t[n - 1] == '='));
        if (!pad_ok) {
            *bad = i;
            return 0;
        }
        if (i == n - 2) break;
    }
    *out_len = o;
    return 1;
}

#endif
