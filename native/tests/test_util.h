/* test_util.h - a tiny assertion harness for the C tests: each test_*.c is one program that
 * prints "name: N passed, N failed" and exits non-zero on any failure. */
#ifndef EDGEVLM_TEST_UTIL_H
#define EDGEVLM_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tu_passed, tu_failed;

#define CHECK(cond) do { if (cond) tu_passed++; else { tu_failed++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define CHECK_MSG(cond, ...) do { if (cond) tu_passed++; else { tu_failed++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)
#define CHECK_NEAR(a, b, tol) do { double _a = (a), _b = (b); \
    if (fabs(_a - _b) <= (tol)) tu_passed++; else { tu_failed++; \
    fprintf(stderr, "%s:%d: %s = %.9g, %s = %.9g, |diff| %.3g > %.3g\n", __FILE__, __LINE__, \
            #a, _a, #b, _b, fabs(_a - _b), (double)(tol)); } } while (0)

static inline int tu_report(const char *name) {
    printf("%s: %d passed, %d failed\n", name, tu_passed, tu_failed);
    return tu_failed ? 1 : 0;
}

/* xorshift64* for reproducible test data */
static inline unsigned long long tu_rand_u64(unsigned long long *s) {
    *s ^= *s >> 12; *s ^= *s << 25; *s ^= *s >> 27; return *s * 2685821657736338717ULL;
}
static inline float tu_randf(unsigned long long *s) {   /* uniform in [-1, 1) */
    return (float)((tu_rand_u64(s) >> 40) * (1.0 / 8388608.0) - 1.0);
}
/* a standard normal deviate (Box-Muller over tu_rand_u64) */
static inline float tu_gaussian(unsigned long long *s) {
    double u1 = (tu_rand_u64(s) >> 11) * (1.0 / 9007199254740992.0);
    double u2 = (tu_rand_u64(s) >> 11) * (1.0 / 9007199254740992.0);
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
/* FNV-1a 64 over the little-endian bytes of n floats (the fixture generators' hash) */
static inline uint64_t tu_fnv1a64(const float *v, int n) {
    uint64_t h = 0xcbf29ce484222325ull;
    const uint8_t *b = (const uint8_t *)v;
    for (int i = 0; i < 4 * n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

#endif
