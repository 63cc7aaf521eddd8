/*
 * types.c - the element-type table (ggml ids and block layouts), half/bfloat16 conversions,
 * row dequantisation and llama.cpp's reference quantisers.
 *
 * The conversions here are the exact scalar reference: round to nearest even, subnormals,
 * infinities and NaNs handled bit for bit. SIMD paths elsewhere are tested against them.
 */
#include "types.h"

#include "util.h"

#include <math.h>
#include <string.h>

/* ---- half and bfloat16 ---------------------------------------------------------------- */

static inline float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

float ev_fp16_to_f32(ev_fp16 h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
        if (mant == 0) return f32_from_bits(sign);                  /* +-0 */
        uint32_t e = 113;                                            /* subnormal: normalise */
        while (!(mant & 0x400u)) {
            mant <<= 1;
            e--;
        }
        return f32_from_bits(sign | (e << 23) | ((mant & 0x3ffu) << 13));
    }
    if (exp == 31) return f32_from_bits(sign | 0x7f800000u | (mant << 13));   /* inf, NaN */
    return f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
}

ev_fp16 ev_f32_to_fp16(float f) {
    uint32_t x = f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    x &= 0x7fffffffu;
    if (x >= 0x7f800000u) {                                          /* inf or NaN */
        if (x == 0x7f800000u) return (ev_fp16)(sign | 0x7c00u);
        return (ev_fp16)(sign | 0x7e00u | ((x >> 13) & 0x3ffu));     /* quiet NaN, payload kept */
    }
    if (x >= 0x477ff000u) return (ev_fp16)(sign | 0x7c00u);          /* >= 65520 rounds to inf */
    uint32_t result, rem, half;
    if (x < 0x38800000u) {                                           /* below 2^-14: subnormal */
        if (x < 0x33000000u) return (ev_fp16)sign;                   /* below 2^-25: to zero */
        uint32_t e = x >> 23;
        uint32_t m = (x & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e;                                    /* 14..24 */
        result = m >> shift;
        rem = m & ((1u << shift) - 1);
        half = 1u << (shift - 1);
    } else {
        result = (((x >> 23) - 112) << 10) | ((x >> 13) & 0x3ffu);
        rem = x & 0x1fffu;
        half = 0x1000u;
    }
    if (rem > half || (rem == half && (result & 1u))) result++;     /* carries into exponent */
    return (ev_fp16)(sign | result);
}

float ev_bf16_to_f32(ev_bf16 h) {
    return f32_from_bits((uint32_t)h << 16);
}

ev_bf16 ev_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (ev_bf16)((x >> 16) | 0x40u);   /* quiet NaN */
    return (ev_bf16)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* ---- rows to float32 ------------------------------------------------------------------ */

static void f32_to_float(const void *src, float *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

static void f16_to_float(const void *src, float *dst, int64_t n) {
    const ev_fp16 *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = ev_fp16_to_f32(s[i]);
}

static void bf16_to_float(const void *src, float *dst, int64_t n) {
    const ev_bf16 *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = ev_bf16_to_f32(s[i]);
}

static void q8_0_to_float(const void *src, float *dst, int64_t n) {
    const ev_block_q8_0 *b = src;
    for (int64_t i = 0; i < n / EV_QK; i++) {
        float d = ev_fp16_to_f32(b[i].d);
        for (int j = 0; j < EV_QK; j++) dst[i * EV_QK + j] = (float)b[i].qs[j] * d;
    }
}

static void q4_0_to_float(const void *src, float *dst, int64_t n) {
    const ev_block_q4_0 *b = src;
    for (int64_t i = 0; i < n / EV_QK; i++) {
        float d = ev_fp16_to_f32(b[i].d);
        for (int j = 0; j < EV_QK / 2; j++) {
            dst[i * EV_QK + j] = (float)((b[i].qs[j] & 0x0f) - 8) * d;
            dst[i * EV_QK + j + EV_QK / 2] = (float)((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

/* ---- rows from float32 (the reference rounding) ----------------------------------------- */

static void f32_from_float(const float *src, void *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

static void f16_from_float(const float *src, void *dst, int64_t n) {
    ev_fp16 *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = ev_f32_to_fp16(src[i]);
}

static void bf16_from_float(const float *src, void *dst, int64_t n) {
    ev_bf16 *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = ev_f32_to_bf16(src[i]);
}

static void q8_0_from_float(const float *src, void *dst, int64_t n) {
    ev_quantize_row_q8_0(src, dst, n);
}

static void q4_0_from_float(const float *src, void *dst, int64_t n) {
    ev_quantize_row_q4_0(src, dst, n);
}

/* ---- the table ------------------------------------------------------------------------ */

static const ev_type_traits TYPES[] = {
    {EV_TYPE_F32, "f32", 1, 4, 0, f32_to_float, f32_from_float},
    {EV_TYPE_F16, "f16", 1, 2, 0, f16_to_float, f16_from_float},
    {EV_TYPE_BF16, "bf16", 1, 2, 0, bf16_to_float, bf16_from_float},
    {EV_TYPE_Q8_0, "q8_0", EV_QK, (int32_t)sizeof(ev_block_q8_0), 1, q8_0_to_float,
     q8_0_from_float},
    {EV_TYPE_Q4_0, "q4_0", EV_QK, (int32_t)sizeof(ev_block_q4_0), 1, q4_0_to_float,
     q4_0_from_float},
};
#define N_TYPES ((int)(sizeof TYPES / sizeof TYPES[0]))

_Static_assert(sizeof(ev_block_q8_0) == 34, "Q8_0 block is 34 bytes");
_Static_assert(sizeof(ev_block_q4_0) == 18, "Q4_0 block is 18 bytes");

int ev_type_count(void) {
    return N_TYPES;
}

const ev_type_traits *ev_type_at(int i) {
    return i >= 0 && i < N_TYPES ? &TYPES[i] : NULL;
}

const ev_type_traits *ev_type_get(int32_t type) {
    for (int i = 0; i < N_TYPES; i++)
        if (TYPES[i].type == type) return &TYPES[i];
    return NULL;
}

const char *ev_type_list(char *buf, size_t len) {
    if (!buf || !len) return buf;
    buf[0] = '\0';
    for (size_t i = 0, used = 0; i < N_TYPES; i++)
        used = ev_append(buf, len, used, ", ", TYPES[i].name);
    for (char *c = buf; *c; c++)
        if (*c >= 'a' && *c <= 'z') *c = (char)(*c - 'a' + 'A');
    return buf;
}

int64_t ev_row_bytes(int32_t type, int64_t n) {
    const ev_type_traits *t = ev_type_get(type);
    if (!t || n < 0 || n % t->block_size != 0) return 0;
    int64_t blocks = n / t->block_size;
    if (blocks > INT64_MAX / t->type_size) return 0;
    return blocks * t->type_size;
}

/* ---- reference quantisers (llama.cpp's quantize_row_*_ref) ----------------------------- */

void ev_quantize_row_q8_0(const float *x, ev_block_q8_0 *y, int64_t n) {
    for (int64_t i = 0; i < n / EV_QK; i++) {
        const float *xb = x + i * EV_QK;
        float amax = 0.0f;
        for (int j = 0; j < EV_QK; j++) amax = fmaxf(amax, fabsf(xb[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = ev_f32_to_fp16(d);
        for (int j = 0; j < EV_QK; j++) y[i].qs[j] = (int8_t)roundf(xb[j] * id);
    }
}

void ev_quantize_row_q4_0(const float *x, ev_block_q4_0 *y, int64_t n) {
    for (int64_t i = 0; i < n / EV_QK; i++) {
        const float *xb = x + i * EV_QK;
        float amax = 0.0f, max = 0.0f;     /* max: the value of largest magnitude, signed */
        for (int j = 0; j < EV_QK; j++) {
            if (amax < fabsf(xb[j])) {
                amax = fabsf(xb[j]);
                max = xb[j];
            }
        }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = ev_f32_to_fp16(d);
        for (int j = 0; j < EV_QK / 2; j++) {
            int q0 = (int8_t)(xb[j] * id + 8.5f);
            int q1 = (int8_t)(xb[j + EV_QK / 2] * id + 8.5f);
            q0 = q0 < 15 ? q0 : 15;
            q1 = q1 < 15 ? q1 : 15;
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}
