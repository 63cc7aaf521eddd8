/* util.h - small helpers shared by the core: error formatting, aligned allocation. */
#ifndef EDGEVLM_UTIL_H
#define EDGEVLM_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Formats into err (when err != NULL and err_len > 0), always NUL-terminated. */
static inline void ev_errf(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline void ev_errf(char *err, size_t err_len, const char *fmt, ...) {
    if (!err || err_len == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

/* 64-byte aligned allocation of n bytes (n may be 0); NULL on failure. Not zeroed: large
 * buffers stay untouched (and cost no resident memory) until used. */
static inline void *ev_alloc(size_t n) {
    void *p = NULL;
    size_t rounded = (n + 63) & ~(size_t)63;
    if (rounded < n) return NULL;
    if (posix_memalign(&p, 64, rounded ? rounded : 64) != 0) return NULL;
    return p;
}

/* Appends sep (when used > 0) and item to the NUL-terminated buf[len] holding used bytes,
 * truncating at len - 1; returns the new length. For "a, b, c" lists in messages. */
static inline size_t ev_append(char *buf, size_t len, size_t used, const char *sep,
                               const char *item) {
    for (const char *c = used ? sep : ""; *c && used + 1 < len; c++) buf[used++] = *c;
    for (const char *c = item; *c && used + 1 < len; c++) buf[used++] = *c;
    if (used < len) buf[used] = '\0';
    return used;
}

/* a * b, or 0 on overflow (sizes are never legitimately 0 where this is used) */
static inline size_t ev_mul_size(size_t a, size_t b) {
    size_t r;
    return __builtin_mul_overflow(a, b, &r) ? 0 : r;
}

/* ev_alloc of a [rows, cols] f32 buffer; NULL on failure, on overflow or when it is empty */
static inline float *ev_alloc_f32(int64_t rows, int64_t cols) {
    size_t n = ev_mul_size(ev_mul_size((size_t)rows, (size_t)cols), sizeof(float));
    return n ? (float *)ev_alloc(n) : NULL;
}

#endif
